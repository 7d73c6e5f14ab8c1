// Reports: per month, tenant and region, settled (ran, energy read) apart from planned; charts by month, region and
// team; CSV and PDF downloads of the same report.
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
  const margin = { l: 55, r: 10, t: 30, b: 40 };
  const legend = { orientation: "h", y: -0.2, font: { size: 10 } };

  function query(month) {
    const q = new URLSearchParams({ month });
    if ($("r-region").value) q.set("region", $("r-region").value);
    if ($("r-tenant") && $("r-tenant").value.trim()) q.set("tenant", $("r-tenant").value.trim());
    return q;
  }
  function monthsBefore(month, n) {
    const [y, m] = month.split("-").map(Number);
    return Array.from({ length: n }, (_, i) => {
      const d = new Date(Date.UTC(y, m - 1 - (n - 1 - i), 1));
      return `${d.getUTCFullYear()}-${String(d.getUTCMonth() + 1).padStart(2, "0")}`;
    });
  }
  const sumBy = (rows, key) => {
    const out = {};
    rows.forEach((r) => {
      const o = out[r[key]] || (out[r[key]] = { cost: 0, planned_cost: 0, carbon_kg: 0, planned_carbon_kg: 0, energy_kwh: 0, planned_energy_kwh: 0 });
      Object.keys(o).forEach((k) => { o[k] += r[k]; });
    });
    return out;
  };

  function charts(rep, months) {
    const cur = rep.currency;
    const labels = months.map((m) => m.month);
    Plotly.newPlot("ch-months", [
      { type: "bar", name: `settled cost ${cur}`, x: labels, y: months.map((m) => m.total.cost), marker: { color: "#2a7f62" } },
      { type: "bar", name: `planned cost ${cur}`, x: labels, y: months.map((m) => m.total.planned_cost), marker: { color: "#9fd3c0" } },
      { type: "scatter", mode: "lines+markers", name: "energy kWh (settled + planned)", yaxis: "y2", x: labels,
        y: months.map((m) => m.total.energy_kwh + m.total.planned_energy_kwh), line: { color: "#3b6ea5" } },
      { type: "scatter", mode: "lines+markers", name: "CO2 kg (settled + planned)", yaxis: "y2", x: labels,
        y: months.map((m) => m.total.carbon_kg + m.total.planned_carbon_kg), line: { color: "#b3541e" } },
    ], { title: { text: "By month", font: { size: 13 } }, barmode: "stack", margin, legend, xaxis: { type: "category" },
         yaxis: { title: { text: cur } }, yaxis2: { overlaying: "y", side: "right", showgrid: false } }, GS.plotConfig);
    Plotly.newPlot("ch-savings", [
      { type: "bar", name: "saving (settled)", x: labels, y: months.map((m) => m.total.saving_cost), marker: { color: "#2a7f62" } },
      { type: "bar", name: "expected saving (planned)", x: labels, y: months.map((m) => m.total.expected_saving_cost),
        marker: { color: "#9fd3c0", pattern: { shape: "/" } } },
    ], { title: { text: `Savings against run-now, ${cur}`, font: { size: 13 } }, barmode: "group", margin, legend,
         xaxis: { type: "category" } }, GS.plotConfig);
    for (const [el, key, title] of [["ch-regions", "region", "By region"], ["ch-teams", "tenant", "By team"]]) {
      const groups = sumBy(rep.rows, key);
      const names = Object.keys(groups).sort((a, b) => a.localeCompare(b, undefined, { numeric: true }));
      Plotly.newPlot(el, [
        { type: "bar", name: `settled cost ${cur}`, x: names, y: names.map((n) => groups[n].cost), marker: { color: "#2a7f62" } },
        { type: "bar", name: `planned cost ${cur}`, x: names, y: names.map((n) => groups[n].planned_cost), marker: { color: "#9fd3c0" } },
        { type: "bar", name: "CO2 kg (settled + planned)", x: names, y: names.map((n) => groups[n].carbon_kg + groups[n].planned_carbon_kg),
          yaxis: "y2", marker: { color: "#b3541e" }, offsetgroup: 2 },
      ], { title: { text: `${title}, ${rep.month}`, font: { size: 13 } }, barmode: "stack", margin, legend,
           xaxis: { type: "category" }, yaxis2: { overlaying: "y", side: "right", showgrid: false } }, GS.plotConfig);
    }
  }

  async function load() {
    const month = $("r-month").value;
    const q = query(month);
    $("csv-link").href = "/api/v1/reports/monthly.csv?" + q;
    $("pdf-link").href = "/api/v1/reports/monthly.pdf?" + q;
    const tb = document.querySelector("#report-table tbody");
    try {
      const months = await GS.busy("Computing the report", () => Promise.all(
        monthsBefore(month, 6).map((m) => GS.api("GET", "/api/v1/reports/monthly?" + query(m)))));
      const rep = months[months.length - 1];
      const cur = GS.esc(rep.currency);
      const pct = (p) => (p === null || p === undefined ? "" : ` (${GS.num(p, 1)} %)`);
      const row = (r, cls = "") => `<tr class="${cls}"><td>${GS.esc(r.tenant)}</td><td>${GS.esc(r.region)}</td>
        <td class="num">${r.settled_jobs} / ${r.planned_jobs}</td>
        <td class="num">${GS.num(r.energy_kwh, 1)}</td><td class="num">${GS.num(r.cost, 2)} ${cur}</td><td class="num">${GS.num(r.carbon_kg, 1)}</td>
        <td class="num">${r.carbon_market_kg === null ? "—" : GS.num(r.carbon_market_kg, 1)}</td><td class="num">${GS.num(r.run_now_cost, 2)}</td>
        <td class="num">${GS.num(r.saving_cost, 2)}${pct(r.saving_pct)}</td><td class="num">${GS.num(r.saving_carbon_kg, 1)}</td>
        <td class="num">${GS.num(r.planned_energy_kwh, 1)}</td><td class="num">${GS.num(r.planned_cost, 2)}</td>
        <td class="num">${GS.num(r.expected_saving_cost, 2)}${pct(r.expected_saving_pct)}</td></tr>`;
      tb.innerHTML = rep.rows.map((r) => row(r)).join("") + row(rep.total, "total");
      const t = rep.total;
      $("report-total").innerHTML = `<p id="report-summary">${GS.esc(rep.month)} · ${GS.esc(rep.tenant)} · <b>${t.jobs}</b> jobs.</p>
        <p id="report-settled"><b>Settled</b> (${t.settled_jobs} jobs${t.estimated_jobs ? `, ${t.estimated_jobs} estimated from profile` : ""}):
        ${GS.num(t.energy_kwh, 1)} kWh, ${GS.num(t.cost, 2)} ${cur}, ${GS.num(t.carbon_kg, 1)} kg CO2;
        saving against the same work run now <b>${GS.num(t.saving_cost, 2)} ${cur}</b>${pct(t.saving_pct)} and ${GS.num(t.saving_carbon_kg, 1)} kg CO2.</p>
        <p id="report-planned"><b>Planned</b> (${t.planned_jobs} jobs, not run yet): ${GS.num(t.planned_energy_kwh, 1)} kWh,
        ${GS.num(t.planned_cost, 2)} ${cur}, ${GS.num(t.planned_carbon_kg, 1)} kg CO2; expected saving
        ${GS.num(t.expected_saving_cost, 2)} ${cur}${pct(t.expected_saving_pct)} (not claimed until it has run).</p>`
        + (rep.data_notice ? `<p id="report-notice" class="data-notice" role="note">${GS.esc(rep.data_notice)}</p>` : "");
      charts(rep, months);
    } catch (err) {
      tb.innerHTML = `<tr><td colspan="13" class="error">${GS.esc(err.describe ? err.describe() : err)}</td></tr>`;
    }
  }
  $("report-form").addEventListener("submit", (e) => { e.preventDefault(); load(); });
  load();
})();
