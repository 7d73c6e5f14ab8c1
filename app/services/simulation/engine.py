"""The replay: plan each day of a past period as the service does, then settle the plans on the realised series.

Each day at 00:00 UTC the replay builds the planner's Problem through the service's own functions
(:func:`app.services.planning.assemble_problem`, ``to_opt_job``, ``grid_at``, ``objective_of``), over the service's
horizon, from the jobs known by then (those released before the day ends and not yet started) and with the capacity
that runs started earlier still hold taken off. It solves with the service's solver (short jobs bundled as the
service bundles them), and "dispatches" every job whose planned start falls in that day: its run is fixed from then
on. Jobs planned for later stay open and are planned again the next day, as the hourly re-plans do. The last day's
plan is carried out whole. Every run is then settled on the realised series: energy [kWh], cost [reporting currency]
and carbon [kgCO2eq] of its real intervals (``optimizer.grid.interval_figures``).

The replay reads only plain data (:class:`History`), so that a benchmark can call it without a database;
``app.services.simulation.history.read_history`` builds one from the stored history.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from app.config import Settings
from app.services.assignments import slots_of
from app.services.fleet import FleetSnapshot
from app.services.job_values import JobValues
from app.services.planning import (
    FINAL_REASONS,
    RegionSlots,
    assemble_problem,
    budget_slots,
    grid_at,
    real_runs,
)
from app.services.simulation.scenario import Scenario, apply, check
from optimizer import SolveParams, check_plan, get_solver
from optimizer.bundle import bundle_short_jobs, unbundle
from optimizer.grid import TimeGrid, interval_figures

Interval = tuple[datetime, datetime]
DAY = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class History:
    """What a replay reads, as plain data.

    ``price`` and ``carbon`` hold the realised series per zone, one value per slot of ``slot_minutes`` from ``start``
    [currency/MWh], [gCO2eq/kWh] (NaN where none is stored); they should reach the period's end plus the planning
    horizon. ``overrides`` are each region's power-budget windows (start, end, kW); ``currencies`` each region's
    price currency; ``jobs`` the jobs as stored, ``(job_id, values)``.
    """

    start: datetime
    slot_minutes: int
    fleet: FleetSnapshot
    currencies: Mapping[str, str]
    price: Mapping[str, Sequence[float]]
    carbon: Mapping[str, Sequence[float]]
    jobs: Sequence[tuple[str, JobValues]]
    overrides: Mapping[str, Sequence[tuple[datetime, datetime, float]]] = field(default_factory=dict)

    @property
    def n_slots(self) -> int:
        return min((len(v) for v in (*self.price.values(), *self.carbon.values())), default=0)

    def grid(self) -> TimeGrid:
        """The grid of the stored series."""
        return TimeGrid(self.start, self.slot_minutes, max(1, self.n_slots), self.start)


@dataclass(frozen=True, slots=True)
class SettledRun:
    """A run the replay started, and what it used, cost and emitted on the realised series."""

    job_id: str
    region: str
    hardware: str
    gpus: int
    power_kw: float  # facility power while running [kW]
    intervals: tuple[Interval, ...]
    energy_kwh: float
    cost: float  # [reporting currency]
    carbon_kg: float
    late: bool  # ends after the job's deadline
    day: int  # index of the day whose plan started it


@dataclass(frozen=True, slots=True)
class Outcome:
    """One replay's totals, per day and per run."""

    cost: float
    carbon_kg: float
    energy_kwh: float
    jobs: int  # jobs of the period
    jobs_run: int
    deadline_misses: int  # not run, or run late, with the deadline inside the replay's reach
    not_placed: int  # still open at the end, with the deadline beyond the last plan's horizon
    failed_plans: int  # days whose plan broke a constraint (nothing started that day)
    days: tuple[dict[str, Any], ...]
    runs: tuple[SettledRun, ...]

    def totals(self) -> dict[str, Any]:
        return {"cost": self.cost, "carbon_kg": self.carbon_kg, "energy_kwh": self.energy_kwh, "jobs": self.jobs,
                "jobs_run": self.jobs_run, "deadline_misses": self.deadline_misses, "not_placed": self.not_placed,
                "failed_plans": self.failed_plans}


def _held(runs: Sequence[SettledRun], grid: TimeGrid) -> tuple[dict[tuple[str, str], list[int]], dict[str, list[float]]]:
    """GPUs per (region, hardware) and facility power per region [kW] that started runs hold on ``grid``, slot by
    slot (a touched slot counts whole, as ``assignments.per_slot_use`` counts dispatched work)."""
    gpus: dict[tuple[str, str], list[int]] = {}
    power: dict[str, list[float]] = {}
    for r in runs:
        g = gpus.setdefault((r.region, r.hardware), [0] * grid.n_slots)
        p = power.setdefault(r.region, [0.0] * grid.n_slots)
        for first, last in r.intervals:
            for k in slots_of(first, last, start=grid.start, slot_minutes=grid.slot_minutes, n_slots=grid.n_slots):
                g[k] += r.gpus
                p[k] += r.power_kw
    return gpus, power


def _slice(values: Sequence[float], offset: int, n: int) -> list[float]:
    out = list(values[max(0, offset): offset + n])
    return out + [math.nan] * (n - len(out))


def replay(history: History, settings: Settings, start: datetime, days: int, *, scenario: Scenario | None = None,
           params: SolveParams | None = None, on_day: Callable[[int], None] | None = None) -> Outcome:
    """Replay ``days`` days from ``start`` (00:00 UTC) under ``scenario`` (None: the current settings).

    Parameters
    ----------
    history : History
        The stored history (fleet, series, jobs), from ``history.start`` on.
    settings : Settings
        The service's settings: slot length, horizon [h], objective, carbon price, currencies.
    params : SolveParams, optional
        Solver parameters (default: the service's re-plan time limit, 2 workers, seed 0).
    on_day : callable, optional
        Told the number of days done after each day.
    """
    scenario = scenario or Scenario()
    zones = set(history.price) & set(history.carbon)
    check(scenario, history.fleet, zones)
    fleet = apply(scenario, history.fleet)
    cfg = settings if scenario.carbon_price_per_tonne is None else replace(
        settings, carbon_price_per_tonne=scenario.carbon_price_per_tonne)
    objective = scenario.objective or settings.objective.value
    params = params or SolveParams(time_limit_s=settings.plan_time_limit_s, num_workers=2, random_seed=0)
    def source(code: str) -> str:  # a region added as a copy reads the copied region's currency and windows
        change = scenario.regions.get(code)
        return change.like if change is not None and change.like else code

    currencies = {code: history.currencies[source(code)] for code in fleet.regions}
    overrides = {code: history.overrides.get(source(code), ()) for code in fleet.regions}
    whole = history.grid()
    period = [(jid, v) for jid, v in history.jobs if start <= v.release_at < start + days * DAY]
    open_jobs: dict[str, JobValues] = {}
    waiting = sorted(period, key=lambda jv: jv[1].release_at)
    runs: list[SettledRun] = []
    missed: dict[str, int] = {}
    failed = 0
    reach = start
    for d in range(days):
        now = start + d * DAY
        while waiting and waiting[0][1].release_at < now + DAY:  # known by the day it is released
            jid, v = waiting.pop(0)
            open_jobs[jid] = v
        for jid in [j for j, v in open_jobs.items() if v.deadline_at <= now]:  # its deadline passed unplaced
            missed[jid] = d
            del open_jobs[jid]
        grid = grid_at(cfg, now, cfg.horizon_hours)
        reach = grid.slot_start(grid.n_slots)
        if not open_jobs:
            if on_day:
                on_day(d + 1)
            continue
        offset = round(whole.minutes_from_start(grid.start) / grid.slot_minutes)
        held_gpus, held_kw = _held(runs, grid)
        regions = [RegionSlots(
            code, currencies[code], _slice(history.price[info.zone], offset, grid.n_slots),
            _slice(history.carbon[info.zone], offset, grid.n_slots),
            budget_slots(info.power_budget_kw, overrides[code], grid),
            {hw: use for (rc, hw), use in held_gpus.items() if rc == code}, held_kw.get(code),
        ) for code, info in fleet.regions.items()]
        values = dict(open_jobs)
        problem = assemble_problem(cfg, grid, fleet, regions, list(values.items()), objective)
        minutes = {jid: v.minutes_on(fleet) for jid, v in values.items()}
        packed, bundles = bundle_short_jobs(problem, minutes, {jid: grid.release_offset_minutes(v.release_at)
                                                               for jid, v in values.items()})
        plan = get_solver("gridshift")(packed, params)
        if not check_plan(packed, plan).ok:  # the service never dispatches from such a plan; tomorrow retries
            failed += 1
            if on_day:
                on_day(d + 1)
            continue
        real = real_runs(problem, grid, plan, values, fleet, bundles)
        flat = unbundle(plan, bundles)
        last = d == days - 1
        jobs = {j.job_id: j for j in problem.jobs}
        for a in flat.assignments:
            intervals, _ = real[a.job_id]
            if not last and intervals[0][0] >= now + DAY:
                continue  # planned for a later day: planned again tomorrow
            job, region, v = jobs[a.job_id], problem.region(a.region), values[a.job_id]
            kw = job.gpus * problem.job_power_kw_per_gpu(job, a.hardware) * region.pue
            zone = fleet.regions[a.region].zone
            f = interval_figures(whole, kw, intervals, history.price[zone], history.carbon[zone],
                                 problem.fx(region.currency))
            runs.append(SettledRun(a.job_id, a.region, a.hardware, job.gpus, kw, tuple(intervals), f.energy_kwh,
                                   f.cost, f.carbon_kg, intervals[-1][1] > v.deadline_at, d))
            del open_jobs[a.job_id]
        for u in flat.unplanned:
            if u.job_id in open_jobs and u.reason in FINAL_REASONS:  # it can never run: a miss now
                missed[u.job_id] = d
                del open_jobs[u.job_id]
        if on_day:
            on_day(d + 1)
    not_placed = 0
    for jid, v in open_jobs.items():
        if v.deadline_at <= reach:
            missed[jid] = days - 1
        else:
            not_placed += 1
    return _outcome(start, days, len(period), runs, missed, not_placed, failed)


def _outcome(start: datetime, days: int, n_jobs: int, runs: list[SettledRun], missed: dict[str, int],
             not_placed: int, failed: int) -> Outcome:
    per_day: list[dict[str, Any]] = [{"date": (start + d * DAY).date().isoformat(), "cost": 0.0, "carbon_kg": 0.0, "energy_kwh": 0.0,
                "jobs_started": 0, "deadline_misses": 0} for d in range(days)]
    for r in runs:
        row = per_day[r.day]
        row["cost"] += r.cost
        row["carbon_kg"] += r.carbon_kg
        row["energy_kwh"] += r.energy_kwh
        row["jobs_started"] += 1
        row["deadline_misses"] += int(r.late)
    for d in missed.values():
        per_day[d]["deadline_misses"] += 1
    return Outcome(
        cost=sum(r.cost for r in runs), carbon_kg=sum(r.carbon_kg for r in runs),
        energy_kwh=sum(r.energy_kwh for r in runs), jobs=n_jobs, jobs_run=len(runs),
        deadline_misses=len(missed) + sum(r.late for r in runs), not_placed=not_placed, failed_plans=failed,
        days=tuple(per_day), runs=tuple(runs),
    )


METRICS = ("cost", "carbon_kg", "energy_kwh", "deadline_misses", "jobs_run", "not_placed")


def compare(history: History, settings: Settings, start: datetime, days: int, scenario: Scenario, *,
            params: SolveParams | None = None, on_day: Callable[[int], None] | None = None) -> dict[str, Any]:
    """The period replayed under the current settings and under ``scenario``: totals, per-day figures and the
    difference (scenario - current). ``on_day`` is told the days done out of ``2 * days``."""
    check(scenario, history.fleet, set(history.price) & set(history.carbon))
    tell = on_day or (lambda _n: None)
    current = replay(history, settings, start, days, params=params, on_day=tell)
    changed = replay(history, settings, start, days, scenario=scenario, params=params, on_day=lambda n: tell(days + n))
    a, b = current.totals(), changed.totals()
    difference = {k: b[k] - a[k] for k in METRICS}
    percent = {k: (100.0 * difference[k] / a[k] if a[k] else None) for k in ("cost", "carbon_kg", "energy_kwh")}
    return {
        "from": start.date().isoformat(), "to": (start + (days - 1) * DAY).date().isoformat(), "days": days,
        "currency": settings.reporting_currency,
        "objective": {"current": settings.objective.value, "scenario": scenario.objective or settings.objective.value},
        "scenario": scenario.as_dict(), "current": a, "changed": b, "difference": difference, "percent": percent,
        "per_day": {"current": list(current.days), "changed": list(changed.days)},
        "notes": coverage_notes(history, start, days, (history.fleet, apply(scenario, history.fleet))),
    }


def coverage_notes(history: History, start: datetime, days: int, fleets: Sequence[FleetSnapshot]) -> list[str]:
    """Where the period lacks a stored realised value (those slots are closed to jobs that cannot avoid them)."""
    grid = history.grid()
    lo = round(grid.minutes_from_start(start) / grid.slot_minutes)
    n = days * 24 * 60 // grid.slot_minutes
    notes = []
    for zone in sorted({info.zone for f in fleets for info in f.regions.values()}):
        for kind, series in (("price", history.price), ("carbon", history.carbon)):
            missing = sum(1 for x in _slice(series.get(zone, ()), lo, n) if math.isnan(x))
            if missing:
                notes.append(f"{zone} {kind}: no realised value stored for {missing} of {n} slots")
    return notes
