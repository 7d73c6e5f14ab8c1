"""Closed loop: the service's own forecasts and planning path, replayed day by day (``plan_bench.py --forecast production``).

For each day D of the replay, at 00:00 UTC (the nightly plan):

* forecasts: issued at ``ISSUE_HOUR`` UTC the day before (after the day-ahead auction has published D's prices) by
  the service's models (``app.services.forecasts.DEFAULT_MODELS``: ``lear`` for prices, ``lear_hgbra_log`` for carbon
  intensity) on what was published by then, through the service's frame builder (``forecasting.frame.issue_frame``:
  history to the last complete day, unpublished regressors from the week before). Nothing of D's realised carbon
  or of later prices is seen. Cached per (zone, kind, model, issue hour, horizon) under ``bench/.cache/``;
* planner inputs: slots from ``planning.grid_at``, jobs through ``planning.to_opt_job`` (the workload's jobs as
  ``JobValues`` on a ``FleetSnapshot`` of the bench catalog), the objective from ``planning.objective_of``, and each
  slot's price and carbon from the published values and the forecast run by the service's own rule
  (``series.choose_points`` / ``series.values_at``: a published value beats a forecast of the same hour);
* settlement: every plan on the realised curves (``plan_bench.realised_totals``).

The module holds no network or database access; ``plan_bench.py`` drives it.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from app.config import Settings
from app.enums import SERIES_UNITS, SeriesKind, WorkloadClass
from app.schedule import beat_schedule
from app.services.fleet import FleetSnapshot, HardwareInfo, ProfileInfo, RegionInfo
from app.services.forecasts import DEFAULT_MODELS, HISTORY_DAYS, REGRESSORS
from app.services.freshness import replan_reason, runs_differ
from app.services.job_values import JobValues
from app.services.planning import FINAL_REASONS, grid_at, objective_of, to_opt_job
from app.services.series import PUBLISHED, RUN_FORECAST, HourlyValue, choose_points, values_at
from bench.plan_workload import BUSY, Spec
from forecasting.frame import issue_frame
from forecasting.models import get_model
from forecasting.sources import read_harmonized
from forecasting.sources.harmonized import CARBON_NEIGHBOURS
from forecasting.task import ForecastTask
from optimizer import HardwareType, Plan, Problem, Region, check_plan
from optimizer.residual import residual_problem
from optimizer.scenarios import Quantiles, Uncertain

CARBON_REFRESH_MINUTE = 5  # app.schedule's carbon-forecast entry runs at :05; its run is in force after that
ISSUE_HOUR = 13  # forecasts are issued at 13:00 UTC, after the day-ahead auction's results (~12:45 CET)
CACHE = Path(__file__).resolve().parent / ".cache" / "closed_loop"
KINDS = (SeriesKind.PRICE, SeriesKind.CARBON_INTENSITY)
# what each series is in the harmonized table; regressors are the service's (app.services.forecasts.REGRESSORS)
COLUMN = {SeriesKind.PRICE: "price_eur_mwh", SeriesKind.CARBON_INTENSITY: "carbon_intensity_g_per_kwh",
          SeriesKind.LOAD_FORECAST: "load_forecast_mw", SeriesKind.WIND_SOLAR_FORECAST: "wind_solar_forecast_mw"}
DAY_AHEAD = (SeriesKind.PRICE, SeriesKind.LOAD_FORECAST, SeriesKind.WIND_SOLAR_FORECAST)  # published the day before
KIND_CLASS = {"training": WorkloadClass.TRAINING, "rendering": WorkloadClass.RENDERING,
              "inference": WorkloadClass.BATCH_INFERENCE}


def cache_key(zone: str, kind: SeriesKind, model: str, issued_at: datetime, horizon_hours: int) -> str:
    """File name of one cached forecast run: every input that changes its values, and nothing else.

    Raises
    ------
    ValueError
        When ``issued_at`` is naive or not on the hour, or ``horizon_hours`` is not positive.
    """
    if issued_at.tzinfo is None:
        raise ValueError("cache_key: issued_at must be timezone-aware (UTC)")
    at = issued_at.astimezone(UTC)
    if at.minute or at.second or at.microsecond:
        raise ValueError(f"cache_key: issued_at must be on the hour, got {issued_at.isoformat()}")
    if horizon_hours <= 0:
        raise ValueError(f"cache_key: horizon_hours must be > 0, got {horizon_hours}")
    return f"{zone}-{SeriesKind(kind).value}-{model}-{at:%Y%m%dT%H}Z-{horizon_hours}h.csv"


def read_frames(data: Path, zones: list[str]) -> dict[str, pd.DataFrame]:
    """The harmonized table of each zone and of its carbon neighbours, with ``wind_solar_forecast_mw`` summed as the
    service's import stores it (``app.services.market``)."""
    out: dict[str, pd.DataFrame] = {}
    for zone in {*zones, *(n for z in zones for n in CARBON_NEIGHBOURS.get(z, ()))}:
        frame, _ = read_harmonized(data / f"{zone}_hourly.csv.gz")
        parts = [c for c in ("solar_forecast_mw", "wind_onshore_forecast_mw", "wind_offshore_forecast_mw")
                 if c in frame]
        frame["wind_solar_forecast_mw"] = frame[parts].sum(axis=1, min_count=len(parts))
        out[zone] = frame
    return out


def published_by(kind: SeriesKind, at: datetime) -> datetime:
    """The end of what is published of ``kind`` at ``at``: day-ahead products through the next day once the
    auction has closed (from ``ISSUE_HOUR``), else through today; measured series up to the hour."""
    if kind in DAY_AHEAD:
        day = at.replace(hour=0, minute=0, second=0, microsecond=0)
        return day + timedelta(days=2 if at.hour >= ISSUE_HOUR else 1)
    return at.replace(minute=0, second=0, microsecond=0)


def _known(frame: pd.DataFrame, kind: SeriesKind, start: datetime, at: datetime) -> pd.Series:
    s = frame[COLUMN[kind]]
    s = s[(s.index >= start) & (s.index < published_by(kind, at))].dropna()  # stored points only
    return s.rename(kind.value)


def run_inputs(frames: dict[str, pd.DataFrame], zone: str, kind: SeriesKind, issued_at: datetime,
               horizon_hours: int) -> tuple[pd.DataFrame, pd.DataFrame, ForecastTask]:
    """What the service's refresh at ``issued_at`` feeds the model: history and future frames, and the task."""
    start = issued_at - timedelta(days=HISTORY_DAYS[kind])
    frame = frames[zone]
    cols = {kind.value: _known(frame, kind, start, issued_at)}
    for reg in REGRESSORS[kind]:
        cols[reg.value] = _known(frame, reg, start, issued_at)
    if kind is SeriesKind.CARBON_INTENSITY:
        for other in CARBON_NEIGHBOURS.get(zone, ()):
            cols[f"{SeriesKind.PRICE.value}@{other}"] = _known(frames[other], SeriesKind.PRICE, start, issued_at)
    hist, future, _ = issue_frame(cols, pd.Timestamp(issued_at), horizon_hours, name=f"{zone} {kind.value}")
    return hist, future, ForecastTask(kind.value, tuple(future.columns))


def forecast_run(frames: dict[str, pd.DataFrame], zone: str, kind: SeriesKind, issued_at: datetime,
                 horizon_hours: int) -> pd.DataFrame:
    """One forecast run as the service's refresh computes it at ``issued_at``: columns forecast, q10, q50, q90."""
    hist, future, task = run_inputs(frames, zone, kind, issued_at, horizon_hours)
    with threadpool_limits(limits=1):
        return get_model(DEFAULT_MODELS[kind]).predict(hist, future, task)


_SAME_INPUTS: dict[str, pd.DataFrame] = {}  # this process's runs by their inputs (see cached_run)


def _inputs_key(kind: SeriesKind, hist: pd.DataFrame, future: pd.DataFrame) -> str:
    digest = hashlib.sha1(f"{kind.value}|{DEFAULT_MODELS[kind]}|{list(hist.columns)}|{list(future.columns)}".encode())
    for part in (hist, future):
        digest.update(pd.util.hash_pandas_object(part, index=True).to_numpy().tobytes())
    return digest.hexdigest()


def cached_run(frames: dict[str, pd.DataFrame], zone: str, kind: SeriesKind, issued_at: datetime,
               horizon_hours: int, cache: Path = CACHE) -> pd.DataFrame:
    """:func:`forecast_run`, read from ``cache`` when computed before. A run whose inputs are those of a run this
    process made already (the hourly carbon refresh: the history ends at the last complete day and the regressors
    change once a day) is that run, without fitting the models again."""
    path = cache / cache_key(zone, kind, DEFAULT_MODELS[kind], issued_at, horizon_hours)
    if path.exists():
        return pd.read_csv(path, index_col=0, parse_dates=[0])
    hist, future, task = run_inputs(frames, zone, kind, issued_at, horizon_hours)
    key = f"{zone}|{_inputs_key(kind, hist, future)}"
    out = _SAME_INPUTS.get(key)
    if out is None:
        with threadpool_limits(limits=1):
            out = get_model(DEFAULT_MODELS[kind]).predict(hist, future, task)
        if len(_SAME_INPUTS) > 256:
            _SAME_INPUTS.clear()
        _SAME_INPUTS[key] = out
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    out.to_csv(tmp)
    tmp.replace(path)  # a run killed half-way leaves no half-written entry
    return out


def issue_of(day: datetime) -> datetime:
    """When the forecasts the nightly plan of ``day`` uses were issued: ``ISSUE_HOUR`` the day before."""
    return day - timedelta(days=1) + timedelta(hours=ISSUE_HOUR)


def horizon_of(day: datetime, days: int) -> int:
    """Hours a forecast issued for ``day``'s plan must reach past its issue time to cover the plan's horizon."""
    return int((day + timedelta(days=days) - issue_of(day)) / timedelta(hours=1))


# --- planner inputs through the service's own functions -------------------------------------------------------


def fleet_of(hardware: tuple[HardwareType, ...], base: Problem) -> FleetSnapshot:
    """A FleetSnapshot of the bench catalog: per-class throughput and busy power as profiles, the bench's regions."""
    hw = {h.name: HardwareInfo(h.name, "bench", h.memory_gb, h.power_kw_per_gpu * 1000.0, 0.0,
                               {"default": h.relative_throughput}) for h in hardware}
    profiles = {(cls.value, h.name): ProfileInfo(h.relative_throughput, h.power_kw_per_gpu * 1000.0 * BUSY[k])
                for k, cls in KIND_CLASS.items() for h in hardware}
    regions = {r.name: RegionInfo(r.name, r.name, r.pue, r.power_budget_kw[0], frozenset(), dict(r.inventory))
               for r in base.regions}
    return FleetSnapshot(regions, hw, profiles)


def job_values(spec: Spec, start: datetime, horizon_slots_h: int) -> JobValues:
    """The bench job as the service stores it: work on the H100 [GPU-h], window, chunking in minutes."""
    release = start + timedelta(hours=spec.release)
    deadline_h = min(horizon_slots_h, spec.release + max(1, math.ceil(spec.ref_hours - 1e-9)) + spec.slack_h)
    return JobValues(
        name=spec.job_id, workload_class=KIND_CLASS[spec.kind], gpu_count=spec.gpus,
        reference_gpu_hours=spec.gpus * spec.ref_hours, reference_hardware="H100", durations_minutes=None,
        memory_gb_per_gpu=spec.memory_gb, allowed_regions=[spec.home] if spec.resident else None, residency_tag=None,
        allowed_hardware=None, home_region=spec.home, release_at=release,
        deadline_at=start + timedelta(hours=deadline_h), priority=0, interruptible=spec.interruptible,
        checkpoint_overhead_minutes=60, min_chunk_minutes=120, command=None, image=None, env={},
    )


def _points(values: pd.Series, rank: int, unit: str, source: str, issued_at: datetime | None
            ) -> list[tuple[int, HourlyValue]]:
    known = values.dropna()
    return [(rank, HourlyValue(ts.to_pydatetime(), float(v), unit, source, issued_at))
            for ts, v in zip(pd.DatetimeIndex(known.index), known.to_numpy(), strict=True)]


def slot_curve(published: pd.Series, forecast: pd.Series | None, slot_starts: list[datetime], kind: SeriesKind,
               issued_at: datetime | None = None) -> list[float]:
    """Each slot's value by the service's rule (``series.choose_points``): published values, then the forecast
    run's points where nothing is published."""
    unit = SERIES_UNITS.get(kind, "")
    cands = _points(published, PUBLISHED, unit, "published", None)
    if forecast is not None:
        cands += _points(forecast, RUN_FORECAST, unit, "forecast", issued_at)
    return values_at(choose_points(cands), slot_starts)


@dataclass(frozen=True, slots=True)
class DayInputs:
    """One day's problem on realised curves, on the point forecast, and the forecast quantiles per slot."""

    realised: Problem
    planned_on: Problem
    uncertain: Uncertain


def service_problem(base: Problem, specs: list[Spec], fleet: FleetSnapshot, settings: Settings, objective: str,
                    price: dict[str, list[float]], carbon: dict[str, list[float]]) -> Problem:
    """The Problem the service would build: jobs via ``to_opt_job``, grid via ``grid_at``, objective via
    ``objective_of``; the regions (inventory, power budget, PUE) of ``base`` with the given slot curves."""
    hours = base.n_slots * base.slot_minutes // 60
    grid = grid_at(settings, base.start, hours)
    jobs = tuple(to_opt_job(job_values(s, base.start, hours), s.job_id, fleet, grid) for s in specs)
    regions = tuple(Region(r.name, tuple(price[r.name]), tuple(carbon[r.name]), r.power_budget_kw, r.inventory,
                           r.pue, r.base_load_kw, r.inventory_per_slot, r.currency) for r in base.regions)
    return Problem(grid.start, grid.slot_minutes, grid.n_slots, regions, base.hardware, jobs,
                   objective=objective_of(settings, objective))


def day_curves(realised: dict[SeriesKind, pd.DataFrame], runs: dict[tuple[str, SeriesKind], pd.DataFrame],
               slot_starts: list[datetime], plan_at: datetime, issued_at: datetime
               ) -> tuple[dict, dict, dict[SeriesKind, dict[str, Quantiles]]]:
    """Realised slot curves, the nightly plan's slot curves (published + forecast point) and its quantiles."""
    real: dict[SeriesKind, dict[str, list[float]]] = {k: {} for k in KINDS}
    plan: dict[SeriesKind, dict[str, list[float]]] = {k: {} for k in KINDS}
    quant: dict[SeriesKind, dict[str, Quantiles]] = {k: {} for k in KINDS}
    for kind in KINDS:
        for zone in realised[kind].columns:
            actual = realised[kind][zone]
            real[kind][zone] = slot_curve(actual, None, slot_starts, kind)
            known = actual[actual.index < published_by(kind, plan_at)]
            run = runs[(zone, kind)]
            plan[kind][zone] = slot_curve(known, run["forecast"], slot_starts, kind, issued_at)
            q = [slot_curve(known, run[c], slot_starts, kind, issued_at) for c in ("q10", "q50", "q90")]
            quant[kind][zone] = Quantiles(tuple(q[0]), tuple(q[1]), tuple(q[2]))
    return real, plan, quant


def saving_captured(run_now: float, ours: float, perfect: float) -> float | None:
    """Share of the possible saving a plan captured: (run-now - ours) / (run-now - perfect foresight); None when
    perfect foresight saves nothing (no possible saving to share)."""
    possible = run_now - perfect
    if not math.isfinite(possible) or abs(possible) < 1e-12:
        return None
    return (run_now - ours) / possible


def finite(curves: dict[str, list[float]]) -> bool:
    """True when every slot of every region has a value."""
    return all(np.isfinite(v).all() for v in curves.values())


# --- the re-plan once the day's data has arrived -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Combined:
    """Work that had started by a re-plan, kept as planned, with the re-plan of the rest (settled like a Plan)."""

    assignments: tuple
    unplanned: tuple


def replan_problem(problem: Problem, plan, at_slot: int) -> tuple[Problem, tuple]:
    """The re-plan at ``at_slot``: jobs whose planned start lies before it keep their placement (their GPUs and
    facility power are taken off the regions, slot by slot); every other job may start from ``at_slot`` on.

    Returns the problem of the jobs still to place and the kept assignments.
    """
    kept = tuple(a for a in plan.assignments if a.start_slot < at_slot)
    kept_ids = {a.job_id for a in kept}
    left = residual_problem(problem, replace(plan, assignments=kept), problem)  # the optimizer's own rule
    rest = tuple(replace(j, release_slot=max(j.release_slot, at_slot)) for j in problem.jobs
                 if j.job_id not in kept_ids)
    return replace(left, jobs=rest), kept


def replan_curves(realised: dict[SeriesKind, pd.DataFrame], runs: dict[tuple[str, SeriesKind], pd.DataFrame],
                  slot_starts: list[datetime], at: datetime, issued_at: datetime) -> dict:
    """Slot curves seen at ``at``: everything published by then (the next day's prices after the auction, carbon up
    to the hour), the same forecast run elsewhere (the service's rule)."""
    out: dict[SeriesKind, dict[str, list[float]]] = {k: {} for k in KINDS}
    for kind in KINDS:
        for zone in realised[kind].columns:
            actual = realised[kind][zone]
            known = actual[actual.index < published_by(kind, at)]
            out[kind][zone] = slot_curve(known, runs[(zone, kind)]["forecast"], slot_starts, kind, issued_at)
    return out


# --- the service's re-plans through the day (app.schedule's beat, app.services.freshness's decision) --------------


def replan_times(settings: Settings, day: datetime) -> list[datetime]:
    """When the service re-plans during ``day`` after its nightly plan: beat's ``replan`` entry, every
    ``settings.replan_interval_s`` (counted from the nightly plan), up to the next nightly plan."""
    every = beat_schedule(settings)["replan"]["schedule"]
    out, t = [], day + every
    while t < day + timedelta(days=1):
        out.append(t)
        t += every
    return out


def carbon_refreshes(settings: Settings, every_h: int = 0) -> tuple[int, ...]:
    """UTC hours at whose minute ``m`` beat's ``carbon-forecast`` entry refreshes the carbon forecasts (every hour at
    :05 by default); ``every_h`` > 0 keeps every ``every_h``-th of them only (a cheaper replay, not the service)."""
    hours = sorted(beat_schedule(settings)["carbon-forecast"]["schedule"].hour)
    return tuple(h for h in hours if every_h <= 1 or h % every_h == 0)


def run_issued(kind: SeriesKind, at: datetime, carbon_hours: tuple[int, ...]) -> datetime:
    """Issue time of the forecast run in force at ``at``: prices once a day at ``ISSUE_HOUR``; carbon at the latest
    refresh hour before ``at`` (a refresh at h:05 sees what was published by h:00, so it is issued as of h:00, and is
    in force from the next full hour on)."""
    if kind is SeriesKind.PRICE:
        day = at.replace(hour=0, minute=0, second=0, microsecond=0)
        return day + timedelta(hours=ISSUE_HOUR) - (timedelta(days=1) if at.hour < ISSUE_HOUR else timedelta(0))
    late = at.minute > CARBON_REFRESH_MINUTE
    t = at.replace(minute=0, second=0, microsecond=0) - (timedelta(0) if late else timedelta(hours=1))
    while t.hour not in carbon_hours:
        t -= timedelta(hours=1)
    return t


def input_epoch(issued_at: datetime) -> tuple[datetime, bool]:
    """What changes the inputs of a refresh at ``issued_at`` (``issue_frame``): the last complete day of history (its
    end) and whether the next day's day-ahead values are published. Two refreshes of one epoch build the same frames
    (tests/bench/test_closed_loop.py), so the replay fits the models once per epoch."""
    day = issued_at.replace(hour=0, minute=0, second=0, microsecond=0)
    return day, issued_at.hour >= ISSUE_HOUR


def run_horizon(issued_at: datetime, days: int) -> int:
    """Hours a run issued at ``issued_at`` covers: through the horizon of the next day's nightly plan, so the price
    run issued at 13:00 on D is the cached run of D+1's nightly plan."""
    day = issued_at.replace(hour=0, minute=0, second=0, microsecond=0)
    return int((day + timedelta(days=1 + days) - issued_at) / timedelta(hours=1))


def seen_state(at: datetime, runs: dict[tuple[str, SeriesKind], pd.DataFrame]) -> dict[SeriesKind, tuple]:
    """What a plan at ``at`` plans on, per series: the end of the published values that lie ahead (None when only
    past hours are published, as for measured carbon) and each zone's forecast run in force (``runs``)."""
    return {k: (published_by(k, at) if published_by(k, at) > at else None,
                {z: run["forecast"] for (z, kind), run in runs.items() if kind is k}) for k in KINDS}


def nightly_state(issued_at: datetime, runs: dict[tuple[str, SeriesKind], pd.DataFrame]) -> dict[SeriesKind, tuple]:
    """:func:`seen_state` of the nightly plan: what was published at ``issued_at``, and its runs issued then."""
    return seen_state(issued_at, runs)


def changed_since(before: dict[SeriesKind, tuple], now: dict[SeriesKind, tuple], at: datetime) -> list[SeriesKind]:
    """Series whose values for the slots from ``at`` on differ between two :func:`seen_state`: more published
    values, or a run in force with other values (``freshness.runs_differ``, the service's comparison)."""
    def ahead(series: pd.Series) -> dict:
        return {t: float(v) for t, v in series[series.index >= at].dropna().items()}

    out = []
    for k in KINDS:
        (end0, runs0), (end1, runs1) = before[k], now[k]
        if end0 != end1 or runs0.keys() != runs1.keys() or any(
                runs0[z] is not runs1[z] and runs_differ(ahead(runs0[z]), ahead(runs1[z])) for z in runs1):
            out.append(k)
    return out


@dataclass(frozen=True, slots=True)
class Chain:
    """The nightly plan after the day's re-plans: the plan settled, and what the re-plans did."""

    plan: Combined
    replans: tuple[tuple[str, str], ...]  # (time, reason) of each re-plan made
    skipped: int  # re-plans the service would skip: nothing it plans on changed
    kept_current: int  # re-plans whose result was worse than the current plan of the same jobs (that one stayed)
    open_jobs: int  # jobs not started by the first re-plan (0: none made)


def replan_chain(objective: str, nightly: Plan | Combined, start: datetime, nightly_seen: dict, times: list[datetime],
                 state_at, problem_at, solve, value_on) -> Chain:
    """The nightly plan re-planned at each of ``times`` where the service would re-plan (``freshness.replan_reason``
    on the series the objective weighs and the jobs left out); work started before a re-plan keeps its placement.

    ``state_at(t)``: :func:`seen_state` (``nightly_seen`` that of the nightly plan); ``problem_at(t)``: the Problem on the curves seen at ``t``; ``solve``: the
    planner; ``value_on(problem, plan)``: a plan's objective value on a problem. A re-plan that leaves more jobs out,
    or is worse on what is seen than the current plan of the same jobs, is not taken (the service keeps its current
    plan when a new one fails; a short solve sometimes leaves jobs not solved).
    """
    current = Combined(tuple(nightly.assignments), tuple(nightly.unplanned))
    last, made, skipped, kept_current, open_jobs = nightly_seen, [], 0, 0, 0
    for t in times:
        state = state_at(t)
        left_out = any(u.reason not in FINAL_REASONS for u in current.unplanned)
        why = replan_reason(objective, changed_since(last, state, t), left_out=left_out)
        if why is None:
            skipped += 1
            continue
        last = state
        problem = problem_at(t)
        at_slot = int((t - start) / timedelta(minutes=problem.slot_minutes))
        rest, kept = replan_problem(problem, current, at_slot)
        open_jobs = open_jobs or len(rest.jobs)
        again = solve(rest)
        ids = {j.job_id for j in rest.jobs}
        before = Combined(tuple(a for a in current.assignments if a.job_id in ids),
                          tuple(u for u in current.unplanned if u.job_id in ids))
        if (not check_plan(rest, again, allow_late=False).ok or len(again.unplanned) > len(before.unplanned)
                or value_on(rest, again) > value_on(rest, before)):
            again, kept_current = before, kept_current + 1
        current = Combined(kept + tuple(again.assignments), tuple(again.unplanned))
        made.append((f"{t:%H:%M}", why))
    return Chain(current, tuple(made), skipped, kept_current, open_jobs)
