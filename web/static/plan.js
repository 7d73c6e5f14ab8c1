// Plan: a Gantt chart of the current plan by region and hardware over time, the assignments and unplanned jobs.
"use strict";
(async () => {
  const $ = (id) => document.getElementById(id);
  const palette = ["#2a7f62", "#3b6ea5", "#b3541e", "#7a4fa3", "#a38b2a", "#1f8a99", "#a33d5c", "#5b6f2a"];

  // Jobs that overlap in time on the same region and hardware get their own lane, so no bar hides another.
  function lanes(assignments) {
    const bars = assignments.flatMap((a) => (a.chunks && a.chunks.length ? a.chunks : [[a.start_at, a.end_at]])
      .map(([s, e]) => ({ a, s, e, t0: new Date(s).getTime(), t1: new Date(e).getTime() })));
    bars.sort((x, y) => x.t0 - y.t0);
    const ends = {}; // row -> end time of each lane
    for (const b of bars) {
      const row = `${b.a.region} · ${b.a.hardware}`;
      const laneEnds = ends[row] || (ends[row] = []);
      let lane = laneEnds.findIndex((t) => t <= b.t0);
      if (lane < 0) { lane = laneEnds.length; laneEnds.push(0); }
      laneEnds[lane] = b.t1;
      b.y = lane === 0 ? row : `${row} (${lane + 1})`;
    }
    return bars;
  }

  function gantt(plan) {
    const bars = lanes(plan.assignments);
    const rows = [...new Set(bars.map((b) => b.y))].sort().reverse();
    const regions = [...new Set(plan.assignments.map((a) => a.region))].sort();
    const traces = regions.map((region, i) => {
      const mine = bars.filter((b) => b.a.region === region);
      return {
        type: "bar", orientation: "h", name: region, marker: { color: palette[i % palette.length], line: { color: "#fff", width: 1 } },
        y: mine.map((b) => b.y), base: mine.map((b) => b.s), x: mine.map((b) => b.t1 - b.t0),
        text: mine.map((b) => `#${b.a.job_id} ${GS.esc(b.a.job_name)}`), textposition: "inside", insidetextanchor: "start",
        textangle: 0, textfont: { size: 10, color: "#fff" }, constraintext: "inside",
        hovertext: mine.map((b) => `#${b.a.job_id} ${GS.esc(b.a.job_name)}<br>${b.a.gpu_count} GPUs<br>${GS.fmtTime(b.s)} – ${GS.fmtTime(b.e)}`),
        hoverinfo: "text",
      };
    });
    const narrow = window.innerWidth < 600;
    const el = document.getElementById("gantt");
    el.style.height = `${Math.max(260, 60 + 34 * rows.length)}px`;
    Plotly.newPlot("gantt", traces, {
      barmode: "overlay", bargap: 0.25, margin: { l: narrow ? 90 : 150, r: 10, t: 28, b: 40 },
      xaxis: { type: "date", range: [plan.horizon_start, plan.horizon_end] },
      yaxis: { type: "category", categoryorder: "array", categoryarray: rows, automargin: true },
      legend: { orientation: "h", x: 1, xanchor: "right", y: 1.0, yanchor: "bottom" }, showlegend: regions.length > 1,
      shapes: [{ type: "line", xref: "x", yref: "paper", x0: new Date().toISOString(), x1: new Date().toISOString(), y0: 0, y1: 1,
                 line: { color: "#999", dash: "dot", width: 1 } }],
    }, GS.plotConfig);
  }

  function render(plan) {
    $("plan-summary").innerHTML = `Plan #${plan.id} · ${GS.esc(plan.status)} · ${GS.esc(plan.solver)} · objective ${GS.esc(plan.objective)}
      · made ${GS.fmtTime(plan.created_at)} (${GS.esc(plan.trigger)})${plan.gap_pct === null ? "" : ` · gap ${GS.num(plan.gap_pct, 2)} %`}
      · horizon ${GS.fmtTime(plan.horizon_start)} – ${GS.fmtTime(plan.horizon_end)} · ${plan.assignments.length} assignment(s) shown`;
    gantt(plan);
    const tb = document.querySelector("#assign-table tbody");
    tb.innerHTML = plan.assignments.map((a) => {
      const saving = a.run_now_cost === null ? "—" : GS.num(a.run_now_cost - a.cost, 2);
      return `<tr data-job-id="${a.job_id}"><td><a href="/ui/jobs/${a.job_id}">#${a.job_id} ${GS.esc(a.job_name)}</a></td>
        <td>${GS.esc(a.region)}</td><td>${GS.esc(a.hardware)}</td><td class="num">${a.gpu_count}</td>
        <td>${GS.fmtTime(a.start_at)}</td><td>${GS.fmtTime(a.end_at)}</td><td class="num">${GS.num(a.energy_kwh, 1)}</td>
        <td class="num">${GS.num(a.cost, 2)} ${GS.esc(a.currency)}</td><td class="num">${GS.num(a.carbon_kg, 1)}</td><td class="num">${saving}</td></tr>`;
    }).join("") || '<tr><td colspan="10" class="muted">None of your jobs is in this plan.</td></tr>';
    $("totals").innerHTML = plan.region_totals.length ? `<h2>Every tenant, per region</h2><div class="scroll"><table class="grid">
      <thead><tr><th>Region</th><th class="num">Jobs</th><th class="num">Energy kWh</th><th class="num">Cost</th><th class="num">CO2 kg</th></tr></thead><tbody>${
      plan.region_totals.map((t) => `<tr><td>${GS.esc(t.region)}</td><td class="num">${t.jobs}</td><td class="num">${GS.num(t.energy_kwh, 1)}</td>
        <td class="num">${GS.num(t.cost, 2)}</td><td class="num">${GS.num(t.carbon_kg, 1)}</td></tr>`).join("")}</tbody></table></div>` : "";
    $("unplanned").innerHTML = plan.unplanned.length ? `<h2>Not planned</h2><ul>${plan.unplanned.map((u) =>
      `<li><a href="/ui/jobs/${u.job_id}">#${u.job_id} ${GS.esc(u.job_name)}</a>: ${GS.esc(u.reason)} <span class="muted">${GS.esc(u.detail)}</span></li>`).join("")}</ul>` : "";
  }

  async function load() {
    try {
      render(await GS.busy("Loading the plan", () => GS.api("GET", "/api/v1/plans/current")));
    } catch (err) {
      $("plan-summary").textContent = err.status === 404 ? "No plan yet." : (err.describe ? err.describe() : String(err));
    }
  }
  const btn = $("replan-btn");
  if (btn) {
    btn.addEventListener("click", async () => {
      btn.disabled = true;
      try {
        render(await GS.busy("Re-planning the fleet (solver running)", () => GS.api("POST", "/api/v1/plans", {})));
      } catch (err) {
        $("plan-summary").textContent = err.describe ? err.describe() : String(err);
      } finally { btn.disabled = false; }
    });
  }
  load();
})();
