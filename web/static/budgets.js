// Budgets: per tenant its weight, quota use and budget burn-down (GET /api/v1/tenancy).
"use strict";
(async () => {
  const box = document.getElementById("tenants");
  let data;
  try {
    data = await GS.busy("Loading budgets", () => GS.api("GET", "/api/v1/tenancy"));
  } catch (err) {
    box.innerHTML = `<p class="error">${GS.esc(err.describe ? err.describe() : err)}</p>`;
    return;
  }
  const UNITS = { cost: null, energy_kwh: "kWh", carbon_kg: "kg CO2e" };
  const LABELS = { cost: "Electricity cost", energy_kwh: "Energy", carbon_kg: "Carbon" };
  const cap = (v) => (v === null || v === undefined ? '<span class="muted">no cap</span>' : GS.num(v, 1));
  // a bar: spent | in flight | reserved against the budget, the projection as a tick
  function bar(b) {
    if (b.budget === null) return "";
    const total = Math.max(b.budget, b.projected, b.spent + b.in_flight + b.reserved, 1e-9);
    const pct = (v) => `${Math.max(0, (100 * v) / total).toFixed(2)}%`;
    return `<div class="burn" role="img" aria-label="burn-down">
      <span class="spent" style="width:${pct(b.spent)}"></span><span class="flight" style="width:${pct(b.in_flight)}"></span><span class="reserved" style="width:${pct(b.reserved)}"></span>
      <i class="budget-line" style="left:${pct(b.budget)}"></i><i class="projected" style="left:${pct(b.projected)}"></i></div>`;
  }
  box.innerHTML = data.length ? "" : '<p class="muted">No tenants.</p>';
  for (const t of data) {
    const card = GS.el("section", { class: "card tenant", "data-tenant": t.tenant });
    const rows = Object.entries(t.budgets).map(([m, b]) => {
      const unit = UNITS[m] || t.currency;
      const over = b.remaining !== null && b.remaining < 0 ? "over" : "";
      return `<tr data-metric="${GS.esc(m)}" class="${over}"><td>${LABELS[m]} <span class="muted">${GS.esc(unit)}</span></td>
        <td class="num">${cap(b.budget)}</td><td class="num">${GS.num(b.spent, 1)}</td><td class="num">${GS.num(b.in_flight, 1)}</td>
        <td class="num">${GS.num(b.reserved, 1)}</td><td class="num remaining">${b.remaining === null ? "–" : GS.num(b.remaining, 1)}</td>
        <td class="num">${GS.num(b.projected, 1)}</td><td class="barcell">${bar(b)}</td></tr>`;
    }).join("");
    const q = t.quotas;
    const gpus = Object.entries(q.max_gpus).map(([hw, g]) =>
      `<li>${GS.esc(hw)}: ${g.in_use} GPUs in use of ${cap(g.cap)}</li>`).join("");
    card.innerHTML = `<h2>${GS.esc(t.tenant)} <span class="muted">weight ${GS.num(t.weight, 2)} · ${GS.esc(t.period)}
      from ${GS.fmtTime(t.period_start)}</span></h2>
      <div class="scroll"><table class="grid budgets"><thead><tr><th>Budget</th><th class="num">Budget</th><th class="num">Spent</th>
      <th class="num">In flight</th><th class="num">Reserved</th><th class="num">Remaining</th><th class="num">Projected</th>
      <th>Burn-down</th></tr></thead><tbody>${rows}</tbody></table></div>
      <ul class="quotas">
        <li>GPU-hours today: ${GS.num(q.gpu_hours_per_day.used, 1)} of ${cap(q.gpu_hours_per_day.cap)}</li>
        <li>GPU-hours this month: ${GS.num(q.gpu_hours_per_month.used, 1)} of ${cap(q.gpu_hours_per_month.cap)}</li>
        <li>Jobs waiting: ${q.queued_jobs.queued} of ${cap(q.queued_jobs.cap)}</li>${gpus}
      </ul>`;
    box.appendChild(card);
  }
})();
