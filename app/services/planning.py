"""Planning: build an optimizer Problem from the database, solve it, store the Plan; preview one job.

The Problem covers ``horizon_hours`` from ``now`` (floored to the slot) in slots of ``settings.slot_minutes``:

* regions with their PUE, power budget per slot (the lowest in force at any moment of the slot: an override
  sets it over its own window, the lowest wins where they overlap), GPU inventory;
* capacity already held by work that has been dispatched (states dispatching/submitted/running, and paused
  between the chunks of an interruptible job) is taken off the inventory and the power budget, slot by slot,
  from the assignment its run executes (whichever plan that came from: later plans hold none for it);
* prices and carbon intensity per region zone: the realised (published) market series where present, else
  the latest succeeded forecast run's points; a slot with neither is NaN (jobs that cannot avoid it are left out with
  the reason ``invalid_prices``);
* jobs in state pending or planned, durations from the fleet's throughput profiles, power per GPU from the
  profiles or the power model.

Jobs left out for a reason that cannot change before their deadline (deadline passed, no eligible hardware,
power budget below their draw, window too short while the deadline lies inside the horizon) become
``unschedulable``; the others (capacity, missing prices, not yet in the horizon) stay ``pending`` with
the reason in ``state_reason``, so the next plan retries them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session, selectinload

from app.config import Settings
from app.enums import JobState, PlanStatus, SeriesKind
from app.errors import FieldError, ValidationFailed
from app.models import (
    Assignment,
    HardwareType,
    Job,
    Plan,
    Region,
    UnplannedJob,
)
from app.services.assignments import (
    held_intervals,
    per_slot_use,
    planned_intervals,
    slot_index,
    slots_of,
)
from app.services.audit import last_entry
from app.services.fleet import FleetSnapshot, lowest_budget_kw, snapshot
from app.services.job_states import set_state
from app.services.job_values import JobValues, minutes_to_slots
from app.services.series import hourly_series
from optimizer import (
    SOLVERS,
    Objective,
    ObjectiveKind,
    SolveParams,
    UnplannedReason,
    check_plan,
    get_solver,
)
from optimizer import HardwareType as OptHardware
from optimizer import Job as OptJob
from optimizer import Plan as OptPlan
from optimizer import Problem as OptProblem
from optimizer import Region as OptRegion

OPEN_STATES = (JobState.PENDING, JobState.PLANNED)
FINAL_REASONS = {
    UnplannedReason.INVALID_JOB, UnplannedReason.DEADLINE_BEFORE_RELEASE, UnplannedReason.NO_ELIGIBLE_REGION,
    UnplannedReason.NO_ELIGIBLE_HARDWARE, UnplannedReason.POWER_BUDGET_TOO_LOW,
}
STATUS = {"optimal": PlanStatus.OPTIMAL, "feasible": PlanStatus.FEASIBLE, "empty": PlanStatus.EMPTY}
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PlanRecord:
    """What a stored plan holds, in brief."""

    plan_id: int
    status: PlanStatus
    objective_value: float | None
    best_bound: float | None
    gap_pct: float | None
    n_assigned: int
    n_unplanned: int
    trigger: str = ""


@dataclass(frozen=True, slots=True)
class Figures:
    """One placement of a job and what it uses [kWh], costs [currency] and emits [kgCO2eq]."""

    region: str
    hardware: str
    start_at: datetime
    end_at: datetime
    energy_kwh: float
    cost: float
    carbon_kg: float


@dataclass(frozen=True, slots=True)
class Preview:
    """A proposed job planned into the current fleet, against running it now."""

    planned: Figures | None
    run_now: Figures | None
    reason: str | None
    currency: str
    note: str = ""


def objective_of(settings: Settings, objective: str) -> Objective:
    """Optimizer objective from its name (cost, carbon, weighted)."""
    try:
        kind = ObjectiveKind(objective)
    except ValueError:
        valid = ", ".join(k.value for k in ObjectiveKind if k is not ObjectiveKind.CARBON_WITH_COST_CAP)
        raise ValidationFailed("unknown objective", [FieldError("objective", f"valid: {valid}")]) from None
    if kind is ObjectiveKind.CARBON_WITH_COST_CAP:
        cap = settings.extra.get("cost_cap")
        return Objective(kind, cost_cap=float(cap) if cap is not None else None)
    return Objective(kind, carbon_price_per_tonne=settings.carbon_price_per_tonne)


def _series(session: Session, zone: str, kind: SeriesKind, slots: list[datetime], end: datetime) -> list[float]:
    """Value per slot start: the value of the slot's hour by :func:`app.services.series.hourly_series` (published, else
    forecast-run point, else an imported forecast), else NaN."""
    hourly = {p.ts: p.value for p in hourly_series(session, zone, kind, slots[0] - timedelta(hours=1), end,
                                                   forecasts=True)}
    out = []
    for t in slots:
        v = hourly.get(t.replace(minute=0, second=0, microsecond=0))
        out.append(float(v) if v is not None else math.nan)
    return out


def to_opt_job(job: JobValues, job_id: str, fleet: FleetSnapshot, start: datetime, slot_minutes: int) -> OptJob:
    """Optimizer job from a job's values, its times as slots from ``start``."""
    durations = {hw: max(1, minutes_to_slots(m, slot_minutes)) for hw, m in job.minutes_on(fleet).items()}
    power = {hw: fleet.power_w(hw, job.workload_class.value) / 1000.0 for hw in durations}
    regions = list(job.allowed_regions or fleet.regions)
    if job.residency_tag:
        regions = [r for r in regions if job.residency_tag in fleet.regions[r].residency_tags]
    ref = job.reference_hardware
    return OptJob(
        job_id=job_id, gpus=job.gpu_count, duration_slots=durations,
        release_slot=max(0, slot_index(start, slot_minutes, job.release_at, up=True)),
        deadline_slot=slot_index(start, slot_minutes, job.deadline_at, up=False),
        power_kw_per_gpu=power, memory_gb_per_gpu=float(job.memory_gb_per_gpu),
        allowed_regions=tuple(regions), allowed_hardware=tuple(job.allowed_hardware) if job.allowed_hardware else None,
        home_region=job.home_region, preferred_hardware=ref if ref in durations else None,
        priority=max(0, job.priority) + 1, interruptible=job.interruptible,
        min_chunk_slots=max(1, minutes_to_slots(job.min_chunk_minutes, slot_minutes)),
        checkpoint_overhead_slots=minutes_to_slots(job.checkpoint_overhead_minutes, slot_minutes),
    )


def build_problem(session: Session, settings: Settings, *, now: datetime, horizon_hours: int, objective: str,
                  jobs: Sequence[tuple[str, JobValues]]) -> tuple[OptProblem, FleetSnapshot]:
    """The Problem for ``jobs`` (``(job_id, values)``) over the fleet, with held capacity taken off."""
    sm = settings.slot_minutes
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=now.minute % sm if sm <= 60 else 0)
    n = max(1, math.ceil(horizon_hours * 60 / sm))
    end = start + timedelta(minutes=sm * n)
    slots = [start + timedelta(minutes=sm * k) for k in range(n)]
    fleet = snapshot(session)
    hw_rows = {h.code: h for h in session.scalars(select(HardwareType))}
    hardware = tuple(OptHardware(c, h.memory_gb, h.tdp_w / 1000.0, fleet.throughput(c, "default")) for c, h in hw_rows.items())
    held_gpu, held_kw = per_slot_use(held_intervals(session, start + timedelta(minutes=sm)), start=start,
                                     slot_minutes=sm, n_slots=n)
    regions = []
    fx = settings.exchange_rates
    for reg in session.scalars(select(Region).options(selectinload(Region.overrides)).order_by(Region.code)):
        budget = [reg.power_budget_kw] * n
        touching: dict[int, list[tuple[datetime, datetime, float]]] = {}
        for o in reg.overrides:  # a slot's budget is the lowest in force at any moment of it
            for k in slots_of(o.start_at, o.end_at, start=start, slot_minutes=sm, n_slots=n):
                touching.setdefault(k, []).append((o.start_at, o.end_at, o.power_kw))
        for k, windows in touching.items():
            budget[k] = lowest_budget_kw(reg.power_budget_kw, windows, slots[k], slots[k] + timedelta(minutes=sm))
        info = fleet.regions[reg.code]
        per_slot = {hw: tuple(max(0, cnt - held_gpu[(reg.code, hw)][k]) for k in range(n))
                    for hw, cnt in info.inventory.items() if (reg.code, hw) in held_gpu}
        if reg.currency != settings.reporting_currency and reg.currency not in fx:
            raise ValidationFailed("missing exchange rate", [FieldError(
                f"regions.{reg.code}.currency",
                f"{reg.currency} prices need a rate in GRIDSHIFT_FX_RATES ({reg.currency}=<{settings.reporting_currency} per "
                f"{reg.currency}>)")])
        regions.append(OptRegion(
            reg.code, tuple(_series(session, reg.zone, SeriesKind.PRICE, slots, end)),
            tuple(_series(session, reg.zone, SeriesKind.CARBON_INTENSITY, slots, end)), tuple(budget),
            dict(info.inventory), pue=reg.pue, base_load_kw=tuple(held_kw[reg.code]) if reg.code in held_kw else None,
            inventory_per_slot=per_slot, currency=reg.currency,
        ))
    opt_jobs = tuple(to_opt_job(values, jid, fleet, start, sm) for jid, values in jobs)
    problem = OptProblem(start, sm, n, tuple(regions), hardware, opt_jobs, objective=objective_of(settings, objective),
                         currency=settings.reporting_currency, fx_rates=fx)
    return problem, fleet


def _params(settings: Settings, trigger: str = "") -> SolveParams:
    """Solver parameters: the nightly plan gets ``nightly_plan_time_limit_s``, every other run ``plan_time_limit_s``."""
    limit = settings.nightly_plan_time_limit_s if trigger == "nightly" else settings.plan_time_limit_s
    return SolveParams(time_limit_s=limit, num_workers=2, random_seed=0)


def plan_fleet(session: Session, settings: Settings, *, now: datetime, horizon_hours: int, objective: str,
               trigger: str, on_phase: Callable[[str], None] | None = None) -> PlanRecord:
    """Plan every open job, store the plan as the current one and update job states; no commit.

    A plan that failed (no plan in time, a model the solver refused, or a plan that breaks a constraint) is stored
    for the record but does not become current: dispatch goes on from the last good plan and job states stay.

    Parameters
    ----------
    session : Session
        Database session (the caller commits).
    settings : Settings
        Slot length [min], time limit [s], carbon price [currency/t], reporting currency.
    now : datetime
        Aware UTC time the plan starts from.
    horizon_hours : int
        Planning horizon [h].
    objective : str
        ``cost``, ``carbon`` or ``weighted``.
    trigger : str
        Why the plan runs (nightly, hourly, manual, failure...).
    on_phase : callable, optional
        Told ``"problem"``, ``"solve"`` and ``"store"`` as the plan reaches each step (progress of a plan run).
    """
    phase = on_phase or (lambda _name: None)
    phase("problem")
    audit_seen = last_entry(session)  # before the fleet is read: a fleet change after it re-plans (replan.fleet_changed)
    open_jobs = list(session.scalars(select(Job).where(Job.state.in_(OPEN_STATES)).order_by(Job.id)))
    problem, _ = build_problem(session, settings, now=now, horizon_hours=horizon_hours, objective=objective,
                               jobs=[(str(j.id), JobValues.from_row(j)) for j in open_jobs])
    phase("solve")
    plan = get_solver("gridshift")(problem, _params(settings, trigger))
    report = check_plan(problem, plan)
    run_now = SOLVERS["run_now"](problem, _params(settings))
    phase("store")
    end = problem.slot_start(problem.n_slots)
    status = STATUS.get(str(plan.status), PlanStatus.FAILED)
    stats = {"solve": {"wall_s": plan.stats.wall_s, "phases": dict(plan.stats.phases), "notes": list(plan.stats.notes),
                       "classes": plan.stats.num_classes, "options": plan.stats.num_options},
             "cost": plan.cost, "carbon_kg": plan.carbon_kg, "energy_kwh": plan.energy_kwh,
             "run_now": {"cost": run_now.cost, "carbon_kg": run_now.carbon_kg, "energy_kwh": run_now.energy_kwh}}
    if not report.ok:  # never store a plan that breaks a constraint
        status, stats["violations"] = PlanStatus.FAILED, list(report.violations[:20])
    still_open = _lock_still_open(session, [j.id for j in open_jobs])
    failed = status is PlanStatus.FAILED
    if failed:
        # kept for the record, never current: dispatch goes on from the last good plan, and the minute check retries
        why = list(report.violations[:20]) or list(plan.stats.notes)
        log.warning("plan (%s) failed: status %s; %s", trigger, plan.status, "; ".join(why)[:2000])
    else:
        session.execute(update(Plan).where(Plan.is_current.is_(True)).values(is_current=False))
    record = Plan(horizon_start=problem.start, horizon_end=end, slot_minutes=problem.slot_minutes, objective=objective,
                  solver="gridshift", trigger=trigger, status=status, objective_value=plan.objective,
                  best_bound=plan.best_bound, gap_pct=plan.gap_pct, is_current=not failed, stats=stats, created_at=now)
    session.add(record)
    session.flush()
    region_ids = dict(session.execute(select(Region.code, Region.id)).all())
    hw_ids = dict(session.execute(select(HardwareType.code, HardwareType.id)).all())
    by_id = {str(j.id): j for j in open_jobs}
    n_assigned = 0
    if not failed:
        for a in plan.assignments:
            if int(a.job_id) not in still_open:
                continue  # cancelled (or otherwise settled) while the solver ran: leave it as it is now
            counter = run_now.assignment_of(a.job_id)
            chunks = [[problem.slot_start(c.start_slot).isoformat(), problem.slot_start(c.end_slot).isoformat()]
                      for c in a.chunks] if len(a.chunks) > 1 else None
            session.add(Assignment(
                plan_id=record.id, job_id=int(a.job_id), region_id=region_ids[a.region], hardware_type_id=hw_ids[a.hardware],
                start_at=problem.slot_start(a.start_slot), end_at=problem.slot_start(a.end_slot), chunks=chunks,
                energy_kwh=a.energy_kwh, cost=a.cost, currency=problem.currency, carbon_kg=a.carbon_kg,
                run_now_energy_kwh=counter.energy_kwh if counter else None, run_now_cost=counter.cost if counter else None,
                run_now_carbon_kg=counter.carbon_kg if counter else None,
            ))
            job = by_id[a.job_id]
            if job.state is not JobState.PLANNED:
                set_state(session, job, JobState.PLANNED, f"plan {record.id}", at=now)
            job.state_reason = None
            n_assigned += 1
        unplanned = plan.unplanned
    else:
        unplanned = ()
    horizon_end = end
    n_unplanned = 0
    for u in unplanned:
        if int(u.job_id) not in still_open:
            continue
        n_unplanned += 1
        session.add(UnplannedJob(plan_id=record.id, job_id=int(u.job_id), reason=str(u.reason), detail=u.detail))
        job = by_id[u.job_id]
        final = u.reason in FINAL_REASONS or job.deadline_at <= now or (
            u.reason is UnplannedReason.WINDOW_TOO_SHORT and job.deadline_at <= horizon_end)
        message = f"plan {record.id}: {u.reason}" + (f" ({u.detail})" if u.detail else "")
        if final:
            set_state(session, job, JobState.UNSCHEDULABLE, message, at=now)
        elif job.state is not JobState.PENDING:
            set_state(session, job, JobState.PENDING, message, at=now)
        job.state_reason = message
    # the plan's head keeps its job counts after the retention clean-up deletes its rows (plan_history.prune)
    record.stats = {**stats, "currency": problem.currency, "jobs": {"assigned": n_assigned, "unplanned": n_unplanned},
                    "audit_seen": audit_seen}
    session.flush()
    return PlanRecord(record.id, status, plan.objective, plan.best_bound, plan.gap_pct, n_assigned, n_unplanned,
                      trigger)


def _lock_still_open(session: Session, job_ids: list[int]) -> set[int]:
    """Re-read the planned jobs after the solve, locked on PostgreSQL, and return those still open.

    The solver runs for seconds; a job cancelled meanwhile must stay cancelled, not be overwritten by the plan's
    state change (a lost update that would dispatch it). The row locks make a cancel that arrives now wait until
    this plan is stored; the fresh states replace the ones read before the solve.
    """
    still: set[int] = set()
    for i in range(0, len(job_ids), 5000):
        chunk = job_ids[i : i + 5000]
        rows = session.scalars(
            select(Job).where(Job.id.in_(chunk)).with_for_update().execution_options(populate_existing=True)
        )
        still.update(j.id for j in rows if j.state in OPEN_STATES)
    return still


def _figures(problem: OptProblem, plan: OptPlan) -> Figures | None:
    a = plan.assignment_of("preview")
    if a is None:
        return None
    return Figures(a.region, a.hardware, problem.slot_start(a.start_slot), problem.slot_start(a.end_slot),
                   a.energy_kwh, a.cost, a.carbon_kg)


# the preview plans at most this far ahead [h]: beyond a few days there are no prices or forecasts to plan on, and a
# deadline centuries away made one preview plan over millions of slots (67 s of CPU in one request)
PREVIEW_MAX_HOURS = 14 * 24


def preview_job(session: Session, settings: Settings, job: JobValues, now: datetime) -> Preview:
    """Where and when a proposed job would run next to the current plan, against running it now; stores nothing.

    Capacity used by jobs in the current plan (planned or already running) is taken off first, so the
    preview fits around the existing work.
    """
    to_deadline = math.ceil((job.deadline_at - now).total_seconds() / 3600.0)
    horizon = min(PREVIEW_MAX_HOURS, max(settings.horizon_hours, to_deadline))
    problem, _ = build_problem(session, settings, now=now, horizon_hours=horizon, objective=settings.objective,
                               jobs=[("preview", job)])
    problem = _reserve_planned(session, problem)
    plan = get_solver("gridshift")(problem, SolveParams(time_limit_s=min(2.0, settings.plan_time_limit_s)))
    run_now = SOLVERS["run_now"](problem, None)
    planned, counter = _figures(problem, plan), _figures(problem, run_now)
    reason = None if planned is not None else str(plan.unplanned[0].reason) if plan.unplanned else "not planned"
    notes = []
    if counter is not None and counter.end_at > job.deadline_at:
        notes.append("running now would queue past the deadline")
    if to_deadline > horizon:
        notes.append(f"previewed over the next {horizon // 24} days only; the plan uses the whole window")
    note = "; ".join(notes)
    return Preview(planned, counter, reason, problem.currency, note)


def _reserve_planned(session: Session, problem: OptProblem) -> OptProblem:
    """Take the capacity of the current plan's planned jobs off the problem's regions."""
    planned = planned_intervals(session)
    if not planned:
        return problem
    n, sm = problem.n_slots, problem.slot_minutes
    gpu, kw = per_slot_use(planned, start=problem.start, slot_minutes=sm, n_slots=n)
    new = []
    for reg in problem.regions:
        per_slot = dict(reg.inventory_per_slot)
        for (rc, h), used in gpu.items():
            if rc == reg.name:
                per_slot[h] = tuple(max(0, reg.gpus_at(h, k) - used[k]) for k in range(n))
        base = tuple(reg.base_kw_at(k) + kw.get(reg.name, [0.0] * n)[k] for k in range(n))
        new.append(OptRegion(reg.name, reg.price_per_mwh, reg.carbon_g_per_kwh, reg.power_budget_kw, reg.inventory,
                             reg.pue, base, per_slot, reg.currency))
    return OptProblem(problem.start, sm, n, tuple(new), problem.hardware, problem.jobs, problem.objective,
                      problem.currency, problem.fx_rates, problem.cost_scale)
