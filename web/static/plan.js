// Plan: a Gantt chart of the current plan (or of plan N with ?id=N) by region and hardware over time, the
// assignments and unplanned jobs; below, the plan history, newest first, page by page.
"use strict";
(async () => {
  const $ = (id) => document.getElementById(id);
  let viewId = new URLSearchParams(location.search).get("id"); // null: the current plan
  let shownId = null; // the plan on screen, marked in the history
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
    // /plans/current and POST /plans answer with the current plan (is_current may be absent there).
    const which = plan.is_current === false
      ? 'not the current plan (<a href="/ui/plan" id="current-link">show the current plan</a>)' : "the current plan";
    const pruned = plan.pruned_at
      ? ` · assignments pruned ${GS.fmtTime(plan.pruned_at)}: the chart may be incomplete` : "";
    // why a failed plan failed (operator admins only; the reasons name every tenant's jobs)
    const why = plan.problems && plan.problems.length
      ? ` · <span class="error">${GS.esc(plan.problems.slice(0, 3).join("; "))}</span>` : "";
    shownId = Number(plan.id);
    markShown();
    $("plan-summary").innerHTML = `Plan #${GS.esc(plan.id)} · ${which}${pruned}${why}
      · ${GS.esc(plan.status)} · ${GS.esc(plan.solver)} · objective ${GS.esc(plan.objective)}
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
    if (viewId !== null && !/^[1-9][0-9]*$/.test(viewId)) {
      $("plan-summary").textContent = `No plan #${viewId}.`;
      return;
    }
    const path = viewId === null ? "/api/v1/plans/current" : `/api/v1/plans/${viewId}`;
    try {
      render(await GS.busy("Loading the plan", () => GS.api("GET", path)));
    } catch (err) {
      const missing = viewId === null ? "No plan yet." : `No plan #${viewId}.`;
      $("plan-summary").textContent = err.status === 404 ? missing : (err.describe ? err.describe() : String(err));
    }
  }

  // Plan history: fleet-wide figures come only for operator admins (fleet is null for everyone else).
  const BASE_COLS = [["Plan"], ["Made"], ["Trigger"], ["Status"], ["Objective"], ["Gap %", "num"], ["Solve s", "num"]];
  const FLEET_COLS = [["Planned", "num", "jobs planned, every tenant"], ["Not planned", "num", "jobs left out"],
                      ["Cost", "num"], ["Saving", "num", "against running every planned job now"], ["CO2 kg", "num"]];
  const histBody = document.querySelector("#history-table tbody");
  const olderBtn = $("older-btn");
  let cursor = null;
  let withFleet = false;

  function historyHeader() {
    const cols = withFleet ? BASE_COLS.concat(FLEET_COLS) : BASE_COLS;
    document.querySelector("#history-table thead tr").innerHTML =
      cols.map(([name, cls, title]) => `<th${cls ? ` class="${cls}"` : ""}${title ? ` title="${title}"` : ""}>${name}</th>`)
        .join("");
    return cols.length;
  }

  function markShown() {
    histBody.querySelectorAll("tr[data-plan-id]").forEach((tr) => {
      const shown = Number(tr.dataset.planId) === shownId;
      tr.classList.toggle("shown", shown);
      if (shown) tr.setAttribute("aria-current", "true"); else tr.removeAttribute("aria-current");
    });
  }

  function fleetCells(f) {
    if (!f) return '<td class="num">—</td>'.repeat(FLEET_COLS.length);
    const cur = GS.esc(f.currency);
    const known = (x) => x !== null && x !== undefined;
    const saving = known(f.run_now_cost) && known(f.cost) ? f.run_now_cost - f.cost : null;
    return `<td class="num">${GS.num(f.jobs_assigned, 0)}</td><td class="num">${GS.num(f.jobs_unplanned, 0)}</td>
      <td class="num">${GS.num(f.cost, 2)} ${cur}</td>
      <td class="num${saving > 0 ? " better" : ""}">${saving === null ? "—" : `${GS.num(saving, 2)} ${cur}`}</td>
      <td class="num">${GS.num(f.carbon_kg, 1)}</td>`;
  }

  function historyRow(p) {
    const id = Number(p.id);
    const tr = GS.el("tr", { "data-plan-id": id });
    const badge = p.is_current ? ' <span class="state current">current</span>' : "";
    const pruned = p.pruned_at
      ? ` <span class="muted" title="pruned ${GS.esc(GS.fmtTime(p.pruned_at))}">assignments pruned</span>` : "";
    const value = p.objective_value === null || p.objective_value === undefined ? ""
      : ` title="objective value ${GS.esc(GS.num(p.objective_value, 2))}"`;
    tr.innerHTML = `<td><a href="/ui/plan?id=${id}">#${id}</a>${badge}</td><td>${GS.fmtTime(p.created_at)}</td>
      <td>${GS.esc(p.trigger)}</td><td>${GS.esc(p.status)}${pruned}</td><td${value}>${GS.esc(p.objective)}</td>
      <td class="num">${GS.num(p.gap_pct, 2)}</td><td class="num">${GS.num(p.solve_s, 1)}</td>
      ${withFleet ? fleetCells(p.fleet) : ""}`;
    return tr;
  }

  async function loadHistory(reset) {
    const q = new URLSearchParams({ limit: "20" });
    if (!reset && cursor) q.set("cursor", cursor);
    olderBtn.disabled = true;
    try {
      const page = await GS.busy("Loading the plan history", () => GS.api("GET", "/api/v1/plans?" + q));
      if (reset) {
        histBody.innerHTML = "";
        withFleet = page.items.some((p) => p.fleet);
        historyHeader();
      }
      page.items.forEach((p) => histBody.appendChild(historyRow(p)));
      if (!histBody.children.length) {
        histBody.innerHTML = `<tr><td colspan="${historyHeader()}" class="muted">No plans yet.</td></tr>`;
      }
      cursor = page.next_cursor;
      olderBtn.hidden = !cursor;
      markShown();
    } catch (err) {
      const cols = reset ? historyHeader() : document.querySelectorAll("#history-table thead th").length;
      if (reset) histBody.innerHTML = "";
      const msg = GS.esc(err.describe ? err.describe() : err);
      histBody.appendChild(GS.el("tr", {}, `<td colspan="${cols}" class="error">${msg}</td>`));
    } finally { olderBtn.disabled = false; }
  }
  olderBtn.addEventListener("click", () => loadHistory(false));

  // A re-plan is a run: POST answers 202 at once; the run is polled until a worker has stored its plan.
  let replanLabel = "Re-planning the fleet";
  async function replanRun() {
    let run = await GS.api("POST", "/api/v1/plans", {});
    while (run.state === "queued" || run.state === "running") {
      replanLabel = run.state === "queued" ? "Re-plan queued (waiting for a worker)"
        : `Re-planning the fleet: ${run.phase} ${Math.round(run.progress * 100)} %`;
      await new Promise((resolve) => setTimeout(resolve, 1000));
      run = await GS.api("GET", `/api/v1/plans/runs/${run.id}`);
    }
    replanLabel = "Re-planning the fleet";
    if (run.plan_id === null) throw new Error(`re-plan failed: ${run.error || "no plan"}`);
    return GS.api("GET", `/api/v1/plans/${run.plan_id}`);
  }

  const btn = $("replan-btn");
  if (btn) {
    btn.addEventListener("click", async () => {
      btn.disabled = true;
      try {
        const plan = await GS.busy(() => replanLabel, replanRun);
        if (viewId !== null) { viewId = null; window.history.replaceState(null, "", "/ui/plan"); }
        render(plan);
        loadHistory(true);
      } catch (err) {
        $("plan-summary").textContent = err.describe ? err.describe() : String(err);
      } finally { btn.disabled = false; }
    });
  }
  load();
  loadHistory(true);
})();
