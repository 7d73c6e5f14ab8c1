// Overview: per region forecast vs realised (price, carbon), planned power vs budget, GPUs in use.
"use strict";
(async () => {
  const box = document.getElementById("regions");
  let data;
  try {
    data = await GS.busy("Loading the fleet overview", () => GS.api("GET", "/api/v1/overview?hours_back=24&hours_ahead=48"));
  } catch (err) {
    box.innerHTML = `<p class="error">${GS.esc(err.describe ? err.describe() : err)}</p>`;
    return;
  }
  document.getElementById("ov-now").textContent = `As of ${GS.fmtTime(data.now)}.`;
  const notice = document.getElementById("data-notice");  // replayed or synthetic series are labelled as such
  if (data.data_notice) { notice.textContent = data.data_notice; notice.hidden = false; }
  box.innerHTML = data.regions.length ? "" : '<p class="muted">No regions yet: an operator adds them (or run <code>gridshift demo seed</code>).</p>';
  const layout = (title, unit, range) => ({
    title: { text: title, font: { size: 13 }, x: 0.01, xanchor: "left" }, margin: { l: 48, r: 10, t: 34, b: 30 },
    yaxis: { title: { text: unit, font: { size: 11 } } }, xaxis: { type: "date", range },
    legend: { orientation: "h", x: 1, xanchor: "right", y: 1.0, yanchor: "bottom", font: { size: 10 } }, shapes: [nowLine(data.now)],
  });
  function nowLine(now) {
    return { type: "line", xref: "x", yref: "paper", x0: now, x1: now, y0: 0, y1: 1, line: { color: "#999", dash: "dot", width: 1 } };
  }
  const cards = [];
  for (const r of data.regions) {
    const card = GS.el("section", { class: "card region", "data-region": r.code });
    card.innerHTML = `<h2>${GS.esc(r.name)} <span class="muted">${GS.esc(r.code)} · zone ${GS.esc(r.zone)} · budget ${GS.num(r.power_budget_kw, 0)} kW</span></h2>
      <div class="chart small" id="price-${r.code}"></div><div class="chart small" id="carbon-${r.code}"></div>
      <div class="chart small" id="power-${r.code}"></div>
      <div class="scroll"><table class="grid gputable"><thead><tr><th>Hardware</th><th class="num">GPUs</th>
      <th class="num">in use now</th><th class="num">planned peak</th></tr></thead><tbody>${r.gpus.map((g) =>
        `<tr><td>${GS.esc(g.hardware)}</td><td class="num">${g.inventory}</td><td class="num">${g.in_use_now}</td>
         <td class="num">${g.peak_planned}</td></tr>`).join("")}</tbody></table></div>`;
    box.appendChild(card);
    cards.push(r);
  }
  // Plot once every card is in place, so that each chart takes its card's final width.
  for (const r of cards) {
    const range = [r.slots[0], r.slots[r.slots.length - 1]];
    for (const s of r.series) {
      const id = (s.kind === "price" ? "price-" : "carbon-") + r.code;
      const title = s.kind === "price" ? "Day-ahead price" : "Carbon intensity";
      const traces = [];
      const hasBand = s.lower.some((v) => v !== null) && s.upper.some((v) => v !== null);
      if (hasBand) {
        traces.push({ x: s.forecast_ts, y: s.upper, mode: "lines", line: { width: 0 }, showlegend: false, hoverinfo: "skip" });
        traces.push({ x: s.forecast_ts, y: s.lower, mode: "lines", line: { width: 0 }, fill: "tonexty",
                      fillcolor: "rgba(59,110,165,0.18)", name: "interval" });
      }
      if (s.forecast_ts.length) {
        traces.push({ x: s.forecast_ts, y: s.forecast, mode: "lines", name: `forecast${s.model ? " (" + GS.esc(s.model) + ")" : ""}`,
                      line: { color: "#3b6ea5", dash: "dash" } });
      }
      traces.push({ x: s.realised_ts, y: s.realised, mode: "lines", name: "realised", line: { color: "#1d2327" } });
      const lay = layout(title + (s.forecast_ts.length ? "" : " (no forecast run yet)"),
        s.unit || (s.kind === "price" ? "EUR/MWh" : "g/kWh"), range);
      Plotly.newPlot(id, traces, lay, GS.plotConfig);
    }
    Plotly.newPlot(`power-${r.code}`, [
      { x: r.slots, y: r.planned_kw, type: "bar", name: "planned power", marker: { color: "#2a7f62" } },
      { x: r.slots, y: r.budget_kw, mode: "lines", name: "power budget", line: { color: "#b3261e", shape: "hv" } },
    ], layout("Planned facility power vs budget", "kW", range), GS.plotConfig);
  }
  // Live: planned power and GPUs in use follow new plans and running work without a reload (every 60 s).
  setInterval(async () => {
    if (document.hidden) return;
    let fresh;
    try { fresh = await GS.api("GET", "/api/v1/overview?hours_back=24&hours_ahead=48"); } catch (err) { return; }
    document.getElementById("ov-now").textContent = `As of ${GS.fmtTime(fresh.now)}.`;
    for (const r of fresh.regions) {
      const card = box.querySelector(`section[data-region="${r.code}"]`);
      if (!card) continue;
      const range = [r.slots[0], r.slots[r.slots.length - 1]];
      Plotly.react(`power-${r.code}`, [
        { x: r.slots, y: r.planned_kw, type: "bar", name: "planned power", marker: { color: "#2a7f62" } },
        { x: r.slots, y: r.budget_kw, mode: "lines", name: "power budget", line: { color: "#b3261e", shape: "hv" } },
      ], { ...layout("Planned facility power vs budget", "kW", range), shapes: [nowLine(fresh.now)] }, GS.plotConfig);
      card.querySelector(".gputable tbody").innerHTML = r.gpus.map((g) =>
        `<tr><td>${GS.esc(g.hardware)}</td><td class="num">${g.inventory}</td><td class="num">${g.in_use_now}</td>
         <td class="num">${g.peak_planned}</td></tr>`).join("");
    }
  }, 60000);
})();
