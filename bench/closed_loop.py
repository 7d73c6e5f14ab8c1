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

import math
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from app.config import Settings
from app.enums import SERIES_UNITS, SeriesKind, WorkloadClass
from app.services.fleet import FleetSnapshot, HardwareInfo, ProfileInfo, RegionInfo
from app.services.forecasts import DEFAULT_MODELS, HISTORY_DAYS, REGRESSORS
from app.services.job_values import JobValues
from app.services.planning import grid_at, objective_of, to_opt_job
from app.services.series import PUBLISHED, RUN_FORECAST, HourlyValue, choose_points, values_at
from bench.plan_workload import BUSY, Spec
from forecasting.frame import issue_frame
from forecasting.models import get_model
from forecasting.sources import read_harmonized
from forecasting.sources.harmonized import CARBON_NEIGHBOURS
from forecasting.task import ForecastTask
from optimizer import HardwareType, Problem, Region
from optimizer.residual import residual_problem
from optimizer.scenarios import Quantiles, Uncertain

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


def forecast_run(frames: dict[str, pd.DataFrame], zone: str, kind: SeriesKind, issued_at: datetime,
                 horizon_hours: int) -> pd.DataFrame:
    """One forecast run as the service's refresh computes it at ``issued_at``: columns forecast, q10, q50, q90."""
    start = issued_at - timedelta(days=HISTORY_DAYS[kind])
    frame = frames[zone]
    cols = {kind.value: _known(frame, kind, start, issued_at)}
    for reg in REGRESSORS[kind]:
        cols[reg.value] = _known(frame, reg, start, issued_at)
    if kind is SeriesKind.CARBON_INTENSITY:
        for other in CARBON_NEIGHBOURS.get(zone, ()):
            cols[f"{SeriesKind.PRICE.value}@{other}"] = _known(frames[other], SeriesKind.PRICE, start, issued_at)
    hist, future, _ = issue_frame(cols, pd.Timestamp(issued_at), horizon_hours, name=f"{zone} {kind.value}")
    task = ForecastTask(kind.value, tuple(future.columns))
    with threadpool_limits(limits=1):
        return get_model(DEFAULT_MODELS[kind]).predict(hist, future, task)


def cached_run(frames: dict[str, pd.DataFrame], zone: str, kind: SeriesKind, issued_at: datetime,
               horizon_hours: int, cache: Path = CACHE) -> pd.DataFrame:
    """:func:`forecast_run`, read from ``cache`` when computed before."""
    path = cache / cache_key(zone, kind, DEFAULT_MODELS[kind], issued_at, horizon_hours)
    if path.exists():
        return pd.read_csv(path, index_col=0, parse_dates=[0])
    out = forecast_run(frames, zone, kind, issued_at, horizon_hours)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
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
