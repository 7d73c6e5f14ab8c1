// Plan: a Gantt chart of the current plan by region and hardware over time, the assignments and unplanned jobs.
"use strict";
(async () => {
  const $ = (id) => document.getElementById(id);
  const palette = ["#2a7f62", "#3b6ea5", "#b3541e", "#7a4fa3", "#a38b2a", "#1f8a99", "#a33d5c", "#5b6f2a"];

  function gantt(plan) {
    const rows = [...new Set(plan.assignments.map((a) => `${a.region} · ${a.hardware}`))].sort().reverse();
    const regions = [...new Set(plan.assignments.map((a) => a.region))].sort();
    const traces = regions.map((region, i) => {
      const bars = plan.assignments.filter((a) => a.region === region).flatMap((a) =>
        (a.chunks && a.chunks.length ? a.chunks : [[a.start_at, a.end_at]]).map(([s, e]) => ({ a, s, e })));
      return {
        type: "bar", orientation: "h", name: region, marker: { color: palette[i % palette.length], line: { color: "#fff", width: 1 } },
        y: bars.map((b) => `${b.a.region} · ${b.a.hardware}`), base: bars.map((b) => b.s),
        x: bars.map((b) => new Date(b.e) - new Date(b.s)),
        text: bars.map((b) => `#${b.a.job_id} ${b.a.job_name || ""}`), textposition: "inside", insidetextanchor: "start",
        hovertext: bars.map((b) => `#${b.a.job_id} ${b.a.job_name || ""}<br>${b.a.gpu_count} GPUs<br>${GS.fmtTime(b.s)} – ${GS.fmtTime(b.e)}`),
        hoverinfo: "text",
      };
    });
    const narrow = window.innerWidth < 600;
    Plotly.newPlot("gantt", traces, {
      barmode: "overlay", margin: { l: narrow ? 90 : 130, r: 10, t: 10, b: 40 },
      xaxis: { type: "date", range: [plan.horizon_start, plan.horizon_end] },
      yaxis: { type: "category", categoryorder: "array", categoryarray: rows, automargin: true },
      legend: { orientation: "h", y: -0.12 }, showlegend: regions.length > 1,
      shapes: [{ type: "line", xref: "x", yref: "paper", x0: new Date().toISOString(), x1: new Date().toISOString(), y0: 0, y1: 1,
                 line: { color: "#999", dash: "dot", width: 1 } }],
    }, GS.plotConfig);
  }

  function render(plan) {
    $("plan-summary").innerHTML = `Plan #${plan.id} · ${GS.esc(plan.status)} · ${GS.esc(plan.solver)} · objective ${GS.esc(plan.objective)}
      · made ${GS.fmtTime(plan.created_at)} (${GS.esc(plan.trigger)})${plan.gap_pct === null ? "" : ` · gap ${GS.num(plan.gap_pct, 2)} %`}
      · horizon ${GS.fmtTime(plan.horizon_start)} – ${GS.fmtTime(plan.horizon_end)} · ${plan.assignments.length} of your jobs planned`;
    gantt(plan);
    const tb = document.querySelector("#assign-table tbody");
    tb.innerHTML = plan.assignments.map((a) => {
      const saving = a.run_now_cost === null ? "—" : GS.num(a.run_now_cost - a.cost, 2);
      return `<tr data-job-id="${a.job_id}"><td><a href="/ui/jobs/${a.job_id}">#${a.job_id} ${GS.esc(a.job_name)}</a></td>
        <td>${GS.esc(a.region)}</td><td>${GS.esc(a.hardware)}</td><td class="num">${a.gpu_count}</td>
        <td>${GS.fmtTime(a.start_at)}</td><td>${GS.fmtTime(a.end_at)}</td><td class="num">${GS.num(a.energy_kwh, 1)}</td>
        <td class="num">${GS.num(a.cost, 2)} ${GS.esc(a.currency)}</td><td class="num">${GS.num(a.carbon_kg, 1)}</td><td class="num">${saving}</td></tr>`;
    }).join("") || '<tr><td colspan="10" class="muted">None of your jobs is in this plan.</td></tr>';
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
