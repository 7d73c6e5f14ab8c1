// Reports: per month, tenant and region; CSV and PDF downloads of the same report.
"use strict";
(async () => {
  const $ = (id) => document.getElementById(id);
  const now = new Date();
  const params = new URLSearchParams(location.search);
  $("r-month").value = params.get("month") || `${now.getUTCFullYear()}-${String(now.getUTCMonth() + 1).padStart(2, "0")}`;
  try {
    const { regions } = await GS.fleet();
    GS.fillSelect($("r-region"), regions.map((r) => r.code));
  } catch (err) { /* the report still works for all regions */ }

  async function load() {
    const q = new URLSearchParams({ month: $("r-month").value });
    if ($("r-region").value) q.set("region", $("r-region").value);
    if ($("r-tenant") && $("r-tenant").value.trim()) q.set("tenant", $("r-tenant").value.trim());
    $("csv-link").href = "/api/v1/reports/monthly.csv?" + q;
    $("pdf-link").href = "/api/v1/reports/monthly.pdf?" + q;
    const tb = document.querySelector("#report-table tbody");
    try {
      const rep = await GS.busy("Computing the report", () => GS.api("GET", "/api/v1/reports/monthly?" + q));
      const cur = GS.esc(rep.currency);
      const row = (r, cls = "") => `<tr class="${cls}"><td>${GS.esc(r.tenant)}</td><td>${GS.esc(r.region)}</td><td class="num">${r.jobs}</td>
        <td class="num">${GS.num(r.energy_kwh, 1)}</td><td class="num">${GS.num(r.cost, 2)} ${cur}</td><td class="num">${GS.num(r.carbon_kg, 1)}</td>
        <td class="num">${r.carbon_market_kg === null ? "—" : GS.num(r.carbon_market_kg, 1)}</td><td class="num">${GS.num(r.run_now_cost, 2)}</td>
        <td class="num">${GS.num(r.saving_cost, 2)}${r.saving_pct === null ? "" : ` (${GS.num(r.saving_pct, 1)} %)`}</td>
        <td class="num">${GS.num(r.saving_carbon_kg, 1)}</td></tr>`;
      tb.innerHTML = rep.rows.map((r) => row(r)).join("") + row(rep.total, "total");
      const t = rep.total;
      $("report-total").innerHTML = `<p id="report-summary">${GS.esc(rep.month)} · ${GS.esc(rep.tenant)}: <b>${t.jobs}</b> jobs
        (${t.metered_jobs} metered), <b>${GS.num(t.energy_kwh, 1)} kWh</b>, <b>${GS.num(t.cost, 2)} ${cur}</b>,
        <b>${GS.num(t.carbon_kg, 1)} kg CO2</b>; saving against run-now ${GS.num(t.saving_cost, 2)} ${cur} and ${GS.num(t.saving_carbon_kg, 1)} kg CO2.</p>`
        + (rep.data_notice ? `<p id="report-notice" class="data-notice" role="note">${GS.esc(rep.data_notice)}</p>` : "");
    } catch (err) {
      tb.innerHTML = `<tr><td colspan="10" class="error">${GS.esc(err.describe ? err.describe() : err)}</td></tr>`;
    }
  }
  $("report-form").addEventListener("submit", (e) => { e.preventDefault(); load(); });
  load();
})();
