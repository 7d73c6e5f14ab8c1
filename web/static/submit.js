// Submit: one job with a preview (planned vs run now) before confirming, or a batch upload (CSV or JSON).
"use strict";
(async () => {
  const $ = (id) => document.getElementById(id);
  const form = $("job-form"), errBox = $("form-errors"), confirmBtn = $("confirm-btn");
  let previewed = null; // the exact body that was previewed; confirming submits this body

  const now = new Date();
  now.setMinutes(0, 0, 0);
  $("f-release").value = GS.isoToLocal(new Date(now.getTime() + 3600e3));
  $("f-deadline").value = GS.isoToLocal(new Date(now.getTime() + 37 * 3600e3));
  $("f-name").value = `job-${now.getFullYear()}${String(now.getMonth() + 1).padStart(2, "0")}${String(now.getDate()).padStart(2, "0")}`;

  // the fleet fills the region and hardware choices when it arrives; the buttons below are wired at once, so a
  // click (a batch upload needs no fleet) never lands before its handler
  GS.fleet().then(({ regions, hardware }) => {
    const box = (container, codes, name) => codes.forEach((c) => {
      container.appendChild(GS.el("label", {}, `<input type="checkbox" name="${name}" value="${GS.esc(c)}"> ${GS.esc(c)}`));
    });
    box($("f-regions"), regions.map((r) => r.code), "allowed_regions");
    box($("f-hardware"), hardware.map((h) => h.code), "allowed_hardware");
    GS.fillSelect($("f-home"), regions.map((r) => r.code));
  }).catch(showErrors);

  function body() {
    const b = {
      name: $("f-name").value.trim(), workload_class: $("f-class").value,
      gpu_count: parseInt($("f-gpus").value, 10), reference_gpu_hours: parseFloat($("f-hours").value),
      release_at: GS.localToIso($("f-release").value), deadline_at: GS.localToIso($("f-deadline").value),
      interruptible: $("f-interruptible").checked,
    };
    const ticked = (name) => [...form.querySelectorAll(`input[name=${name}]:checked`)].map((i) => i.value);
    if (ticked("allowed_regions").length) b.allowed_regions = ticked("allowed_regions");
    if (ticked("allowed_hardware").length) b.allowed_hardware = ticked("allowed_hardware");
    if ($("f-home").value) b.home_region = $("f-home").value;
    if ($("f-tag").value.trim()) b.residency_tag = $("f-tag").value.trim();
    if ($("f-command").value.trim()) b.command = $("f-command").value.trim();
    Object.keys(b).forEach((k) => { if (b[k] === null || Number.isNaN(b[k])) delete b[k]; });
    return b;
  }

  // secret_env: write-only. Read from the form only when the job is submitted (the preview never carries it), never
  // stored here, and the field is emptied once the job is in.
  function secretEnv() {
    const env = {};
    const lines = $("f-secret-env").value.split(/\r?\n/);
    lines.forEach((line, i) => {
      if (!line.trim()) return;
      const eq = line.indexOf("=");
      const name = eq > 0 ? line.slice(0, eq).trim() : "";
      if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) {
        throw new Error(`secret_env line ${i + 1}: write NAME=value (NAME: letters, digits, _)`);
      }
      env[name] = line.slice(eq + 1);
    });
    return env;
  }

  function showErrors(err) {
    errBox.hidden = false;
    errBox.textContent = err.describe ? err.describe() : String(err);
  }

  form.addEventListener("input", () => { previewed = null; confirmBtn.disabled = true; });

  const figures = (f, cur) => f ? [f.region, f.hardware, GS.fmtTime(f.start_at), GS.fmtTime(f.end_at),
    GS.num(f.energy_kwh, 1), `${GS.num(f.cost, 2)} ${cur}`, GS.num(f.carbon_kg, 1)] : Array(7).fill("—");

  $("preview-btn").addEventListener("click", async () => {
    errBox.hidden = true;
    const b = body();
    try {
      const p = await GS.busy("Planning a preview", () => GS.api("POST", "/api/v1/plans/preview", b));
      const cur = GS.esc(p.currency || "");
      const a = figures(p.planned, cur), n = figures(p.run_now, cur);
      const labels = ["Region", "Hardware", "Start", "End", "Energy kWh", "Cost", "CO2 kg"];
      const keys = [null, null, null, null, "energy_kwh", "cost", "carbon_kg"];
      const cls = (i) => (keys[i] && p.planned && p.run_now
        ? (p.planned[keys[i]] <= p.run_now[keys[i]] ? "better" : "worse") : "");
      $("preview").innerHTML = (p.feasible ? "" : `<p class="error">Cannot be planned: ${GS.esc(p.reason || "unknown reason")}</p>`) +
        `<div class="scroll"><table class="grid side" id="preview-table"><thead><tr><th></th><th>Gridshift plan</th><th>Run now</th></tr></thead><tbody>` +
        labels.map((l, i) => `<tr><th>${l}</th><td class="${cls(i)}">${GS.esc(a[i])}</td><td>${GS.esc(n[i])}</td></tr>`).join("") +
        `</tbody></table></div>` +
        (p.saving_cost !== null && p.saving_cost !== undefined
          ? `<p id="preview-saving">Saving against running now: <b>${GS.num(p.saving_cost, 2)} ${cur}</b> and <b>${GS.num(p.saving_carbon_kg, 1)} kg CO2</b>.</p>` : "") +
        `<p class="muted">${GS.esc(p.note || "An estimate: the job joins the next plan with the other jobs, so its final slot may differ.")}</p>`;
      $("preview-card").hidden = false;
      previewed = p.feasible ? b : null;
      confirmBtn.disabled = !p.feasible;
    } catch (err) { showErrors(err); }
  });

  confirmBtn.addEventListener("click", async () => {
    if (!previewed) return;
    errBox.hidden = true;
    confirmBtn.disabled = true;
    try {
      const secrets = secretEnv();
      const payload = Object.keys(secrets).length ? { ...previewed, secret_env: secrets } : previewed;
      const job = await GS.busy("Submitting", () => GS.api("POST", "/api/v1/jobs", payload));
      $("f-secret-env").value = "";
      const box = $("submitted");
      box.hidden = false;
      box.innerHTML = `<p class="ok" id="submitted-msg">Job <a href="/ui/jobs/${job.id}">#${job.id} ${GS.esc(job.name)}</a> was
        submitted (${GS.esc(job.state)}). It joins the next plan.</p>`;
      previewed = null;
    } catch (err) { showErrors(err); confirmBtn.disabled = false; }
  });

  // ---- batch upload -------------------------------------------------------------------------------------------
  const INTS = new Set(["gpu_count", "priority", "checkpoint_overhead_minutes", "min_chunk_minutes"]);
  const FLOATS = new Set(["reference_gpu_hours", "memory_gb_per_gpu"]);
  const LISTS = new Set(["allowed_regions", "allowed_hardware"]);
  const TIMES = new Set(["release_at", "deadline_at"]);

  function parseCsv(text) {
    const rows = [];
    let row = [], cell = "", quoted = false;
    for (let i = 0; i < text.length; i++) {
      const c = text[i];
      if (quoted) {
        if (c === '"' && text[i + 1] === '"') { cell += '"'; i++; } else if (c === '"') quoted = false; else cell += c;
      } else if (c === '"') quoted = true;
      else if (c === ",") { row.push(cell); cell = ""; }
      else if (c === "\n" || c === "\r") {
        if (c === "\r" && text[i + 1] === "\n") i++;
        row.push(cell); rows.push(row); row = []; cell = "";
      } else cell += c;
    }
    if (cell !== "" || row.length) { row.push(cell); rows.push(row); }
    return rows.filter((r) => r.some((c) => c.trim() !== ""));
  }

  function toTime(v, where) {
    const hasOffset = /([zZ]|[+-]\d\d:?\d\d)$/.test(v);
    const d = new Date(hasOffset ? v : v.replace(" ", "T")); // no offset: the user's time zone
    if (Number.isNaN(d.getTime())) throw new Error(`${where}: not a date-time: ${v}`);
    return d.toISOString();
  }

  function csvJobs(text) {
    const rows = parseCsv(text);
    if (rows.length < 2) throw new Error("line 1: the CSV needs a header line and at least one job");
    const header = rows[0].map((h) => h.trim());
    return rows.slice(1).map((r, i) => {
      const job = {};
      header.forEach((h, j) => {
        const v = (r[j] ?? "").trim();
        const where = `line ${i + 2}: ${h}`;
        if (v === "") return;
        if (INTS.has(h)) job[h] = Number.isInteger(Number(v)) ? Number(v) : v;
        else if (FLOATS.has(h)) job[h] = Number.isFinite(Number(v)) ? Number(v) : v;
        else if (LISTS.has(h)) job[h] = v.split(";").map((s) => s.trim()).filter(Boolean);
        else if (TIMES.has(h)) job[h] = toTime(v, where);
        else if (h === "interruptible") job[h] = ["1", "true", "yes"].includes(v.toLowerCase());
        else if (h === "durations_minutes") {
          job[h] = Object.fromEntries(v.split(";").map((p) => p.split("=").map((s) => s.trim())).map(([k, m]) => [k, Number(m)]));
        } else job[h] = v;
      });
      return job;
    });
  }

  function jsonJobs(text) {
    const data = JSON.parse(text);
    const list = Array.isArray(data) ? data : data.jobs;
    if (!Array.isArray(list)) throw new Error("the JSON must be a list of jobs or {\"jobs\": [...]}");
    return list.map((j, i) => {
      const job = { ...j };
      TIMES.forEach((k) => { if (typeof job[k] === "string") job[k] = toTime(job[k], `jobs[${i}].${k}`); });
      return job;
    });
  }

  $("batch-btn").addEventListener("click", async () => {
    const out = $("batch-result");
    out.innerHTML = "";
    const file = $("batch-file").files[0];
    if (!file) { out.innerHTML = '<p class="error">Choose a CSV or JSON file first.</p>'; return; }
    try {
      const text = await file.text();
      const isJson = file.name.toLowerCase().endsWith(".json") || text.trimStart().startsWith("[") || text.trimStart().startsWith("{");
      const jobs = isJson ? jsonJobs(text) : csvJobs(text);
      const res = await GS.busy(`Uploading ${jobs.length} jobs`, () => GS.api("POST", "/api/v1/jobs/batch", { jobs }));
      out.innerHTML = `<p class="ok" id="batch-ok">Stored ${res.count} job${res.count === 1 ? "" : "s"} (batch <a href="/ui/jobs?batch_id=${GS.esc(res.batch_id)}">${GS.esc(res.batch_id.slice(0, 8))}</a>).</p>`;
    } catch (err) {
      out.innerHTML = `<p class="error" id="batch-error">${GS.esc(err.describe ? err.describe() : err.message)}</p>`;
    }
  });
})();
