// Gridshift dashboard core: API calls with the session cookie and CSRF header, formatting, progress indicator.
"use strict";
const GS = (() => {
  const csrf = document.querySelector('meta[name="csrf-token"]')?.content || "";
  const tz = Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
  document.querySelectorAll(".tzname").forEach((el) => { el.textContent = tz; });

  class ApiError extends Error {
    constructor(status, problem) {
      super(problem?.detail || `HTTP ${status}`);
      this.status = status;
      this.problem = problem || {};
    }
    describe() {
      const errs = (this.problem.errors || []).map((e) => `${e.field}: ${e.message}`);
      return [this.message, ...errs].join("\n");
    }
  }

  async function api(method, path, body, opts = {}) {
    const headers = { Accept: "application/json" };
    if (method !== "GET") headers["X-CSRF-Token"] = csrf;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const resp = await fetch(path, {
      method, headers, credentials: "same-origin", body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (resp.status === 401 && !opts.no_redirect) {
      window.location = "/ui/signin?next=" + encodeURIComponent(location.pathname + location.search);
      throw new ApiError(401, { detail: "signed out" });
    }
    const type = resp.headers.get("Content-Type") || "";
    const data = type.includes("json") ? await resp.json() : await resp.text();
    if (!resp.ok) throw new ApiError(resp.status, typeof data === "object" ? data : { detail: data });
    return data;
  }

  // Long operations: a bar at the foot of the window (never over the navigation) with a label and the elapsed
  // seconds; with ``opts.limit_s`` (a solver's time limit) it fills towards that limit and says so.
  let busyCount = 0, busyTimer = null;
  async function busy(label, fn, opts = {}) {
    const el = document.getElementById("busy");
    const span = el.querySelector("span");
    const bar = el.querySelector(".bar");
    const t0 = Date.now();
    const limit = opts.limit_s || null;
    busyCount += 1;
    el.hidden = false;
    el.classList.toggle("timed", Boolean(limit));
    // label: a string, or a function giving the current one (a polled run's phase and progress)
    const tick = () => {
      const s = (Date.now() - t0) / 1000;
      const text = typeof label === "function" ? label() : label;
      span.textContent = limit ? `${text} … ${s.toFixed(0)} s of the ${limit.toFixed(0)} s time limit`
        : `${text} … ${s.toFixed(0)} s`;
      if (limit) bar.style.width = `${Math.min(100, (100 * s) / limit).toFixed(1)}%`;
    };
    tick();
    clearInterval(busyTimer);
    busyTimer = setInterval(tick, 500);
    try { return await fn(); } finally {
      busyCount -= 1;
      if (busyCount === 0) { clearInterval(busyTimer); el.hidden = true; bar.style.width = ""; }
    }
  }

  // A short message at the foot of the window for a few seconds.
  function flash(text) {
    const el = document.getElementById("busy");
    el.hidden = false; el.classList.remove("timed");
    el.querySelector("span").textContent = text;
    setTimeout(() => { if (busyCount === 0) el.hidden = true; }, 5000);
  }

  const dtf = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "short", day: "2-digit", hour: "2-digit", minute: "2-digit", timeZone: tz,
  });
  const fmtTime = (iso) => (iso ? dtf.format(new Date(iso)) : "—");
  const num = (x, d = 1) => (x === null || x === undefined ? "—" : Number(x).toLocaleString(undefined, {
    minimumFractionDigits: d, maximumFractionDigits: d }));
  const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({
    "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));

  // <input type="datetime-local"> value (the user's wall clock) <-> ISO-8601 UTC with offset.
  const localToIso = (v) => (v ? new Date(v).toISOString() : null);
  function isoToLocal(date) {
    const p = (n) => String(n).padStart(2, "0");
    return `${date.getFullYear()}-${p(date.getMonth() + 1)}-${p(date.getDate())}T${p(date.getHours())}:${p(date.getMinutes())}`;
  }

  function el(tag, attrs = {}, html = "") {
    const e = document.createElement(tag);
    Object.entries(attrs).forEach(([k, v]) => e.setAttribute(k, v));
    e.innerHTML = html;
    return e;
  }

  async function fleet() {
    const [regions, hardware] = await Promise.all([api("GET", "/api/v1/regions"), api("GET", "/api/v1/hardware")]);
    return { regions, hardware };
  }

  function fillSelect(select, codes) {
    codes.forEach((c) => select.appendChild(el("option", { value: c }, esc(c))));
  }

  const stateBadge = (s) => `<span class="state ${esc(s)}">${esc(s)}</span>`;

  const plotConfig = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };

  return { api, busy, flash, fmtTime, num, esc, localToIso, isoToLocal, el, fleet, fillSelect, stateBadge, tz, ApiError,
           plotConfig, csrf };
})();
