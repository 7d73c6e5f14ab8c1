"""Job profiles: catalog estimates, measurements that replace them in planning, flags, and bad input."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from sqlalchemy import func, select

from app.enums import Role
from app.errors import NotFound, ValidationFailed
from app.models import AuditEntry, HardwareType, JobProfile
from app.services import catalog, fleet, power, profiles
from tests.conftest import make_token


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# -- the shipped catalog --------------------------------------------------------------------------------------
def test_shipped_catalog_sources_every_figure_and_keeps_the_measured_h200_profiles():
    entries = {e["code"]: e for e in catalog.read_catalog()}
    assert {"h100", "h200", "a100", "l40s", "mi300x", "ascend910b"} <= set(entries)
    for code, e in entries.items():
        for key in ("memory_gb", "memory_bandwidth_gbs", "bf16_tflops", "tdp_w", "idle_w", "resource_name"):
            assert e["sources"][key]["source"], (code, key)
        assert set(e["relative_throughput"]) == {"training", "fine_tuning", "rendering", "batch_inference"}
    assert entries["mi300x"]["resource_name"] == "amd.com/gpu"
    assert entries["ascend910b"]["resource_name"] == "huawei.com/Ascend910"
    assert entries["ascend910b"]["sources"]["bf16_tflops"]["estimate"] is True
    h200 = {p["workload_class"]: p for p in entries["h200"]["measured_profiles"]}
    assert set(h200) == {"training", "fine_tuning", "rendering", "batch_inference"}
    for p in h200.values():
        assert datetime.fromisoformat(p["measured_at"]).year == 2026 and "NVML" in p["method"]
        assert 0 < p["power_w"] <= entries["h200"]["tdp_w"]


def test_bad_catalog_entries_are_named_and_nothing_is_imported(session, tmp_path):
    good = catalog.read_catalog()[0]
    bad = {**good, "code": "x1", "tdp_w": -5, "sources": {k: v for k, v in good["sources"].items() if k != "idle_w"}}
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps({"hardware": [good, bad]}))
    with pytest.raises(ValidationFailed) as err:
        catalog.import_catalog(session, path)
    fields = {e.field for e in err.value.errors}
    assert {"hardware[1].tdp_w", "hardware[1].sources.idle_w"} <= fields
    assert session.scalar(select(func.count()).select_from(HardwareType)) == 0


def test_import_is_idempotent_and_measured_profiles_replace_estimates_in_the_snapshot(session):
    assert catalog.import_catalog(session) == (8, 4)
    assert catalog.import_catalog(session) == (8, 0)
    session.commit()
    snap = fleet.snapshot(session)
    measured = {p["workload_class"]: p for p in catalog.read_catalog()[1]["measured_profiles"]}
    assert snap.power_w("h200", "batch_inference") == pytest.approx(measured["batch_inference"]["power_w"])
    h100 = snap.hardware["h100"]
    assert snap.power_w("h100", "training") == pytest.approx(
        power.gpu_power_w(h100.idle_w, h100.tdp_w, power.default_utilisation("training")))


# -- estimates ------------------------------------------------------------------------------------------------
def test_estimate_scales_compute_bound_by_matrix_rate_and_memory_bound_by_bandwidth(session):
    fleet.upsert_hardware(session, "h100", dict(vendor="nvidia", model="H100", memory_gb=80, tdp_w=700, idle_w=90,
                                                bf16_tflops=1000, memory_bandwidth_gbs=3000))  # fmt: skip
    fleet.upsert_hardware(session, "new", dict(vendor="nvidia", model="New", memory_gb=80, tdp_w=500, idle_w=100,
                                               bf16_tflops=500, memory_bandwidth_gbs=6000))  # fmt: skip
    train = profiles.current(session, "new", "training")
    infer = profiles.current(session, "new", "batch_inference")
    assert train.source == "estimate" and train.relative_throughput == pytest.approx(0.5)
    assert infer.relative_throughput == pytest.approx(2.0)
    assert train.power_w == pytest.approx(100 + power.default_utilisation("training") * 400)
    # a figure in the catalog's table wins over the ratio
    fleet.upsert_hardware(session, "new", dict(relative_throughput={"training": 0.7}))
    assert profiles.current(session, "new", "training").relative_throughput == pytest.approx(0.7)


# -- measurements ---------------------------------------------------------------------------------------------
def test_measurement_becomes_the_profile_planning_uses(session, small_fleet):
    before = fleet.snapshot(session)
    m = profiles.Measurement("training", "a100", steps_per_s=6.0, power_w=330.0, reference_steps_per_s=12.0,
                             method="test rig")  # fmt: skip
    row = profiles.record_measurement(session, m)
    session.commit()
    after = fleet.snapshot(session)
    assert after.power_w("a100", "training") == 330.0 != before.power_w("a100", "training")
    assert after.throughput("a100", "training") == pytest.approx(0.5)
    assert row.energy_per_step_j == pytest.approx(55.0)
    assert row.utilisation == pytest.approx((330 - 60) / (400 - 60))
    # a second measurement replaces the first: one active profile per (class, hardware)
    profiles.record_measurement(session, profiles.Measurement("training", "a100", 6.1, 335.0))
    session.commit()
    active = session.scalars(select(JobProfile).where(JobProfile.active.is_(True))).all()
    assert len(active) == 1 and active[0].power_w == 335.0
    assert active[0].relative_throughput == pytest.approx(0.5)  # kept: no reference rate this time


def test_measurement_off_by_more_than_20_percent_is_flagged_on_the_api(client, session, small_fleet):
    ops = make_token(session, "ops", Role.ADMIN, operator=True)
    reader = make_token(session, "team-a", Role.READONLY)
    est = profiles.current(session, "h100", "rendering").power_w
    close = {"workload_class": "rendering", "hardware": "h100", "steps_per_s": 100, "power_w": est * 1.1}
    resp = client.post("/api/v1/profiles", json=close, headers=auth(ops))
    assert resp.status_code == 201, resp.json
    assert resp.json["flagged"] is False and resp.json["deviation_pct"] == pytest.approx(10.0)
    far = {"workload_class": "batch_inference", "hardware": "l40s", "steps_per_s": 50, "power_w": 340,
           "measured_at": "2030-01-01T00:00:00+00:00", "method": "bench"}  # fmt: skip
    resp = client.post("/api/v1/profiles", json=far, headers=auth(ops))
    assert resp.status_code == 201 and resp.json["flagged"] is True and resp.json["deviation_pct"] > 20
    flagged = client.get("/api/v1/profiles/flagged", headers=auth(reader)).json
    assert [(p["hardware"], p["workload_class"]) for p in flagged] == [("l40s", "batch_inference")]
    listed = client.get("/api/v1/profiles?hardware=l40s", headers=auth(reader)).json
    assert {p["workload_class"]: p["source"] for p in listed} == {
        "training": "estimate", "fine_tuning": "estimate", "rendering": "estimate", "batch_inference": "measured"}
    one = client.get("/api/v1/profiles/l40s/batch_inference", headers=auth(reader)).json
    assert one["power_w"] == 340 and one["measured_at"].startswith("2030-01-01")
    assert session.scalars(select(AuditEntry.action)).all() == ["profile.measured", "profile.measured"]


def test_bad_measurements_name_the_field_and_leave_the_previous_profile_in_force(client, session, small_fleet):
    ops = make_token(session, "ops", Role.ADMIN, operator=True)
    good = {"workload_class": "training", "hardware": "h100", "steps_per_s": 10, "power_w": 600}
    assert client.post("/api/v1/profiles", json=good, headers=auth(ops)).status_code == 201
    for body, field in [({**good, "power_w": 0}, "power_w"), ({**good, "steps_per_s": -3}, "steps_per_s"),
                        ({**good, "workload_class": "mining"}, "workload_class"),
                        ({**good, "power_w": 5000}, "power_w")]:  # fmt: skip
        resp = client.post("/api/v1/profiles", json=body, headers=auth(ops))
        assert resp.status_code == 422, body
        assert field in json.dumps(resp.json), resp.json
    resp = client.post("/api/v1/profiles", json={**good, "hardware": "tpu9"}, headers=auth(ops))
    assert resp.status_code == 404 and "h100" in resp.json["detail"]
    member = make_token(session, "team-a", Role.ADMIN)
    assert client.post("/api/v1/profiles", json=good, headers=auth(member)).status_code == 403
    now = client.get("/api/v1/profiles/h100/training", headers=auth(ops)).json
    assert now["power_w"] == 600 and now["source"] == "measured"
    assert client.get("/api/v1/profiles/h100/mining", headers=auth(ops)).status_code == 422
    with pytest.raises(NotFound):
        profiles.current(session, "nope", "training")


# -- a calibration job through a connector -------------------------------------------------------------------
def _result_line(**fields: float) -> str:
    return profiles.RESULT_PREFIX + json.dumps(fields)


def test_calibration_through_the_local_connector_records_its_result(session, small_fleet, tmp_path):
    from connectors.base import JobSpec
    from connectors.local import LocalConnector

    conn = LocalConnector({"state_dir": str(tmp_path / "rt"), "gpus": {"h100": []}, "vendors": {},
                           "meter_interval_s": 1.0, "shell": "/bin/sh", "workdir": None})  # fmt: skip
    line = _result_line(steps=400, seconds=20.0, energy_j=12000.0)
    spec = JobSpec(run_key="gs-prof-ok", name="cal", command=f"echo warming up; echo '{line}'", hardware="h100",
                   gpu_count=0)  # fmt: skip
    row = profiles.measure(session, conn, spec, "training", poll_s=0.1, timeout_s=60)
    session.commit()
    assert row.steps_per_s == pytest.approx(20.0) and row.power_w == pytest.approx(600.0)
    assert row.energy_per_step_j == pytest.approx(30.0) and "local" in row.method
    assert fleet.snapshot(session).power_w("h100", "training") == pytest.approx(600.0)


def test_calibration_that_fails_midway_leaves_the_previous_profile(session, small_fleet, tmp_path):
    from connectors.base import JobSpec
    from connectors.local import LocalConnector

    profiles.record_measurement(session, profiles.Measurement("training", "h100", 10.0, 610.0))
    session.commit()
    conn = LocalConnector({"state_dir": str(tmp_path / "rt"), "gpus": {"h100": []}, "vendors": {},
                           "meter_interval_s": 1.0, "shell": "/bin/sh", "workdir": None})  # fmt: skip
    crash = JobSpec(run_key="gs-prof-crash", name="cal", command="echo step 1; exit 3", hardware="h100", gpu_count=0)
    with pytest.raises(ValidationFailed, match="failed midway"):
        profiles.measure(session, conn, crash, "training", poll_s=0.1, timeout_s=60)
    silent = JobSpec(run_key="gs-prof-silent", name="cal", command="true", hardware="h100", gpu_count=0)
    with pytest.raises(ValidationFailed, match="metered no energy"):  # an estimate is not a measurement
        profiles.measure(session, conn, silent, "training", poll_s=0.1, timeout_s=60)
    nonsense = JobSpec(run_key="gs-prof-zero", name="cal", hardware="h100", gpu_count=0,
                       command=f"echo '{_result_line(steps=10, seconds=5.0, energy_j=-1.0)}'")  # fmt: skip
    with pytest.raises(ValidationFailed):
        profiles.measure(session, conn, nonsense, "training", poll_s=0.1, timeout_s=60)
    session.rollback()
    in_force = profiles.current(session, "h100", "training")
    assert in_force.power_w == 610.0 and in_force.source == "measured"


def test_measurement_from_a_metered_job_without_a_result_line_divides_by_gpus():
    from connectors.base import EnergyReading, EnergySource, RunStatus, RuntimeState

    state = RuntimeState("j1", RunStatus.SUCCEEDED, datetime(2030, 1, 1, tzinfo=UTC),
                         datetime(2030, 1, 1, 0, 1, 40, tzinfo=UTC))  # fmt: skip
    reading = EnergyReading(energy_kwh=0.1, avg_power_w=1200.0, source=EnergySource.NVML)
    m = profiles.measurement_from_job("rendering", "h200", 2, state, reading, "no result here", steps=500)
    assert m.steps_per_s == pytest.approx(5.0) and m.power_w == pytest.approx(600.0)
