// Jobs: the tenant's jobs with filters, newest first, page by page.
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
  ["state", "region", "hardware"].forEach((k) => { if (params.get(k)) $("q-" + k).value = params.get(k); });

  function query() {
    const q = new URLSearchParams({ limit: "50" });
    if ($("q-state").value) q.set("state", $("q-state").value);
    if ($("q-region").value) q.set("region", $("q-region").value);
    if ($("q-hardware").value) q.set("hardware", $("q-hardware").value);
    if ($("q-from").value) q.set("deadline_from", new Date($("q-from").value + "T00:00").toISOString());
    if ($("q-to").value) q.set("deadline_to", new Date($("q-to").value + "T00:00").toISOString());
    if (params.get("batch_id")) q.set("batch_id", params.get("batch_id"));
    if (cursor) q.set("cursor", cursor);
    return q;
  }

  async function load(reset) {
    if (reset) { cursor = null; tbody.innerHTML = ""; }
    try {
      const page = await GS.busy("Loading jobs", () => GS.api("GET", "/api/v1/jobs?" + query()));
      for (const j of page.items) {
        const tr = GS.el("tr", { "data-job-id": j.id });
        tr.innerHTML = `<td><a href="/ui/jobs/${j.id}">${j.id}</a></td><td><a href="/ui/jobs/${j.id}">${GS.esc(j.name)}</a></td>
          <td>${GS.stateBadge(j.state)}</td><td>${GS.esc(j.workload_class)}</td><td class="num">${j.gpu_count}</td>
          <td>${GS.fmtTime(j.release_at)}</td><td>${GS.fmtTime(j.deadline_at)}</td>`;
        tbody.appendChild(tr);
      }
      if (!tbody.children.length) tbody.innerHTML = '<tr><td colspan="7" class="muted">No jobs match.</td></tr>';
      cursor = page.next_cursor;
      $("more-btn").hidden = !cursor;
    } catch (err) {
      tbody.innerHTML = `<tr><td colspan="7" class="error">${GS.esc(err.describe ? err.describe() : err)}</td></tr>`;
    }
  }
  $("job-filters").addEventListener("submit", (e) => { e.preventDefault(); load(true); });
  $("more-btn").addEventListener("click", () => load(false));
  load(true);
})();
