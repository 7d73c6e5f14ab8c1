"""The profile bench without a GPU: it says so and exits 0; its prediction arithmetic; the plan-bench bridge."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench import catalog_plan, profile_bench
from bench.plan_workload import BUSY
from connectors.local import detect_nvidia_gpus


def test_without_an_nvidia_gpu_the_bench_says_so_and_exits_0(capsys):
    if detect_nvidia_gpus():
        pytest.skip("this machine has an NVIDIA GPU: the bench would measure")
    assert profile_bench.main(["--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert "no NVIDIA GPU" in lines[0]
    last = json.loads(lines[-1])
    assert last["gpu"] is None and last["shapes"] == {} and "no NVIDIA GPU" in last["skipped"]


def test_calibration_splits_steady_steps_from_job_overhead_and_predicts_a_longer_run():
    result = {"shape": "training", "steps": 200, "seconds": 10.0, "energy_j": 7000.0}
    cal = profile_bench.calibration_from(result, job_energy_j=9000.0, job_seconds=18.0)
    assert cal.steps_per_s == pytest.approx(20.0) and cal.energy_per_step_j == pytest.approx(35.0)
    assert cal.avg_power_w == pytest.approx(700.0)
    assert cal.overhead_j == pytest.approx(2000.0) and cal.overhead_s == pytest.approx(8.0)
    energy_j, seconds = profile_bench.predict(cal, 3000)
    assert energy_j == pytest.approx(2000.0 + 3000 * 35.0) and seconds == pytest.approx(8.0 + 150.0)
    assert profile_bench.error_pct(110.0, 100.0) == pytest.approx(10.0)


def test_a_calibration_without_nvml_energy_is_refused():
    with pytest.raises(ValueError, match="no NVML energy"):
        profile_bench.calibration_from({"shape": "decode", "steps": 10, "seconds": 1.0, "energy_j": None}, 1.0, 2.0)
    with pytest.raises(ValueError, match="no timed steps"):
        profile_bench.calibration_from({"shape": "decode", "steps": 0, "seconds": 1.0, "energy_j": 5.0}, 1.0, 2.0)


def test_plan_bench_rows_carry_the_profile_in_force():
    entries = catalog_plan.read_catalog()
    rows = {r["name"]: r for r in catalog_plan.rows_from_catalog(entries, "batch_inference")}
    measured = next(p for p in entries[1]["measured_profiles"] if p["workload_class"] == "batch_inference")
    assert rows["H200"]["tdp_w"] * BUSY["inference"] == pytest.approx(measured["power_w"], rel=1e-4)
    assert rows["H100"]["relative_throughput"] == 1.0
    with pytest.raises(ValueError, match="unknown hardware"):
        catalog_plan.rows_from_catalog(entries, "training", {"tpu": {"power_w": 1.0}})


def test_the_plan_bench_workload_changes_hardware_when_a_profile_changes():
    entries = catalog_plan.read_catalog()
    run: dict[str, Any] = dict(jobs=200, seed=0, days=2, time_limit_s=5.0, kind="training")
    before = catalog_plan.hardware_gpu_hours(catalog_plan.rows_from_catalog(entries, "training"), **run)
    hungrier = catalog_plan.rows_from_catalog(entries, "training", {"h200": {"power_w": 2000.0}})
    after = catalog_plan.hardware_gpu_hours(hungrier, **run)
    assert after.get("H200", 0.0) < 0.5 * before["H200"]  # work leaves the H200 once it draws far more
    assert sum(after.values()) > 0.9 * sum(before.values())  # and goes to other hardware, not unplanned
    # the measured H200 inference profile (588 W, not the 421 W estimate) moves inference off the H200
    estimates = [{k: v for k, v in e.items() if k != "measured_profiles"} for e in entries]
    inf = dict(run, kind="inference")
    est_plan = catalog_plan.hardware_gpu_hours(catalog_plan.rows_from_catalog(estimates, "batch_inference"), **inf)
    meas_plan = catalog_plan.hardware_gpu_hours(catalog_plan.rows_from_catalog(entries, "batch_inference"), **inf)
    assert meas_plan.get("H200", 0.0) < est_plan["H200"]
