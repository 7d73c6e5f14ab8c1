// Plan at fleet scale: the overview (GPUs in use against inventory, power against budget), an aggregated Gantt
// (GPUs in use per region and hardware over time) that drills down into a lane or a time window, and the
// assignments page by page, filtered and sorted by the API. ?id=N shows plan N; the history is in plan_history.js.
"use strict";
(async () => {
  const $ = (id) => document.getElementById(id);
  let viewId = new URLSearchParams(location.search).get("id"); // null: the current plan
  const palette = ["#2a7f62", "#3b6ea5", "#b3541e", "#7a4fa3", "#a38b2a", "#1f8a99", "#a33d5c", "#5b6f2a"];
  const natural = (a, b) => a.localeCompare(b, undefined, { numeric: true, sensitivity: "base" });
  const narrow = () => window.innerWidth < 600;
  const state = { sort: "start_at", page: 1, per_page: 25, from: null, to: null };
  let overview = null;
  const base = () => (viewId === null ? "/api/v1/plans/current" : `/api/v1/plans/${viewId}`);

  function times(ov) {
    const t0 = new Date(ov.bucket_start).getTime();
    return Array.from({ length: ov.buckets }, (_, i) => new Date(t0 + i * ov.bucket_minutes * 60000).toISOString());
  }
  const laneName = (l) => `${l.region} · ${l.hardware}`;

  function drawOverview(ov) {
    const x = times(ov);
    const lanes = [...ov.lanes].sort((a, b) => natural(laneName(a), laneName(b)));
    const margin = { l: 50, r: 10, t: 10, b: 30 };
    const legend = { orientation: "h", y: -0.25, font: { size: 10 } };
    const inventory = lanes.reduce((s, l) => s + l.inventory_gpus, 0);
    Plotly.newPlot("ov-gpus", [
      ...lanes.map((l, i) => ({ type: "scatter", mode: "lines", stackgroup: "gpus", name: laneName(l), x, y: l.gpus_in_use,
        line: { width: 0.5, color: palette[i % palette.length] } })),
      { type: "scatter", mode: "lines", name: "inventory", x: [x[0], x[x.length - 1]], y: [inventory, inventory],
        line: { color: "#000", dash: "dash", width: 1 } },
    ], { margin, legend, yaxis: { title: { text: "GPUs" } }, xaxis: { type: "date" } }, GS.plotConfig);
    const budget = ov.regions.reduce((s, r) => s + r.budget_kw, 0);
    Plotly.newPlot("ov-power", [
      ...ov.regions.map((r, i) => ({ type: "scatter", mode: "lines", stackgroup: "kw", name: r.region, x, y: r.power_kw,
        line: { width: 0.5, color: palette[i % palette.length] } })),
      { type: "scatter", mode: "lines", name: "budget", x: [x[0], x[x.length - 1]], y: [budget, budget],
        line: { color: "#b00", dash: "dash", width: 1 } },
    ], { margin, legend, yaxis: { title: { text: "kW" } }, xaxis: { type: "date" } }, GS.plotConfig);
    // The aggregated Gantt: one lane per region and hardware, in natural order, the share of inventory in use.
    const names = lanes.map(laneName);
    const el = $("gantt-overview");
    el.style.height = `${Math.min(480, 70 + 22 * lanes.length)}px`;
    Plotly.newPlot(el, [{
      type: "heatmap", x, y: names, colorscale: "Greens", zmin: 0, zmax: 100, colorbar: { title: { text: "% used" }, thickness: 10 },
      z: lanes.map((l) => l.gpus_in_use.map((g) => (l.inventory_gpus ? Math.min(100, (100 * g) / l.inventory_gpus) : (g ? 100 : 0)))),
      customdata: lanes.map((l) => l.gpus_in_use.map((g) => `${GS.num(g, 1)} of ${l.inventory_gpus} GPUs`)),
      hovertemplate: "%{y}<br>%{x}<br>%{customdata}<extra></extra>", xgap: 0, ygap: 1,
    }], { margin: { l: narrow() ? 90 : 130, r: 10, t: 30, b: 10 }, xaxis: { type: "date", side: "top" },
          yaxis: { type: "category", categoryorder: "array", categoryarray: [...names].reverse(), automargin: true } },
    GS.plotConfig);
    el.on("plotly_click", (ev) => { // drill down into one lane
      const [region, hardware] = String(ev.points[0].y).split(" · ");
      $("af-region").value = region; $("af-hardware").value = hardware;
      state.page = 1; loadPage();
    });
    el.on("plotly_relayout", (ev) => { // zoom: the table follows the time window
      if (ev["xaxis.range[0]"]) { state.from = new Date(ev["xaxis.range[0]"]).toISOString(); state.to = new Date(ev["xaxis.range[1]"]).toISOString(); }
      else if (ev["xaxis.autorange"]) { state.from = state.to = null; }
      else return;
      state.page = 1; loadPage();
    });
  }

  function fillFilters(ov) {
    const fill = (sel, values) => { const keep = sel.value; sel.length = 1; GS.fillSelect(sel, values); sel.value = keep; };
    fill($("af-tenant"), ov.tenants);
    $("af-tenant").closest("label").hidden = ov.tenants.length < 2;
    fill($("af-region"), [...new Set(ov.lanes.map((l) => l.region))].sort(natural));
    fill($("af-hardware"), [...new Set(ov.lanes.map((l) => l.hardware))].sort(natural));
    fill($("af-state"), Object.keys(ov.states));
  }

  function summary(ov) {
    const which = ov.is_current === false
      ? 'not the current plan (<a href="/ui/plan" id="current-link">show the current plan</a>)' : "the current plan";
    const pruned = ov.pruned_at ? ` · assignments pruned ${GS.fmtTime(ov.pruned_at)}: the charts may be incomplete` : "";
    const why = ov.problems && ov.problems.length ? ` · <span class="error">${GS.esc(ov.problems.slice(0, 3).join("; "))}</span>` : "";
    $("plan-summary").innerHTML = `Plan #${GS.esc(ov.id)} · ${which}${pruned}${why} · <span id="plan-status">${GS.esc(ov.status)}</span>
      · ${GS.esc(ov.solver)} · objective ${GS.esc(ov.objective)} · made ${GS.fmtTime(ov.created_at)} (${GS.esc(ov.trigger)})
      ${ov.gap_pct === null ? "" : ` · gap ${GS.num(ov.gap_pct, 2)} %`} · <span id="plan-total">${ov.assignments_total}</span> assignment(s)`;
    if (window.GSHistory) window.GSHistory.show(Number(ov.id));
  }

  function detailGantt(items) {
    const bars = items.flatMap((a) => (a.chunks && a.chunks.length ? a.chunks : [[a.start_at, a.end_at]])
      .map(([s, e]) => ({ a, s, t: new Date(e).getTime() - new Date(s).getTime() })));
    const rows = [...new Set(bars.map((b) => `#${b.a.job_id}`))];
    const el = $("gantt");
    el.style.height = `${Math.max(160, 40 + 14 * rows.length)}px`;
    Plotly.newPlot(el, [{
      type: "bar", orientation: "h", y: bars.map((b) => `#${b.a.job_id}`), base: bars.map((b) => b.s), x: bars.map((b) => b.t),
      marker: { color: bars.map((b) => palette[[...new Set(items.map((a) => a.region))].sort(natural).indexOf(b.a.region) % palette.length]) },
      text: bars.map((b) => GS.esc(b.a.job_name)), textposition: "inside", insidetextanchor: "start", textfont: { size: 10, color: "#fff" },
      hovertext: bars.map((b) => `#${b.a.job_id} ${GS.esc(b.a.job_name)}<br>${GS.esc(b.a.region)} · ${GS.esc(b.a.hardware)}<br>${b.a.gpu_count} GPUs`),
      hoverinfo: "text",
    }], { margin: { l: 70, r: 10, t: 24, b: 10 }, xaxis: { type: "date", side: "top" }, showlegend: false,
          yaxis: { type: "category", categoryorder: "array", categoryarray: [...rows].reverse(), tickfont: { size: 10 } } }, GS.plotConfig);
  }

  function row(a) {
    const cur = GS.esc(a.currency);
    return `<tr data-job-id="${a.job_id}"><td><a href="/ui/jobs/${a.job_id}">#${a.job_id} ${GS.esc(a.job_name)}</a></td>
      <td>${GS.esc(a.tenant)}</td><td>${GS.stateBadge(a.state)}</td><td>${GS.esc(a.region)}</td><td>${GS.esc(a.hardware)}</td>
      <td class="num">${a.gpu_count}</td><td>${GS.fmtTime(a.start_at)}</td><td>${GS.fmtTime(a.end_at)}</td>
      <td class="num">${GS.num(a.energy_kwh, 1)}</td><td class="num">${GS.num(a.cost, 2)} ${cur}</td><td class="num">${GS.num(a.carbon_kg, 1)}</td>
      <td class="num">${a.expected_saving_cost === null ? "—" : GS.num(a.expected_saving_cost, 2)}</td></tr>`;
  }

  async function loadPage() {
    const q = new URLSearchParams({ sort: state.sort, page: state.page, per_page: state.per_page });
    for (const [k, id] of [["tenant", "af-tenant"], ["region", "af-region"], ["hardware", "af-hardware"], ["state", "af-state"], ["q", "af-q"]]) {
      if ($(id).value.trim()) q.set(k, $(id).value.trim());
    }
    if (state.from) { q.set("from", state.from); q.set("to", state.to); }
    $("af-window").textContent = state.from ? `${GS.fmtTime(state.from)} – ${GS.fmtTime(state.to)}` : "";
    const tb = document.querySelector("#assign-table tbody");
    try {
      const page = await GS.api("GET", `${base()}/assignments?${q}`);
      tb.innerHTML = page.items.map(row).join("") || '<tr><td colspan="12" class="muted">No assignment matches.</td></tr>';
      $("assign-count").textContent = `(${page.total} matching)`;
      $("pg-info").textContent = `page ${page.page} of ${page.pages}`;
      $("pg-prev").disabled = page.page <= 1;
      $("pg-next").disabled = page.page >= page.pages;
      detailGantt(page.items);
    } catch (err) {
      tb.innerHTML = `<tr><td colspan="12" class="error">${GS.esc(err.describe ? err.describe() : err)}</td></tr>`;
    }
    document.querySelectorAll("#assign-table th[data-sort]").forEach((th) => {
      const key = th.dataset.sort;
      th.setAttribute("aria-sort", state.sort === key ? "ascending" : state.sort === `-${key}` ? "descending" : "none");
    });
  }

  async function load(quiet = false) {
    if (viewId !== null && !/^[1-9][0-9]*$/.test(viewId)) { $("plan-summary").textContent = `No plan #${viewId}.`; return; }
    try {
      const get = () => GS.api("GET", `${base()}/overview`);
      overview = quiet ? await get() : await GS.busy("Loading the plan", get);
    } catch (err) {
      const missing = viewId === null ? "No plan yet." : `No plan #${viewId}.`;
      $("plan-summary").textContent = err.status === 404 ? missing : (err.describe ? err.describe() : String(err));
      return;
    }
    summary(overview);
    fillFilters(overview);
    drawOverview(overview);
    await loadPage();
  }

  $("assign-filters").addEventListener("submit", (e) => { e.preventDefault(); state.page = 1; loadPage(); });
  $("af-reset").addEventListener("click", () => {
    ["af-tenant", "af-region", "af-hardware", "af-state", "af-q"].forEach((id) => { $(id).value = ""; });
    state.from = state.to = null; state.page = 1; loadPage();
  });
  $("pg-prev").addEventListener("click", () => { state.page -= 1; loadPage(); });
  $("pg-next").addEventListener("click", () => { state.page += 1; loadPage(); });
  document.querySelectorAll("#assign-table th[data-sort]").forEach((th) => th.addEventListener("click", () => {
    const key = th.dataset.sort;
    state.sort = state.sort === key ? `-${key}` : key;
    state.page = 1; loadPage();
  }));

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
        const plan = await GS.busy(() => replanLabel, replanRun, { limit_s: Number(btn.dataset.limitS) || null });
        if (viewId !== null) { viewId = null; window.history.replaceState(null, "", "/ui/plan"); }
        await load();
        if (plan && plan.gap_pct !== null && plan.gap_pct !== undefined) {
          GS.flash(`Re-planned: plan #${plan.id}, ${plan.status}, gap ${GS.num(plan.gap_pct, 2)} %`);
        }
        if (window.GSHistory) window.GSHistory.load(true);
      } catch (err) {
        $("plan-summary").textContent = err.describe ? err.describe() : String(err);
      } finally { btn.disabled = false; }
    });
  }
  await load();
  // Live: the plan's status and overview follow a re-plan made elsewhere (nightly, new work) without a reload.
  setInterval(async () => {
    if (document.hidden || viewId !== null) return;
    try {
      const head = await GS.api("GET", "/api/v1/plans?limit=1");
      const newest = head.items.find((p) => p.is_current);
      if (newest && overview && Number(newest.id) !== Number(overview.id)) { await load(true); if (window.GSHistory) window.GSHistory.load(true); }
    } catch (err) { /* next time */ }
  }, 20000);
})();
