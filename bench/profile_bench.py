"""Profile three GPU workload shapes through the local connector and check predicted energy against NVML.

For each shape of bench/gpu_workloads.py (training, rendering, decode):

1. **calibrate**: a short job (``--calib-steps`` steps and at least ``--calib-min-seconds``) submitted through
   :class:`connectors.local.LocalConnector`. The job reports steps/s and energy per step of its timed window
   (NVML total-energy counter); the connector meters the whole job. The difference between the two is the
   job's fixed overhead (process start, CUDA context, model build, warm-up) [J, s].
2. **predict**: a run of N steps, N = steps/s x ``--run-seconds``, is predicted to use
   ``overhead_j + N x energy_per_step_j``.
3. **run**: the N-step job is submitted through the same connector and its NVML-metered energy (the
   connector's own EnergyReading, over the whole job) is compared with the prediction.

Prints a table and, with ``--json``, one JSON object as the last line (per shape ``predicted_kwh``,
``metered_kwh``, ``error_pct``). Writes the full record to ``--out`` when given. On a machine without an
NVIDIA GPU it says so and exits 0 without figures. Device work happens only inside the jobs, so this script
needs only the standard library and the project's connectors package.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from connectors.base import JobSpec, RunStatus  # noqa: E402
from connectors.local import LocalConnector, detect_nvidia_gpus  # noqa: E402

WORKLOADS = Path(__file__).resolve().parent / "gpu_workloads.py"
SHAPES = ("training", "rendering", "decode")
#: Workload class each shape stands for in the catalog's measured profiles.
SHAPE_CLASSES = {"training": ("training", "fine_tuning"), "rendering": ("rendering",), "decode": ("batch_inference",)}
TARGET_ERROR_PCT = 10.0
METHOD = ("calibration job then N-step run job per shape, both through connectors.local.LocalConnector; "
          "predicted = calibration overhead + N x energy/step; metered = the connector's NVML EnergyReading")


@dataclass(frozen=True, slots=True)
class Calibration:
    """What a calibration job measured.

    Attributes
    ----------
    steps_per_s : float
        Steady-state throughput [steps/s].
    energy_per_step_j : float
        Steady-state GPU energy per step [J].
    avg_power_w : float
        Mean GPU power over the timed window [W].
    overhead_j : float
        Energy of the job outside its timed steps (start, build, warm-up, exit) [J].
    overhead_s : float
        Time of the job outside its timed steps [s].
    """

    steps_per_s: float
    energy_per_step_j: float
    avg_power_w: float
    overhead_j: float
    overhead_s: float


def calibration_from(result: dict[str, Any], job_energy_j: float, job_seconds: float) -> Calibration:
    """Turn a calibration job's own report and its metered whole-job energy into a :class:`Calibration`.

    Parameters
    ----------
    result : dict
        The job's ``GRIDSHIFT_RESULT`` (steps, seconds, energy_j of the timed window).
    job_energy_j : float
        Energy the connector metered over the whole job [J].
    job_seconds : float
        Wall time of the whole job [s].

    Raises
    ------
    ValueError
        When the job reported no energy or a non-positive throughput or energy.
    """
    steps, seconds, energy_j = result.get("steps"), result.get("seconds"), result.get("energy_j")
    if not steps or not seconds or seconds <= 0 or steps <= 0:
        raise ValueError(f"calibration of {result.get('shape')!r} reported no timed steps: {result}")
    if energy_j is None or energy_j <= 0:
        raise ValueError(f"calibration of {result.get('shape')!r} reported no NVML energy (energy_j={energy_j})")
    return Calibration(
        steps_per_s=steps / seconds,
        energy_per_step_j=energy_j / steps,
        avg_power_w=energy_j / seconds,
        overhead_j=max(0.0, job_energy_j - energy_j),
        overhead_s=max(0.0, job_seconds - seconds),
    )


def predict(cal: Calibration, steps: int) -> tuple[float, float]:
    """Predicted energy [J] and wall time [s] of a job of ``steps`` steps from its calibration."""
    return cal.overhead_j + steps * cal.energy_per_step_j, cal.overhead_s + steps / cal.steps_per_s


def error_pct(predicted: float, metered: float) -> float:
    """Signed prediction error relative to the metered value [%]."""
    return 100.0 * (predicted - metered) / metered


# -- running jobs through the connector -----------------------------------------------------------------------
def run_job(conn: LocalConnector, run_key: str, command: str, hardware: str, gpus: int,
            limit_s: float) -> dict[str, Any]:  # fmt: skip
    """Submit a job, wait for it, and return its state, energy reading and parsed result."""
    spec = JobSpec(run_key=run_key, name=run_key, command=command, hardware=hardware, gpu_count=gpus,
                   time_limit_minutes=max(1, math.ceil(limit_s / 60.0)))  # fmt: skip
    conn.submit(spec)
    while True:
        state = conn.poll(run_key)
        if state.status.terminal:
            break
        time.sleep(0.5)
    reading = conn.energy(run_key)
    log = conn.log_path(run_key).read_text(errors="replace") if conn.log_path(run_key).exists() else ""
    sys.path.insert(0, str(WORKLOADS.parent))
    from gpu_workloads import parse_result

    seconds = (state.finished_at - state.started_at).total_seconds() if state.started_at and state.finished_at else None
    if reading is not None and reading.avg_power_w > 0:
        seconds = reading.energy_kwh * 3.6e6 / reading.avg_power_w  # the metered span
    return {
        "run_key": run_key,
        "status": state.status.value,
        "message": state.message,
        "exit_code": state.exit_code,
        "energy": None if reading is None else {"energy_kwh": reading.energy_kwh,
                                                 "avg_power_w": reading.avg_power_w,
                                                 "source": reading.source.value},
        "job_seconds": seconds,
        "result": parse_result(log),
        "log_tail": log[-2000:],
    }


def _smi() -> str:
    if not shutil.which("nvidia-smi"):
        return ""
    query = "name,driver_version,power.limit,power.draw,temperature.gpu,clocks.sm,clocks.mem"
    out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv"], capture_output=True, text=True,
                         timeout=20, check=False)  # fmt: skip
    return out.stdout.strip()


def idle_power_w(device_index: int, seconds: float = 5.0) -> float | None:
    """Mean power of an idle GPU from its total-energy counter over ``seconds`` [W]; None without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
        e0, t0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle), time.monotonic()
        time.sleep(seconds)
        e1, t1 = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle), time.monotonic()
        return (e1 - e0) / 1000.0 / (t1 - t0)
    except Exception:
        return None


def bench(args: argparse.Namespace, log: Any) -> dict[str, Any]:
    gpus = detect_nvidia_gpus()
    if args.cpu_smoke:
        gpus, hardware, gpu_count = {"h100": []}, "h100", 0
    elif not gpus:
        return {"gpu": None, "skipped": "no NVIDIA GPU found through NVML: nothing to measure", "shapes": {}}
    else:
        hardware = sorted(gpus)[0]
        gpu_count = 1
    state_dir = Path(tempfile.mkdtemp(prefix="gs-profile-"))
    conn = LocalConnector({"state_dir": str(state_dir), "gpus": gpus, "vendors": {}, "meter_interval_s": 1.0,
                           "shell": "/bin/sh", "workdir": None})  # fmt: skip
    python = args.python or sys.executable
    size = " --size tiny" if args.cpu_smoke else ""
    stamp = datetime.now(UTC).strftime("%H%M%S")
    record: dict[str, Any] = {"gpu": hardware, "nvidia_smi_before": _smi(), "started_at": datetime.now(UTC).isoformat(),
                              "method": METHOD, "shapes": {}}  # fmt: skip
    t_start = time.monotonic()
    if not args.cpu_smoke:
        record["idle_power_w"] = idle_power_w(gpus[hardware][0])
        print(f"idle power of {hardware}: {record['idle_power_w']} W", file=log, flush=True)
    shapes = [s for s in args.shapes.split(",") if s]
    cals: dict[str, Calibration] = {}
    for shape in shapes:
        cmd = (f"{python} {WORKLOADS} calibrate --shape {shape} --steps {args.calib_steps} "
               f"--min-seconds {args.calib_min_seconds} --warmup {args.warmup}{size}")  # fmt: skip
        job = run_job(conn, f"gs-prof-{stamp}-{shape}-cal", cmd, hardware, gpu_count, 600)
        entry = record["shapes"].setdefault(shape, {})
        entry["calibration_job"] = job
        try:
            if job["status"] != RunStatus.SUCCEEDED.value or job["result"] is None:
                raise ValueError(f"calibration job {job['status']}: {job['message']}")
            if args.cpu_smoke:  # no meter: stand in a nominal figure so the arithmetic runs end to end
                job["result"]["energy_j"] = job["result"]["seconds"] * 100.0
                job_energy_j = (job["job_seconds"] or job["result"]["seconds"]) * 100.0
            else:
                assert job["energy"] is not None and job["energy"]["source"] == "nvml", job["energy"]
                job_energy_j = job["energy"]["energy_kwh"] * 3.6e6
            cals[shape] = calibration_from(job["result"], job_energy_j, job["job_seconds"] or 0.0)
            entry["calibration"] = asdict(cals[shape])
            print(f"calibrated {shape}: {cals[shape]}", file=log, flush=True)
        except (ValueError, AssertionError) as exc:
            entry["error"] = f"calibration failed: {exc}"
            print(entry["error"], job["log_tail"], file=log, flush=True)
    for i, shape in enumerate(shapes):
        if shape not in cals:
            continue
        cal = cals[shape]
        left = [s for s in shapes[i:] if s in cals]
        budget_left = args.budget_s - (time.monotonic() - t_start)
        avail_s = budget_left / len(left) - cal.overhead_s - 5.0
        run_s = min(args.run_seconds, avail_s)
        if avail_s < min(10.0, args.run_seconds):
            record["shapes"][shape]["error"] = f"no time left in the {args.budget_s:.0f} s budget"
            continue
        steps = max(1, round(cal.steps_per_s * run_s))
        pred_j, pred_s = predict(cal, steps)
        cmd = f"{python} {WORKLOADS} run --shape {shape} --steps {steps} --warmup {args.warmup}{size}"
        job = run_job(conn, f"gs-prof-{stamp}-{shape}-run", cmd, hardware, gpu_count, 3 * pred_s + 120)
        entry = record["shapes"][shape]
        entry.update(run_job=job, steps=steps, predicted_j=pred_j, predicted_s=pred_s)
        if job["status"] != RunStatus.SUCCEEDED.value or job["energy"] is None:
            entry["error"] = f"run job {job['status']}: {job['message']}"
            print(entry["error"], job["log_tail"], file=log, flush=True)
            continue
        metered_j = job["energy"]["energy_kwh"] * 3.6e6
        if args.cpu_smoke:
            metered_j = (job["job_seconds"] or 0.0) * 100.0
        ref = (args.reference_shapes or {}).get(shape, {}).get("calibration")
        if ref and metered_j > 0:  # the profile measured earlier, on another machine (the catalog's figures)
            ref_j = predict(Calibration(**ref), steps)[0]
            entry.update(predicted_ref_kwh=ref_j / 3.6e6, error_ref_pct=error_pct(ref_j, metered_j))
        entry.update(
            predicted_kwh=pred_j / 3.6e6, metered_kwh=metered_j / 3.6e6,
            error_pct=error_pct(pred_j, metered_j) if metered_j > 0 else None,
            predicted_steady_kwh=steps * cal.energy_per_step_j / 3.6e6,
            metered_s=job["job_seconds"], avg_power_w=job["energy"]["avg_power_w"],
            energy_source=job["energy"]["source"],
        )  # fmt: skip
        print(f"{shape} run {job['run_key']} through the local connector: EnergyReading(energy_kwh="
              f"{job['energy']['energy_kwh']:.6f}, avg_power_w={job['energy']['avg_power_w']:.1f}, "
              f"source={job['energy']['source']}) over {job['job_seconds']:.1f} s", file=log, flush=True)
        print(f"ran {shape}: {steps} steps, predicted {pred_j / 3.6e6:.5f} kWh, metered "
              f"{metered_j / 3.6e6:.5f} kWh", file=log, flush=True)  # fmt: skip
    record["nvidia_smi_after"] = _smi()
    record["finished_at"] = datetime.now(UTC).isoformat()
    shutil.rmtree(state_dir, ignore_errors=True)
    return record


def summary(record: dict[str, Any]) -> dict[str, Any]:
    """The ``--json`` line: per shape predicted_kwh, metered_kwh, error_pct, plus the calibrated profile."""
    out: dict[str, Any] = {"gpu": record.get("gpu"), "target_error_pct": TARGET_ERROR_PCT, "shapes": {}}
    if record.get("skipped"):
        out["skipped"] = record["skipped"]
        return out
    for shape, entry in record["shapes"].items():
        cal = entry.get("calibration") or {}
        out["shapes"][shape] = {
            "predicted_kwh": entry.get("predicted_kwh"), "metered_kwh": entry.get("metered_kwh"),
            "error_pct": entry.get("error_pct"), "steps": entry.get("steps"),
            "steps_per_s": cal.get("steps_per_s"), "energy_per_step_j": cal.get("energy_per_step_j"),
            "power_w": cal.get("avg_power_w"), "run_avg_power_w": entry.get("avg_power_w"),
            "run_seconds": entry.get("metered_s"), "error": entry.get("error"),
            "predicted_ref_kwh": entry.get("predicted_ref_kwh"), "error_ref_pct": entry.get("error_ref_pct"),
        }  # fmt: skip
    errors = [s.get("error_pct") for s in out["shapes"].values()]
    out["all_within_target"] = bool(errors) and all(e is not None and abs(e) <= TARGET_ERROR_PCT for e in errors)
    return out


def table(summ: dict[str, Any]) -> str:
    if summ.get("skipped"):
        return f"profile_bench: {summ['skipped']}"
    head = f"{'shape':<10} {'steps/s':>9} {'J/step':>9} {'W':>6} {'steps':>7} {'run s':>6} " \
           f"{'pred kWh':>9} {'meter kWh':>9} {'err %':>7} {'ref err %':>9}"
    lines = [f"profile_bench on {summ['gpu']} (target |error| <= {TARGET_ERROR_PCT:g} %)", head]

    def f(v: Any, spec: str) -> str:
        return format(v, spec) if isinstance(v, int | float) else "-"

    for shape, s in summ["shapes"].items():
        lines.append(f"{shape:<10} {f(s['steps_per_s'], '9.2f')} {f(s['energy_per_step_j'], '9.2f')} "
                     f"{f(s['power_w'], '6.0f')} {f(s['steps'], '7d')} {f(s['run_seconds'], '6.0f')} "
                     f"{f(s['predicted_kwh'], '9.5f')} {f(s['metered_kwh'], '9.5f')} {f(s['error_pct'], '+7.2f')} "
                     f"{f(s.get('error_ref_pct'), '+9.2f')}"
                     + (f"  ERROR {s['error']}" if s.get("error") else ""))  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Predicted vs NVML-metered energy of three GPU workload shapes")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--calib-steps", type=int, default=200)
    parser.add_argument("--calib-min-seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--run-seconds", type=float, default=150.0, help="target length of each run [s]")
    parser.add_argument("--budget-s", type=float, default=540.0, help="wall-clock budget of the whole bench [s]")
    parser.add_argument("--python", default=None, help="interpreter with PyTorch for the jobs (default: this one)")
    parser.add_argument("--out", type=Path, default=None, help="write the full JSON record here")
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="run tiny shapes on the CPU with a nominal 100 W (checks the plumbing, no figures)")
    parser.add_argument("--reference", type=Path, default=None,
                        help="an earlier results JSON (bench/results/...): also predict from its calibrations")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    args.reference_shapes = json.loads(args.reference.read_text())["shapes"] if args.reference else None
    bad = [s for s in args.shapes.split(",") if s and s not in SHAPES]
    if bad:
        parser.error(f"unknown shape(s) {', '.join(bad)}; known: {', '.join(SHAPES)}")
    record = bench(args, sys.stdout)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=1, sort_keys=True, default=str))
    summ = summary(record)
    print(table(summ))
    if args.json:
        print(json.dumps(summ, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
