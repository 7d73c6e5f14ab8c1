"""Planning service: Problem from the database, solved, stored as the current plan; job states; previews."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import pytest
from sqlalchemy import func, select

from app.enums import JobState, PlanStatus, RunState, SeriesKind, WorkloadClass
from app.models import Assignment, Job, MarketSeries, Plan, PowerBudgetOverride, Region, Run, UnplannedJob
from app.services import auth
from app.services.job_values import JobValues, normalise
from app.services.planning import plan_fleet, preview_job


def add_series(
    session, zone: str, start: datetime, prices: list[float], carbon: list[float] | None = None
) -> None:
    for k, p in enumerate(prices):
        ts = start + timedelta(hours=k)
        session.add(MarketSeries(zone=zone, kind=SeriesKind.PRICE, ts=ts, value=p, unit="EUR/MWh"))
        c = carbon[k] if carbon is not None else 300.0
        session.add(
            MarketSeries(zone=zone, kind=SeriesKind.CARBON_INTENSITY, ts=ts, value=c, unit="gCO2eq/kWh")
        )
    session.commit()


def add_job(session, now: datetime, **over) -> Job:
    if _tenant_id(session) is None:
        auth.create_tenant(session, "acme")
        session.flush()
    fields = dict(
        tenant_id=_tenant_id(session),
        name="job",
        workload_class=WorkloadClass.TRAINING,
        gpu_count=4,
        reference_gpu_hours=8.0,
        reference_hardware="h100",
        release_at=now,
        deadline_at=now + timedelta(hours=24),
        home_region="de",
        state=JobState.PENDING,
    )
    fields.update(over)
    job = Job(**fields)
    session.add(job)
    session.commit()
    return job


def _tenant_id(session) -> int | None:
    from app.models import Tenant

    return session.scalar(select(Tenant.id).where(Tenant.slug == "acme"))


# DE: dear except hours 5-6; FI: flat 60 EUR/MWh
DE_PRICES = [100.0] * 5 + [10.0, 10.0] + [100.0] * 65
FI_PRICES = [60.0] * 72


@pytest.fixture
def market(session, small_fleet, now):
    add_series(session, "DE", now, DE_PRICES)
    add_series(session, "FI", now, FI_PRICES)


def test_plan_fleet_stores_current_plan_with_run_now_counterfactual(session, settings, market, now):
    job = add_job(
        session, now, gpu_count=4, reference_gpu_hours=8.0, allowed_regions=["de"], allowed_hardware=["h100"]
    )
    record = plan_fleet(session, settings, now=now, horizon_hours=72, objective="cost", trigger="manual")
    session.commit()
    assert record.n_assigned == 1 and record.n_unplanned == 0
    plan = session.get(Plan, record.plan_id)
    assert plan.is_current and plan.status in (PlanStatus.OPTIMAL, PlanStatus.FEASIBLE)
    a = session.scalar(select(Assignment).where(Assignment.plan_id == plan.id))
    # 8 GPU-hours on 4 H100 = 2 h; the two cheap DE hours start at now + 5 h
    assert a.start_at == now + timedelta(hours=5) and a.end_at == now + timedelta(hours=7)
    # 4 GPUs x (90 + 0.85 x 610) W x 2 h x PUE 1.2 at 10 EUR/MWh
    energy = 4 * (90 + 0.85 * 610) / 1000 * 2 * 1.2
    assert math.isclose(a.energy_kwh, energy, rel_tol=1e-6)
    assert math.isclose(a.cost, energy * 10 / 1000, rel_tol=1e-6)
    assert math.isclose(a.run_now_cost, energy * 100 / 1000, rel_tol=1e-6)  # starts at release in DE
    session.refresh(job)
    assert job.state is JobState.PLANNED
    second = plan_fleet(session, settings, now=now, horizon_hours=72, objective="cost", trigger="hourly")
    session.commit()
    assert session.scalar(select(func.count()).select_from(Plan).where(Plan.is_current.is_(True))) == 1
    assert session.get(Plan, second.plan_id).is_current


def test_job_that_can_never_fit_becomes_unschedulable_and_capacity_keeps_pending(
    session, settings, market, now
):
    too_big = add_job(session, now, gpu_count=64, name="too-big")
    late = add_job(
        session,
        now,
        gpu_count=16,
        reference_gpu_hours=16 * 4.0,
        allowed_regions=["de"],
        allowed_hardware=["h100"],
        deadline_at=now + timedelta(hours=4),
        name="takes-all",
    )
    crowded = add_job(
        session,
        now,
        gpu_count=16,
        reference_gpu_hours=16 * 4.0,
        allowed_regions=["de"],
        allowed_hardware=["h100"],
        deadline_at=now + timedelta(hours=4),
        name="no-room",
    )
    record = plan_fleet(session, settings, now=now, horizon_hours=72, objective="cost", trigger="manual")
    session.commit()
    reasons = dict(
        session.execute(
            select(UnplannedJob.job_id, UnplannedJob.reason).where(UnplannedJob.plan_id == record.plan_id)
        ).all()
    )
    assert reasons[too_big.id] == "no_eligible_hardware"
    session.refresh(too_big)
    assert too_big.state is JobState.UNSCHEDULABLE
    # only one of the two 16-GPU jobs fits the 16 DE H100s before the deadline
    left = [j for j in (late, crowded) if j.id in reasons]
    assert len(left) == 1 and reasons[left[0].id] == "capacity"
    session.refresh(left[0])
    assert left[0].state is JobState.PENDING and "capacity" in left[0].state_reason


def test_missing_prices_leave_the_job_pending_with_the_reason(session, settings, small_fleet, now):
    job = add_job(session, now, allowed_regions=["de"])  # no market data at all
    record = plan_fleet(session, settings, now=now, horizon_hours=24, objective="cost", trigger="manual")
    session.commit()
    assert record.n_unplanned == 1
    session.refresh(job)
    assert job.state is JobState.PENDING and "invalid_prices" in job.state_reason


def test_power_budget_override_moves_the_job(session, settings, market, now):
    region = session.scalar(select(Region).where(Region.code == "de"))
    session.add(
        PowerBudgetOverride(
            region_id=region.id,
            start_at=now + timedelta(hours=5),
            end_at=now + timedelta(hours=7),
            power_kw=1.0,
            reason="demand response",
        )
    )
    session.commit()
    add_job(session, now, allowed_regions=["de"], allowed_hardware=["h100"])
    record = plan_fleet(session, settings, now=now, horizon_hours=72, objective="cost", trigger="manual")
    session.commit()
    a = session.scalar(select(Assignment).where(Assignment.plan_id == record.plan_id))
    assert a.end_at <= now + timedelta(hours=5) or a.start_at >= now + timedelta(hours=7)


def test_preview_compares_with_run_now_and_stores_nothing(session, settings, market, now):
    fields = dict(
        name="p",
        workload_class=WorkloadClass.TRAINING,
        gpu_count=4,
        reference_gpu_hours=8.0,
        reference_hardware="h100",
        release_at=now,
        deadline_at=now + timedelta(hours=24),
        allowed_regions=["de"],
        allowed_hardware=["h100"],
        home_region="de",
        priority=0,
        interruptible=False,
        checkpoint_overhead_minutes=0,
        min_chunk_minutes=60,
        memory_gb_per_gpu=0.0,
    )
    result = preview_job(session, settings, JobValues.from_fields(normalise(fields, now)), now)
    assert result.planned.start_at == now + timedelta(hours=5)
    assert result.run_now.start_at == now
    assert result.planned.cost < result.run_now.cost
    assert session.scalar(select(func.count()).select_from(Plan)) == 0


def test_job_cancelled_while_the_solver_runs_stays_cancelled(app, session, settings, market, now, monkeypatch):
    """A cancel that commits during the solve is not overwritten by the plan (a lost update would dispatch it)."""
    from app.services import planning

    keep = add_job(session, now, name="keep", allowed_regions=["de"], allowed_hardware=["h100"])
    gone = add_job(session, now, name="gone", allowed_regions=["de"], allowed_hardware=["h100"])
    too_big = add_job(session, now, name="too-big", gpu_count=64, allowed_regions=["de"], allowed_hardware=["h100"])
    real = planning.get_solver

    def solver_that_sees_a_cancel(name):  # type: ignore[no-untyped-def]
        solve = real(name)

        def run(problem, params):  # type: ignore[no-untyped-def]
            with app.extensions["gridshift"].sessions() as other:  # the user's request, in its own transaction
                other.get(Job, gone.id).state = JobState.CANCELLED
                other.get(Job, too_big.id).state = JobState.CANCELLED  # it would have been left out
                other.commit()
            return solve(problem, params)

        return run

    monkeypatch.setattr(planning, "get_solver", solver_that_sees_a_cancel)
    record = plan_fleet(session, settings, now=now, horizon_hours=72, objective="cost", trigger="manual")
    session.commit()
    session.expire_all()
    assert session.get(Job, gone.id).state is JobState.CANCELLED
    assert session.get(Job, keep.id).state is JobState.PLANNED
    planned = set(session.scalars(select(Assignment.job_id).where(Assignment.plan_id == record.plan_id)))
    assert planned == {keep.id} and record.n_assigned == 1
    assert session.get(Job, too_big.id).state is JobState.CANCELLED
    assert session.scalar(select(func.count()).select_from(UnplannedJob)) == 0 and record.n_unplanned == 0


def _start_running(session, job: Job, plan_id: int) -> Assignment:
    """Mark ``job`` as running the assignment ``plan_id`` gave it, as dispatch and the status sync would."""
    asg = session.scalar(select(Assignment).where(Assignment.plan_id == plan_id, Assignment.job_id == job.id))
    job.state = JobState.RUNNING
    session.add(Run(job_id=job.id, assignment_id=asg.id, attempt=1, run_key=f"gs-{job.id}-1-h100-abcdef",
                    state=RunState.RUNNING))
    session.commit()
    return asg


def test_running_job_keeps_its_gpus_through_later_replans(session, settings, market, now):
    """A running job's GPUs stay taken in every later plan, not only the first one after its dispatch.

    All 16 DE H100s go to ``first`` in the cheap hours 5-7; after two re-plans a second job wanting the same
    GPUs must still be placed around it.
    """
    first = add_job(session, now, name="first", gpu_count=16, reference_gpu_hours=32.0, allowed_regions=["de"],
                    allowed_hardware=["h100"])
    r1 = plan_fleet(session, settings, now=now, horizon_hours=72, objective="cost", trigger="manual")
    session.commit()
    held = _start_running(session, first, r1.plan_id)
    plan_fleet(session, settings, now=now, horizon_hours=72, objective="cost", trigger="hourly")  # holds no row for it
    session.commit()
    second = add_job(session, now, name="second", gpu_count=16, reference_gpu_hours=32.0, allowed_regions=["de"],
                     allowed_hardware=["h100"])
    r3 = plan_fleet(session, settings, now=now, horizon_hours=72, objective="cost", trigger="manual")
    session.commit()
    placed = session.scalar(select(Assignment).where(Assignment.plan_id == r3.plan_id, Assignment.job_id == second.id))
    assert (held.start_at, held.end_at) == (now + timedelta(hours=5), now + timedelta(hours=7))
    assert placed.end_at <= held.start_at or placed.start_at >= held.end_at


def test_run_past_its_planned_end_still_holds_the_current_slot(session, settings, market, now):
    """A run still going after its planned end keeps its GPUs for the slot it is in (it still draws power)."""
    first = add_job(session, now, name="late", gpu_count=16, reference_gpu_hours=32.0, allowed_regions=["de"],
                    allowed_hardware=["h100"])
    r1 = plan_fleet(session, settings, now=now, horizon_hours=72, objective="cost", trigger="manual")
    session.commit()
    _start_running(session, first, r1.plan_id)
    later = now + timedelta(hours=8)  # the run was planned to end at now + 7 h
    second = add_job(session, later, name="next", gpu_count=16, reference_gpu_hours=16.0,
                     deadline_at=later + timedelta(hours=1), allowed_regions=["de"], allowed_hardware=["h100"])
    r2 = plan_fleet(session, settings, now=later, horizon_hours=48, objective="cost", trigger="manual")
    session.commit()
    placed = session.scalar(select(Assignment).where(Assignment.plan_id == r2.plan_id, Assignment.job_id == second.id))
    left_out = session.scalar(select(UnplannedJob).where(UnplannedJob.plan_id == r2.plan_id,
                                                         UnplannedJob.job_id == second.id))
    assert placed is None and left_out is not None  # its only hour is still taken


def test_the_nightly_plan_gets_its_own_time_limit_and_every_other_run_the_plan_limit():
    from app.config import Settings
    from app.services.planning import _params

    cfg = Settings.from_env({"GRIDSHIFT_PLAN_TIME_LIMIT_S": "7", "GRIDSHIFT_NIGHTLY_PLAN_TIME_LIMIT_S": "45"})
    assert _params(cfg, "nightly").time_limit_s == 45.0
    for trigger in ("hourly", "manual", "new-work", "dispatch-failure", ""):
        assert _params(cfg, trigger).time_limit_s == 7.0


def test_a_region_priced_in_another_currency_needs_its_rate_and_is_converted_with_it(session, settings, market, now):
    from dataclasses import replace

    from app.errors import ValidationFailed

    session.scalar(select(Region).where(Region.code == "fi")).currency = "CHF"
    add_job(session, now, gpu_count=4, reference_gpu_hours=8.0, allowed_regions=["fi"], allowed_hardware=["a100"])
    session.commit()
    with pytest.raises(ValidationFailed) as err:
        plan_fleet(session, settings, now=now, horizon_hours=72, objective="cost", trigger="manual")
    assert err.value.errors[0].field == "regions.fi.currency" and "GRIDSHIFT_FX_RATES" in err.value.errors[0].message
    session.rollback()
    with_rate = replace(settings, fx_rates={"CHF": 2.0})
    record = plan_fleet(session, with_rate, now=now, horizon_hours=72, objective="cost", trigger="manual")
    session.commit()
    a = session.scalar(select(Assignment).where(Assignment.plan_id == record.plan_id))
    assert a.currency == "EUR"
    assert math.isclose(a.cost, a.energy_kwh * 60 * 2.0 / 1000, rel_tol=1e-6)  # 60 CHF/MWh at 2 EUR per CHF


def test_published_day_ahead_prices_beat_the_forecast_issued_before_the_auction(session, settings, market, now):
    from app.enums import ForecastRunStatus
    from app.models import ForecastPoint, ForecastRun

    # yesterday's refresh forecast DE flat at 100 EUR/MWh over the two days ahead; the auction has since published
    # the prices of those hours (the market fixture: cheap at now + 5 h), and today's refresh starts after them
    stale = ForecastRun(zone="DE", kind=SeriesKind.PRICE, model="lear", issued_at=now - timedelta(hours=11),
                        status=ForecastRunStatus.SUCCEEDED)
    fresh = ForecastRun(zone="DE", kind=SeriesKind.PRICE, model="lear", issued_at=now - timedelta(minutes=30),
                        status=ForecastRunStatus.SUCCEEDED)
    session.add_all([stale, fresh])
    session.flush()
    session.add_all([ForecastPoint(run_id=stale.id, ts=now + timedelta(hours=k), value=100.0) for k in range(48)])
    session.add_all([ForecastPoint(run_id=fresh.id, ts=now + timedelta(hours=k), value=100.0) for k in range(72, 96)])
    session.commit()
    add_job(session, now, gpu_count=4, reference_gpu_hours=8.0, allowed_regions=["de"], allowed_hardware=["h100"])
    record = plan_fleet(session, settings, now=now, horizon_hours=72, objective="cost", trigger="manual")
    session.commit()
    a = session.scalar(select(Assignment).where(Assignment.plan_id == record.plan_id))
    assert a.start_at == now + timedelta(hours=5) and a.end_at == now + timedelta(hours=7)
    energy = 4 * (90 + 0.85 * 610) / 1000 * 2 * 1.2
    assert math.isclose(a.cost, energy * 10 / 1000, rel_tol=1e-6)  # the published 10 EUR/MWh, not the forecast's 100


@pytest.mark.parametrize(("slot_minutes", "from_minute"), [(60, 6 * 60), (15, 5 * 60 + 45)])
def test_a_budget_raised_from_the_middle_of_a_slot_holds_only_from_the_next_slot(
    session, settings, market, now, slot_minutes, from_minute
):
    from dataclasses import replace

    from app.services import fleet

    # DE's own budget (1 kW) is below the job's draw; a window from 05:40 raises it, so the cheap hour 5 is out (on
    # hourly slots), or its quarter-hours before 05:45 (on the 15-minute grid, where the override counts from 05:45)
    fleet.upsert_region(session, "de", {"power_budget_kw": 1.0})
    fleet.add_override(session, "de", now + timedelta(hours=5, minutes=40), now + timedelta(hours=9), 500.0)
    session.commit()
    add_job(session, now, allowed_regions=["de"], allowed_hardware=["h100"])
    record = plan_fleet(session, replace(settings, slot_minutes=slot_minutes), now=now, horizon_hours=72,
                        objective="cost", trigger="manual")
    session.commit()
    a = session.scalar(select(Assignment).where(Assignment.plan_id == record.plan_id))
    assert a.start_at == now + timedelta(minutes=from_minute) and a.end_at <= now + timedelta(hours=9)


def test_a_preview_with_a_far_deadline_plans_two_weeks_ahead_and_says_so(session, settings, market, now):
    from app.services.planning import PREVIEW_MAX_HOURS

    fields = dict(name="far", workload_class=WorkloadClass.TRAINING, gpu_count=1, reference_gpu_hours=2.0,
                  reference_hardware="h100", release_at=now, deadline_at=now.replace(year=2900), allowed_regions=["de"],
                  allowed_hardware=["h100"], home_region="de", priority=0, interruptible=False,
                  checkpoint_overhead_minutes=0, min_chunk_minutes=60, memory_gb_per_gpu=0.0)
    result = preview_job(session, settings, JobValues.from_fields(normalise(fields, now)), now)
    assert result.planned is not None and result.planned.end_at <= now + timedelta(hours=PREVIEW_MAX_HOURS)
    assert "previewed over the next 14 days only" in result.note
