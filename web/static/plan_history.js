// Plan history, newest first, page by page (the plan page's <details id="history">).
"use strict";
window.GSHistory = (() => {
  const $ = (id) => document.getElementById(id);
  let shownId = null;
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

  document.getElementById("history-link").addEventListener("click", () => { $("history").open = true; });
  // open when asked for, or when a past plan is shown (one picked from the history)
  if (location.hash === "#history" || new URLSearchParams(location.search).has("id")) $("history").open = true;
  return { load: loadHistory, show: (id) => { shownId = id; markShown(); } };
})();
window.GSHistory.load(true);
