// Jobs: the tenant's jobs (an operator's: every tenant's, with a tenant column and filter) with filters, newest
// first, page by page; the states of the rows on screen refresh by themselves.
"use strict";
(async () => {
  const $ = (id) => document.getElementById(id);
  const tbody = document.querySelector("#jobs-table tbody");
  const params = new URLSearchParams(location.search);
  let cursor = null;
  try {
    const { regions, hardware } = await GS.fleet();
    GS.fillSelect($("q-region"), regions.map((r) => r.code));
    GS.fillSelect($("q-hardware"), hardware.map((h) => h.code));
  } catch (err) { /* filters stay usable without the fleet lists */ }
  ["state", "region", "hardware", "tenant"].forEach((k) => { if (params.get(k) && $("q-" + k)) $("q-" + k).value = params.get(k); });
  const fleetView = Boolean($("q-tenant"));
  const cols = fleetView ? 8 : 7;

  function query() {
    const q = new URLSearchParams({ limit: "50" });
    if ($("q-state").value) q.set("state", $("q-state").value);
    if ($("q-region").value) q.set("region", $("q-region").value);
    if ($("q-hardware").value) q.set("hardware", $("q-hardware").value);
    if ($("q-from").value) q.set("deadline_from", new Date($("q-from").value + "T00:00").toISOString());
    if ($("q-to").value) q.set("deadline_to", new Date($("q-to").value + "T00:00").toISOString());
    if (params.get("batch_id")) q.set("batch_id", params.get("batch_id"));
    if ($("q-tenant") && $("q-tenant").value.trim()) q.set("tenant", $("q-tenant").value.trim());
    if (cursor) q.set("cursor", cursor);
    return q;
  }

  async function load(reset) {
    if (reset) { cursor = null; tbody.innerHTML = ""; }
    try {
      const page = await GS.busy("Loading jobs", () => GS.api("GET", "/api/v1/jobs?" + query()));
      for (const j of page.items) {
        const tr = GS.el("tr", { "data-job-id": j.id });
        const tenant = fleetView ? `<td>${GS.esc(page.tenants[String(j.tenant_id)] || j.tenant_id)}</td>` : "";
        tr.innerHTML = `<td><a href="/ui/jobs/${j.id}">${j.id}</a></td><td><a href="/ui/jobs/${j.id}">${GS.esc(j.name)}</a></td>
          ${tenant}<td class="job-state">${GS.stateBadge(j.state)}</td><td>${GS.esc(j.workload_class)}</td><td class="num">${j.gpu_count}</td>
          <td>${GS.fmtTime(j.release_at)}</td><td>${GS.fmtTime(j.deadline_at)}</td>`;
        tbody.appendChild(tr);
      }
      if (!tbody.children.length) tbody.innerHTML = '<tr><td colspan="${cols}" class="muted">No jobs match.</td></tr>';
      cursor = page.next_cursor;
      $("more-btn").hidden = !cursor;
    } catch (err) {
      tbody.innerHTML = `<tr><td colspan="${cols}" class="error">${GS.esc(err.describe ? err.describe() : err)}</td></tr>`;
    }
  }
  $("job-filters").addEventListener("submit", (e) => { e.preventDefault(); load(true); });
  $("more-btn").addEventListener("click", () => load(false));
  // Live: re-read the first page every 10 s and update the states of the rows on screen.
  setInterval(async () => {
    if (document.hidden) return;
    try {
      const q = query(); q.delete("cursor"); q.set("limit", "200");
      const page = await GS.api("GET", "/api/v1/jobs?" + q);
      for (const j of page.items) {
        const cell = tbody.querySelector(`tr[data-job-id="${j.id}"] td.job-state`);
        if (cell && !cell.textContent.includes(j.state)) cell.innerHTML = GS.stateBadge(j.state);
      }
    } catch (err) { /* next time */ }
  }, 10000);
  load(true);
})();
