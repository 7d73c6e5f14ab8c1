// One job: its request, plan, run, receipt and state timeline.
"use strict";
(async () => {
  const $ = (id) => document.getElementById(id);
  const id = $("job").dataset.jobId;
  let timer = null;
  const kv = (pairs) => pairs.map(([k, v]) => `<dt>${GS.esc(k)}</dt><dd>${v}</dd>`).join("");
  async function load(quiet = false) {
    let job, events, receipt;
    const fetchAll = () => Promise.all([GS.api("GET", `/api/v1/jobs/${id}`), GS.api("GET", `/api/v1/jobs/${id}/events`),
      GS.api("GET", `/api/v1/jobs/${id}/receipt`)]);
    try {
      [job, events, receipt] = quiet ? await fetchAll() : await GS.busy("Loading the job", fetchAll);
    } catch (err) {
      $("job-fields").innerHTML = `<dd class="error">${GS.esc(err.describe ? err.describe() : err)}</dd>`;
      return;
    }
    $("job-title").textContent = `#${job.id} ${job.name}`;
    $("job-state").className = `state ${job.state}`;
    $("job-state").textContent = job.state;
    $("job-fields").innerHTML = kv([
      ["Workload", GS.esc(job.workload_class)], ["GPUs", job.gpu_count],
      ["Work", job.reference_gpu_hours ? `${GS.num(job.reference_gpu_hours, 1)} GPU-h on ${GS.esc(job.reference_hardware)}` : GS.esc(JSON.stringify(job.durations_minutes))],
      ["Release", GS.fmtTime(job.release_at)], ["Deadline", GS.fmtTime(job.deadline_at)],
      ["Regions", GS.esc((job.allowed_regions || ["any"]).join(", "))], ["Hardware", GS.esc((job.allowed_hardware || ["any"]).join(", "))],
      ["Home region", GS.esc(job.home_region || "—")], ["Interruptible", job.interruptible ? "yes" : "no"],
      ["Command", `<code>${GS.esc(job.command || "—")}</code>`],
    ]);
    const r = receipt;
    $("job-plan").innerHTML = kv([
      ["Region", GS.esc(r.region || "not planned yet")], ["Hardware", GS.esc(r.hardware || "—")],
      ["Start", GS.fmtTime(r.start_at)], ["End", GS.fmtTime(r.end_at)],
      ["Runtime job id", `<code id="runtime-id">${GS.esc(r.runtime_job_id || "—")}</code>`],
      ["Run state", GS.esc(r.run_state || "—")],
      ...(job.resume_at ? [["Next chunk", `<span id="resume-at">${GS.fmtTime(job.resume_at)}</span>`]] : []),
      ["Metered GPU energy", r.metered_energy_kwh === null || r.metered_energy_kwh === undefined ? "—"
        : `<span id="metered-energy">${GS.num(r.metered_energy_kwh, 3)} kWh</span> (${GS.esc(r.energy_source || "")})`],
      ["Planned facility energy", r.planned_energy_kwh === null || r.planned_energy_kwh === undefined ? "—" : `${GS.num(r.planned_energy_kwh, 1)} kWh`],
    ]);
    const cur = GS.esc(r.currency);
    const runNow = r.run_now_basis === "metered"
      ? `the same metered work started ${GS.fmtTime(r.run_now_start_at)} in ${GS.esc(r.run_now_region || "")}`
      : "the planned duration started at release";
    $("receipt").innerHTML = r.basis === null ? '<p class="muted" id="receipt-empty">No receipt yet: the job has not been planned.</p>' :
      `<p class="muted">Figures: <b id="receipt-basis">${GS.esc(r.label)}</b>${r.settled ? "" : " (the saving is expected, not yet claimed)"}.
      Run now: <span id="receipt-run-now">${runNow}</span>.</p><div class="scroll"><table class="grid side" id="receipt-table">
      <thead><tr><th></th><th>This job</th><th>Run now</th><th>${r.settled ? "Saving" : "Expected saving"}</th></tr></thead><tbody>
      <tr><th>Facility energy kWh</th><td>${GS.num(r.actual.energy_kwh, 2)}</td><td>${GS.num(r.run_now.energy_kwh, 2)}</td><td></td></tr>
      <tr><th>Cost ${cur}</th><td>${GS.num(r.actual.cost, 2)}</td><td>${GS.num(r.run_now.cost, 2)}</td><td>${GS.num(r.saving_cost, 2)}</td></tr>
      <tr><th>CO2 kg (location)</th><td>${GS.num(r.actual.carbon_kg, 2)}</td><td>${GS.num(r.run_now.carbon_kg, 2)}</td><td>${GS.num(r.saving_carbon_kg, 2)}</td></tr>
      ${r.carbon_market_kg === null || r.carbon_market_kg === undefined ? "" : `<tr><th>CO2 kg (market)</th><td>${GS.num(r.carbon_market_kg, 2)}</td><td></td><td></td></tr>`}
      </tbody></table></div>`;
    // "plan 12: ..." names the plan that moved the job: link it to that plan's page
    const message = (m) => GS.esc(m).replace(/^plan (\d+)\b/, (all, id) => `<a href="/ui/plan?id=${id}">${all}</a>`);
    $("timeline").innerHTML = events.map((e) => `<li><b>${GS.esc(e.state)}</b> ${GS.fmtTime(e.at)} <span class="muted">${message(e.message)}</span></li>`).join("");
    const terminal = ["succeeded", "failed", "cancelled", "lost", "unschedulable"];
    $("cancel-btn").hidden = terminal.includes(job.state);
    clearTimeout(timer);
    if (!terminal.includes(job.state)) timer = setTimeout(() => load(true), 15000); // follow a job until it finishes
    logTerminal = terminal.includes(job.state);
    refreshLog();
  }
  // The log panel: the tail of the latest run that reached a runtime, re-read every few seconds while it runs.
  let logTimer = null, logTerminal = false, logRun = null;
  async function refreshLog() {
    clearTimeout(logTimer);
    try {
      const runs = await GS.api("GET", `/api/v1/jobs/${id}/runs`);
      const run = [...runs].reverse().find((x) => x.runtime_job_id);
      if (!run) { $("log").textContent = "No run has reached a runtime yet."; }
      else {
        const url = `/api/v1/jobs/${id}/runs/${run.id}/log`;
        $("log-run").textContent = `run ${run.id} (${run.state})`;
        $("log-download").href = url + "?download=true";
        $("log-download").hidden = false;
        const resp = await fetch(url + "?tail_lines=500", { credentials: "same-origin" });
        const text = await resp.text();
        const pre = $("log");
        const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
        if (resp.ok) pre.textContent = text || "(empty)";
        else pre.textContent = (() => { try { return JSON.parse(text).detail; } catch (e) { return text; } })();
        if (atBottom || logRun !== run.id) pre.scrollTop = pre.scrollHeight;
        logRun = run.id;
        if (["succeeded", "failed", "cancelled", "lost"].includes(run.state) && logTerminal) return;
      }
    } catch (err) { $("log").textContent = err.describe ? err.describe() : String(err); }
    if ($("log-follow").checked && !logTerminal) logTimer = setTimeout(refreshLog, 2000);
  }
  $("log-follow").addEventListener("change", () => { if ($("log-follow").checked) refreshLog(); });
  $("cancel-btn").addEventListener("click", async () => {
    if (!confirm("Cancel this job?")) return;
    try { await GS.busy("Cancelling", () => GS.api("POST", `/api/v1/jobs/${id}/cancel`)); } catch (err) { alert(err.describe ? err.describe() : err); }
    load();
  });
  load();
})();
