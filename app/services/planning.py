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
from collections.abc import Callable, Iterable, Mapping, Sequence
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
    slots_of,
)
from app.services.audit import last_entry
from app.services.fleet import FleetSnapshot, lowest_budget_kw, snapshot
from app.services.freshness import data_seen
from app.services.job_states import set_state
from app.services.job_values import JobValues, minutes_to_slots
from app.services.series import slot_values
from app.services.tenancy import held_unplanned, planning_tenants, with_tenants
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
from optimizer.bundle import Bundles, bundle_short_jobs, unbundle
from optimizer.grid import RunFigures, TimeGrid, interval_figures, run_intervals

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


def to_opt_job(job: JobValues, job_id: str, fleet: FleetSnapshot, grid: TimeGrid) -> OptJob:
    """Optimizer job from a job's values on ``grid``: it may start in the slot holding its earliest start (now or its
    release), occupies the slots its run needs counted from there, and ends by the boundary before its deadline."""
    sm = grid.slot_minutes
    durations = {hw: grid.slots_needed(m, job.release_at) for hw, m in job.minutes_on(fleet).items()}
    power = {hw: fleet.power_w(hw, job.workload_class.value) / 1000.0 for hw in durations}
    regions = list(job.allowed_regions or fleet.regions)
    if job.residency_tag:
        regions = [r for r in regions if job.residency_tag in fleet.regions[r].residency_tags]
    ref = job.reference_hardware
    return OptJob(
        job_id=job_id, gpus=job.gpu_count, duration_slots=durations,
        release_slot=max(0, grid.release_slot(job.release_at)), deadline_slot=grid.deadline_slot(job.deadline_at),
        power_kw_per_gpu=power, memory_gb_per_gpu=float(job.memory_gb_per_gpu),
        allowed_regions=tuple(regions), allowed_hardware=tuple(job.allowed_hardware) if job.allowed_hardware else None,
        home_region=job.home_region, preferred_hardware=ref if ref in durations else None,
        priority=max(0, job.priority) + 1, interruptible=job.interruptible,
        min_chunk_slots=max(1, minutes_to_slots(job.min_chunk_minutes, sm)),
        checkpoint_overhead_slots=minutes_to_slots(job.checkpoint_overhead_minutes, sm),
    )


@dataclass(frozen=True, slots=True)
class RegionSlots:
    """One region's inputs on a planning grid, slot by slot: its curves, its power budget and the capacity that work
    already placed holds (the part of :func:`build_problem` that reads the database, as plain data)."""

    code: str
    currency: str
    price_per_mwh: Sequence[float]  # [region currency/MWh], NaN where unknown
    carbon_g_per_kwh: Sequence[float]  # [gCO2eq/kWh], NaN where unknown
    power_budget_kw: Sequence[float]  # [kW]
    held_gpus: Mapping[str, Sequence[int]]  # hardware code -> GPUs held per slot
    held_kw: Sequence[float] | None  # facility power held per slot [kW]


def budget_slots(base_kw: float, overrides: Iterable[tuple[datetime, datetime, float]], grid: TimeGrid) -> list[float]:
    """A region's power budget per slot of ``grid`` [kW]: a slot's budget is the lowest in force at any moment of it
    (``overrides``: (start, end, kW) windows over ``base_kw``)."""
    sm, n, start = grid.slot_minutes, grid.n_slots, grid.start
    slots = grid.slot_starts()
    budget = [base_kw] * n
    touching: dict[int, list[tuple[datetime, datetime, float]]] = {}
    for first, last, kw in overrides:
        for k in slots_of(first, last, start=start, slot_minutes=sm, n_slots=n):
            touching.setdefault(k, []).append((first, last, kw))
    for k, windows in touching.items():
        budget[k] = lowest_budget_kw(base_kw, windows, slots[k], slots[k] + timedelta(minutes=sm))
    return budget


def assemble_problem(settings: Settings, grid: TimeGrid, fleet: FleetSnapshot, regions: Sequence[RegionSlots],
                     jobs: Sequence[tuple[str, JobValues]], objective: str) -> OptProblem:
    """The Problem for ``jobs`` on ``grid`` from plain data: the fleet (inventory, PUE, hardware, profiles) and each
    region's slot inputs; :func:`build_problem` reads those from the database, a replay from stored history."""
    fx = settings.exchange_rates
    hardware = tuple(OptHardware(c, h.memory_gb, h.tdp_w / 1000.0, fleet.throughput(c, "default"))
                     for c, h in fleet.hardware.items())
    out = []
    for reg in regions:
        info = fleet.regions[reg.code]
        per_slot = {hw: tuple(max(0, cnt - reg.held_gpus[hw][k]) for k in range(grid.n_slots))
                    for hw, cnt in info.inventory.items() if hw in reg.held_gpus}
        if reg.currency != settings.reporting_currency and reg.currency not in fx:
            raise ValidationFailed("missing exchange rate", [FieldError(
                f"regions.{reg.code}.currency",
                f"{reg.currency} prices need a rate in GRIDSHIFT_FX_RATES ({reg.currency}=<{settings.reporting_currency} per "
                f"{reg.currency}>)")])
        out.append(OptRegion(
            reg.code, tuple(reg.price_per_mwh), tuple(reg.carbon_g_per_kwh), tuple(reg.power_budget_kw),
            dict(info.inventory), pue=info.pue, base_load_kw=tuple(reg.held_kw) if reg.held_kw is not None else None,
            inventory_per_slot=per_slot, currency=reg.currency,
        ))
    opt_jobs = tuple(to_opt_job(values, jid, fleet, grid) for jid, values in jobs)
    return OptProblem(grid.start, grid.slot_minutes, grid.n_slots, tuple(out), hardware, opt_jobs,
                      objective=objective_of(settings, objective), currency=settings.reporting_currency, fx_rates=fx)


def build_problem(session: Session, settings: Settings, *, now: datetime, horizon_hours: int, objective: str,
                  jobs: Sequence[tuple[str, JobValues]]) -> tuple[OptProblem, FleetSnapshot]:
    """The Problem for ``jobs`` (``(job_id, values)``) over the fleet, with held capacity taken off, on the grid seen
    at ``now`` (:func:`grid_at`)."""
    grid = grid_at(settings, now, horizon_hours)
    sm, n, start = grid.slot_minutes, grid.n_slots, grid.start
    slots = grid.slot_starts()
    fleet = snapshot(session)
    held_gpu, held_kw = per_slot_use(held_intervals(session, start + timedelta(minutes=sm)), start=start,
                                     slot_minutes=sm, n_slots=n)
    regions = []
    for reg in session.scalars(select(Region).options(selectinload(Region.overrides)).order_by(Region.code)):
        regions.append(RegionSlots(
            reg.code, reg.currency, slot_values(session, reg.zone, SeriesKind.PRICE, slots),
            slot_values(session, reg.zone, SeriesKind.CARBON_INTENSITY, slots),
            budget_slots(reg.power_budget_kw, [(o.start_at, o.end_at, o.power_kw) for o in reg.overrides], grid),
            {hw: use for (rc, hw), use in held_gpu.items() if rc == reg.code}, held_kw.get(reg.code),
        ))
    return assemble_problem(settings, grid, fleet, regions, jobs, objective), fleet


def grid_at(settings: Settings, now: datetime, horizon_hours: int) -> TimeGrid:
    """The planning grid seen at ``now``: slot 0 holds ``now``, ``settings.slot_minutes`` long slots over the horizon
    (one definition for the planner, the preview and the submission check)."""
    return TimeGrid.at(now, settings.slot_minutes, horizon_hours * 60)


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
    seen = data_seen(session)  # before the data is read: what arrives after it makes the hourly re-plan run (freshness)
    open_jobs = list(session.scalars(select(Job).where(Job.state.in_(OPEN_STATES)).order_by(Job.id)))
    # fair share, quotas and budgets per tenant (app.services.tenancy); jobs over the queue quota wait
    tenants = planning_tenants(session, open_jobs, now=now, horizon_end=now + timedelta(hours=horizon_hours))
    values = {str(j.id): JobValues.from_row(j) for j in open_jobs if j.id not in tenants.held}
    problem, fleet = build_problem(session, settings, now=now, horizon_hours=horizon_hours, objective=objective,
                                   jobs=list(values.items()))
    problem = with_tenants(problem, tenants)
    grid = grid_at(settings, now, horizon_hours)
    minutes = {jid: v.minutes_on(fleet) for jid, v in values.items()}
    # jobs shorter than a slot that can run one after another share it (optimizer.bundle)
    packed, bundles = bundle_short_jobs(problem, minutes, {jid: grid.release_offset_minutes(v.release_at)
                                                           for jid, v in values.items()})
    phase("solve")
    plan = get_solver("gridshift")(packed, _params(settings, trigger))
    report = check_plan(packed, plan)
    run_now = SOLVERS["run_now"](packed, _params(settings))
    phase("store")
    real = real_runs(problem, grid, plan, values, fleet, bundles)
    real_now = real_runs(problem, grid, run_now, values, fleet, bundles)
    plan = unbundle(plan, bundles)
    end = problem.slot_start(problem.n_slots)
    status = STATUS.get(str(plan.status), PlanStatus.FAILED)
    stats = {"solve": {"wall_s": plan.stats.wall_s, "phases": dict(plan.stats.phases), "notes": list(plan.stats.notes),
                       "classes": plan.stats.num_classes, "options": plan.stats.num_options},
             **_totals(real.values()), "run_now": _totals(real_now.values())}
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
            intervals, figures = real[a.job_id]
            counter = real_now[a.job_id][1] if a.job_id in real_now else None
            chunks = [[s.isoformat(), e.isoformat()] for s, e in intervals] if len(intervals) > 1 else None
            session.add(Assignment(
                plan_id=record.id, job_id=int(a.job_id), region_id=region_ids[a.region], hardware_type_id=hw_ids[a.hardware],
                start_at=intervals[0][0], end_at=intervals[-1][1], chunks=chunks,
                energy_kwh=figures.energy_kwh, cost=figures.cost, currency=problem.currency, carbon_kg=figures.carbon_kg,
                run_now_energy_kwh=counter.energy_kwh if counter else None, run_now_cost=counter.cost if counter else None,
                run_now_carbon_kg=counter.carbon_kg if counter else None,
            ))
            job = by_id[a.job_id]
            if job.state is not JobState.PLANNED:
                set_state(session, job, JobState.PLANNED, f"plan {record.id}", at=now)
            job.state_reason = None
            n_assigned += 1
        unplanned = (*plan.unplanned, *held_unplanned(tenants))
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
                    "audit_seen": audit_seen, "data_seen": seen}
    session.flush()
    return PlanRecord(record.id, status, plan.objective, plan.best_bound, plan.gap_pct, n_assigned, n_unplanned,
                      trigger)


def real_runs(problem: OptProblem, grid: TimeGrid, plan: OptPlan, values: dict[str, JobValues],
              fleet: FleetSnapshot, bundles: Bundles | None = None,
              ) -> dict[str, tuple[list[tuple[datetime, datetime]], RunFigures]]:
    """Each placed job's real running intervals and what it uses over them (its length, not whole slots); the members
    of a bundle run one after another from the latest earliest start among them."""
    jobs = {j.job_id: j for j in problem.jobs}
    out = {}
    for a in plan.assignments:
        members = bundles.of(a.job_id) if bundles is not None else (a.job_id,)
        release = max(values[m].release_at for m in members)
        after = 0.0
        for m in members:
            job, v = jobs[m], values[m]
            minutes = v.minutes_on(fleet)[a.hardware]
            intervals = run_intervals(grid, [(c.start_slot, c.end_slot) for c in a.chunks], release, minutes,
                                      v.checkpoint_overhead_minutes, after)
            after += minutes
            region = problem.region(a.region)
            kw = job.gpus * problem.job_power_kw_per_gpu(job, a.hardware) * region.pue
            out[m] = intervals, interval_figures(grid, kw, intervals, region.price_per_mwh, region.carbon_g_per_kwh,
                                                 problem.fx(region.currency))
    return out


def _totals(runs) -> dict[str, float]:
    figures = [f for _, f in runs]
    return {"cost": sum(f.cost for f in figures), "carbon_kg": sum(f.carbon_kg for f in figures),
            "energy_kwh": sum(f.energy_kwh for f in figures)}


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


def _figures(problem: OptProblem, grid: TimeGrid, plan: OptPlan, job: JobValues, fleet: FleetSnapshot
             ) -> Figures | None:
    a = plan.assignment_of("preview")
    if a is None:
        return None
    intervals, f = real_runs(problem, grid, plan, {"preview": job}, fleet)["preview"]
    return Figures(a.region, a.hardware, intervals[0][0], intervals[-1][1], f.energy_kwh, f.cost, f.carbon_kg)


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
    problem, fleet = build_problem(session, settings, now=now, horizon_hours=horizon, objective=settings.objective,
                                   jobs=[("preview", job)])
    grid = grid_at(settings, now, horizon)
    problem = _reserve_planned(session, problem)
    plan = get_solver("gridshift")(problem, SolveParams(time_limit_s=min(2.0, settings.plan_time_limit_s)))
    run_now = SOLVERS["run_now"](problem, None)
    planned, counter = _figures(problem, grid, plan, job, fleet), _figures(problem, grid, run_now, job, fleet)
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
