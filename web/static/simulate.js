// What-if on the plan page (operator admins): queue a simulation, poll its progress, show current vs scenario.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const form = $("sim-form");
  if (!form) return;
  const day = (offset) => new Date(Date.now() + offset * 86400000).toISOString().slice(0, 10);
  $("sim-from").value = day(-7);
  $("sim-to").value = day(-1);

  // "region.de.gpus.h100=16" lines -> the API's JSON (the server checks every field and names the bad ones)
  function changes(text) {
    const body = {};
    text.split("\n").map((l) => l.trim()).filter(Boolean).forEach((line) => {
      const [key, ...rest] = line.split("=");
      const raw = rest.join("=").trim();
      const value = raw === "true" ? true : raw === "false" ? false : raw !== "" && !isNaN(Number(raw)) ? Number(raw) : raw;
      const parts = key.trim().split(".");
      if ((parts[0] === "region" || parts[0] === "regions") && parts.length >= 3) {
        body.regions = body.regions || {};
        const region = (body.regions[parts[1]] = body.regions[parts[1]] || {});
        if (parts[2] === "gpus" && parts.length === 4) (region.gpus = region.gpus || {})[parts[3]] = value;
        else region[parts[2] === "budget_kw" ? "power_budget_kw" : parts[2]] = value;
      } else if (parts[0].startsWith("carbon_price")) body.carbon_price_per_tonne = value;
      else body[parts[0]] = value;
    });
    return body;
  }

  const ROWS = [["Cost", "cost", 2], ["CO2 kg", "carbon_kg", 1], ["Energy kWh", "energy_kwh", 1],
                ["Deadline misses", "deadline_misses", 0], ["Jobs run", "jobs_run", 0], ["Not placed", "not_placed", 0]];

  function show(sim) {
    const r = sim.result;
    const tbody = $("sim-table").querySelector("tbody");
    tbody.innerHTML = "";
    ROWS.forEach(([label, key, d]) => {
      const pct = r.percent[key];
      tbody.appendChild(GS.el("tr", { "data-key": key }, `<th>${GS.esc(key === "cost" ? `${label} ${r.currency}` : label)}</th>`
        + `<td class="num">${GS.num(r.current[key], d)}</td><td class="num">${GS.num(r.changed[key], d)}</td>`
        + `<td class="num">${GS.num(r.difference[key], d)}</td>`
        + `<td class="num">${pct === null || pct === undefined ? "—" : GS.num(pct, 1)}</td>`));
    });
    $("sim-table").hidden = false;
    const chart = $("sim-chart");
    chart.hidden = false;
    const dates = r.per_day.current.map((x) => x.date);
    const trace = (name, rows, key, axis) => ({ type: "bar", name, x: dates, y: rows.map((x) => x[key]), yaxis: axis });
    window.Plotly.newPlot(chart, [
      trace("cost, current", r.per_day.current, "cost", "y"), trace("cost, scenario", r.per_day.changed, "cost", "y"),
      { ...trace("CO2 kg, current", r.per_day.current, "carbon_kg", "y2"), type: "scatter", mode: "lines+markers" },
      { ...trace("CO2 kg, scenario", r.per_day.changed, "carbon_kg", "y2"), type: "scatter", mode: "lines+markers" },
    ], { barmode: "group", height: 320, margin: { t: 20, r: 60 }, legend: { orientation: "h" },
         yaxis: { title: `cost per day [${r.currency}]` },
         yaxis2: { title: "CO2 per day [kg]", overlaying: "y", side: "right" } }, GS.plotConfig);
    const notes = (r.notes || []).join("; ");
    $("sim-status").textContent = `Simulation #${sim.id}, ${sim.from} to ${sim.to}: done.` + (notes ? ` ${notes}` : "");
  }

  let label = "Simulation queued";
  async function run(body) {
    let sim = await GS.api("POST", "/api/v1/simulations", body);
    while (sim.state === "queued" || sim.state === "running") {
      label = sim.state === "queued" ? "Simulation queued (waiting for a worker)"
        : `Simulating: ${sim.progress.days_done} of ${sim.progress.days_total} days`;
      $("sim-status").textContent = label;
      await new Promise((resolve) => setTimeout(resolve, 1000));
      sim = await GS.api("GET", `/api/v1/simulations/${sim.id}`);
    }
    if (sim.state !== "succeeded") throw new Error(`simulation failed: ${sim.error || "no result"}`);
    return sim;
  }

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = { ...changes($("sim-changes").value), from: $("sim-from").value, to: $("sim-to").value };
    if ($("sim-objective").value) body.objective = $("sim-objective").value;
    $("sim-run").disabled = true;
    try {
      show(await GS.busy(() => label, () => run(body)));
    } catch (err) {
      $("sim-status").textContent = err.describe ? err.describe() : String(err);
    } finally { $("sim-run").disabled = false; }
  });
})();
