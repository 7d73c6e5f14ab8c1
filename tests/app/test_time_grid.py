"""The time grid as users meet it: work released now starts now, a window that cannot hold its job is refused at
submission, and a job shorter than a slot counts its own length in the plan, its power and its counterfactual."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from sqlalchemy import select

from app.enums import JobState, SeriesKind
from app.models import Assignment, Job, Run
from app.services import market
from app.services.assignments import assignment_power_kw, per_slot_use, planned_intervals
from app.services.dispatch import claim as dispatch_claim
from app.services.planning import plan_fleet
from tests.app.test_dispatch_support import add_local_clusters
from tests.app.test_planning_service import add_job
from tests.conftest import job_payload, make_token

PRICE = 80.0  # EUR/MWh, flat: every start costs the same, so the earliest must win


@pytest.fixture
def at_twenty_past(now):
    return now + timedelta(hours=16, minutes=20)


@pytest.fixture
def flat_market(session, small_fleet, now):
    points = []
    for h in range(96):
        ts = now + timedelta(hours=h)
        points.append(market.Point("DE", SeriesKind.PRICE, ts, PRICE, "EUR/MWh", "test"))
        points.append(market.Point("DE", SeriesKind.CARBON_INTENSITY, ts, 300.0, "gCO2eq/kWh", "test"))
    market.store(session, points)
    session.commit()


def _short_job(session, released, **over) -> Job:
    fields = dict(gpu_count=1, reference_gpu_hours=None, reference_hardware=None, durations_minutes={"h100": 1},
                  allowed_regions=["de"], allowed_hardware=["h100"], release_at=released,
                  deadline_at=released + timedelta(minutes=65), command="sleep 5")
    fields.update(over)
    return add_job(session, released, **fields)


@pytest.mark.parametrize("slot_minutes", [15, 60])
def test_a_job_released_at_twenty_past_with_a_65_minute_window_starts_within_a_tick(
    session, settings, flat_market, at_twenty_past, slot_minutes, tmp_path
):
    from dataclasses import replace

    settings = replace(settings, slot_minutes=slot_minutes)
    add_local_clusters(session, tmp_path)
    job = _short_job(session, at_twenty_past)
    record = plan_fleet(session, settings, now=at_twenty_past, horizon_hours=72, objective="cost", trigger="new_work")
    session.commit()
    assert record.n_assigned == 1, session.get(Job, job.id).state_reason
    a = session.scalar(select(Assignment).where(Assignment.plan_id == record.plan_id))
    assert a.start_at == at_twenty_past  # not the next slot boundary, and not the slot's start in the past
    tick = dispatch_claim.tick(session, settings, now=at_twenty_past, worker="w")
    (run_id,) = tick.claimed
    run = session.get(Run, run_id)
    assert run.job_id == job.id and run.planned_start_at == at_twenty_past
    session.refresh(job)
    assert job.state is JobState.DISPATCHING


def test_a_window_that_cannot_hold_the_job_is_refused_with_the_earliest_feasible_deadline(
    client, session, small_fleet, now
):
    token = make_token(session, "team-a")
    released = now + timedelta(hours=16, minutes=20)
    body = job_payload(released, durations_minutes={"h100": 1}, allowed_hardware=["h100"],
                       deadline_at=(released + timedelta(minutes=1)).isoformat())
    del body["reference_gpu_hours"]
    resp = client.post("/api/v1/jobs", json=body, headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == 422, resp.json
    (error,) = resp.json["errors"]
    assert error["field"] == "deadline_at"
    # on the 15-minute grid the run must end by the boundary before its deadline: 16:30 at the earliest
    assert "earliest feasible deadline is 2030-01-01T16:30:00+00:00" in error["message"]
    body["deadline_at"] = (released + timedelta(minutes=65)).isoformat()
    ok = client.post("/api/v1/jobs", json=body, headers={"Authorization": f"Bearer {token}"})
    assert ok.status_code == 201, ok.json


def test_a_twenty_second_job_counts_its_length_not_a_slot(session, settings, flat_market, at_twenty_past):
    # 20 GPU-seconds on the reference H100
    job = _short_job(session, at_twenty_past, durations_minutes=None, reference_gpu_hours=20 / 3600,
                     reference_hardware="h100")
    record = plan_fleet(session, settings, now=at_twenty_past, horizon_hours=72, objective="cost", trigger="manual")
    session.commit()
    a = session.scalar(select(Assignment).where(Assignment.plan_id == record.plan_id))
    assert a.start_at == at_twenty_past
    assert a.end_at - a.start_at == timedelta(seconds=20)
    kw = (90 + 0.85 * 610) / 1000 * 1.2  # 1 H100 at the power model's busy draw, PUE 1.2
    assert math.isclose(assignment_power_kw(a), kw, rel_tol=1e-6)  # its draw, not its draw spread over a slot
    assert math.isclose(a.energy_kwh, kw / 180, rel_tol=1e-6)
    assert math.isclose(a.cost, kw / 180 * PRICE / 1000, rel_tol=1e-6)
    assert math.isclose(a.run_now_energy_kwh, kw / 180, rel_tol=1e-6)  # the counterfactual runs a minute too
    assert math.isclose(a.run_now_cost, kw / 180 * PRICE / 1000, rel_tol=1e-6)
    session.refresh(job)
    gpus, _ = per_slot_use(planned_intervals(session), start=at_twenty_past - timedelta(minutes=5), slot_minutes=15,
                           n_slots=8)
    assert gpus[("de", "h100")] == [1, 0, 0, 0, 0, 0, 0, 0]  # one quarter-hour, not four


def test_a_finished_run_costs_the_quarter_hours_it_ran_in(session, small_fleet, now):
    from app.models import Region
    from app.services.dispatch.sync import cost_and_carbon

    q = timedelta(minutes=15)
    points = [market.Point("DE", SeriesKind.PRICE, now + k * q, 100.0 * (k + 1), "EUR/MWh", "entsoe", None, 15)
              for k in range(8)]
    points += [market.Point("DE", SeriesKind.CARBON_INTENSITY, now, 300.0, "gCO2eq/kWh", "entsoe", None, 60)]
    market.store(session, points)
    session.commit()
    de = session.scalar(select(Region).where(Region.code == "de"))
    cost, carbon = cost_and_carbon(session, de, now + q, now + 3 * q, 1.0)  # 00:15-00:45: 200 and 300 EUR/MWh
    assert cost == pytest.approx(1.2 * (0.5 * 200 + 0.5 * 300) / 1000)
    assert carbon == pytest.approx(1.2 * 300 / 1000)


def test_short_jobs_share_a_gpus_slot_one_after_another(session, settings, small_fleet, at_twenty_past, now):
    from app.services import fleet

    fleet.set_inventory(session, "de", "h100", 1)  # one GPU
    points = []
    for h in range(96):  # dearer every hour: the cheapest start is now
        ts = now + timedelta(hours=h)
        points.append(market.Point("DE", SeriesKind.PRICE, ts, 50.0 + h, "EUR/MWh", "test"))
        points.append(market.Point("DE", SeriesKind.CARBON_INTENSITY, ts, 300.0, "gCO2eq/kWh", "test"))
    market.store(session, points)
    session.commit()
    jobs = [_short_job(session, at_twenty_past, name=f"short-{k}", durations_minutes={"h100": 2}) for k in range(3)]
    record = plan_fleet(session, settings, now=at_twenty_past, horizon_hours=72, objective="cost", trigger="manual")
    session.commit()
    rows = {a.job_id: a for a in session.scalars(select(Assignment).where(Assignment.plan_id == record.plan_id))}
    assert record.n_assigned == 3
    starts = sorted(rows[j.id].start_at for j in jobs)
    # one GPU, one quarter-hour: 16:20, 16:22, 16:24 (not 16:20, 16:30, 16:45)
    assert starts == [at_twenty_past + timedelta(minutes=2 * k) for k in range(3)]
    assert all(rows[j.id].end_at - rows[j.id].start_at == timedelta(minutes=2) for j in jobs)


def test_the_forecasts_read_a_quarter_hourly_series_as_hourly_means(session, now):
    from app.services.forecasts import _series

    q = timedelta(minutes=15)
    market.store(session, [market.Point("DE", SeriesKind.PRICE, now + k * q, float(k), "EUR/MWh", "entsoe", None, 15)
                           for k in range(8)])
    session.commit()
    series = _series(session, "DE", SeriesKind.PRICE, now, now + timedelta(hours=2))
    assert list(series.index) == [now, now + timedelta(hours=1)] and series.tolist() == [1.5, 5.5]
