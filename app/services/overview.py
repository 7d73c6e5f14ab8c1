"""The fleet at a glance, per region: forecasts with their interval against the realised series, planned power
against the power budget per slot of the planning grid, and GPUs in use per hardware type. Aggregates only: no job
appears here.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session, selectinload

from app.enums import ACTIVE_RUN_STATES, ForecastRunStatus, JobState, SeriesKind
from app.models import (
    Assignment,
    ForecastPoint,
    ForecastRun,
    HardwareType,
    Inventory,
    Job,
    Region,
    Run,
)
from app.services.assignments import assignment_power_kw, current_plan_id, running_intervals, slots_of
from app.services.fleet import lowest_budget_kw
from app.services.series import hourly_series

KINDS = (SeriesKind.PRICE, SeriesKind.CARBON_INTENSITY)


@dataclass(frozen=True, slots=True)
class SeriesView:
    """One (zone, kind): realised points up to now and forecast points with their interval."""

    kind: str
    unit: str
    realised_ts: list[datetime]
    realised: list[float]
    forecast_ts: list[datetime]
    forecast: list[float]
    lower: list[float | None]  # lowest stored quantile, e.g. 0.1
    upper: list[float | None]  # highest stored quantile, e.g. 0.9
    model: str | None  # model of the latest succeeded forecast run
    issued_at: datetime | None


@dataclass(frozen=True, slots=True)
class RegionView:
    code: str
    name: str
    zone: str
    timezone: str
    power_budget_kw: float
    series: list[SeriesView]
    slots: list[datetime]  # slot starts (the planning grid)
    planned_kw: list[float]  # mean facility power of the current plan per slot [kW]
    budget_kw: list[float]  # lowest budget in force during the slot, overrides applied [kW]
    gpus: list[dict[str, Any]]  # [{hardware, inventory, in_use_now, peak_planned}]


def quantile_level(key: str) -> float | None:
    """A stored quantile's level in (0, 1) from its key: ``"0.1"``, ``"q10"`` or ``"p10"``; None if unreadable."""
    raw = key.strip().lower().lstrip("qp")
    try:
        level = float(raw)
    except ValueError:
        return None
    if level >= 1.0 and key.strip().lower()[:1] in ("q", "p"):
        level /= 100.0
    return level if 0.0 < level < 1.0 else None


def _series(session: Session, zone: str, kind: SeriesKind, start: datetime, now: datetime, end: datetime) -> SeriesView:
    realised = [p for p in hourly_series(session, zone, kind, start, end) if p.published and p.ts <= now]
    unit = realised[-1].unit if realised else ""
    fc: dict[datetime, tuple[float, float | None, float | None]] = {}
    model, issued = None, None
    rows = session.execute(
        select(ForecastPoint, ForecastRun.model, ForecastRun.issued_at)
        .join(ForecastRun, ForecastRun.id == ForecastPoint.run_id)
        .where(ForecastRun.zone == zone, ForecastRun.kind == kind, ForecastRun.status == ForecastRunStatus.SUCCEEDED,
               ForecastPoint.ts >= start, ForecastPoint.ts < end)
        .order_by(ForecastRun.issued_at, ForecastRun.id)
    )
    for point, run_model, run_issued in rows:  # later runs overwrite earlier forecasts of the same hour
        q = {lvl: float(v) for k, v in (point.quantiles or {}).items()
             if v is not None and (lvl := quantile_level(k)) is not None}
        lo = q[min(q)] if q else None
        hi = q[max(q)] if q else None
        fc[point.ts] = (point.value, lo, hi)
        model, issued = run_model, run_issued
    ts = sorted(fc)
    return SeriesView(
        kind=kind.value, unit=unit, realised_ts=[p.ts for p in realised], realised=[p.value for p in realised],
        forecast_ts=ts, forecast=[fc[t][0] for t in ts], lower=[fc[t][1] for t in ts], upper=[fc[t][2] for t in ts],
        model=model, issued_at=issued,
    )


def regions_overview(session: Session, now: datetime, *, hours_back: int = 24, hours_ahead: int = 48,
                     slot_minutes: int = 60) -> list[RegionView]:
    """Every region's overview for [now - hours_back, now + hours_ahead) on slots of ``slot_minutes`` (the planning
    grid's, so a quarter-hour budget dip or a 20-second job shows as the planner sees it): planned power is each
    slot's mean draw, the budget the lowest in force in it."""
    hour = now.replace(minute=0, second=0, microsecond=0)
    start, end = hour - timedelta(hours=hours_back), hour + timedelta(hours=hours_ahead)
    step = timedelta(minutes=slot_minutes)
    slots = [start + step * i for i in range((hours_back + hours_ahead) * 60 // slot_minutes)]
    regions = list(session.scalars(
        select(Region).options(selectinload(Region.overrides),
                               selectinload(Region.inventory).selectinload(Inventory.hardware_type))
        .order_by(Region.code)
    ))
    plan_id = current_plan_id(session)
    # The current plan's assignments of jobs still waiting to run and, whichever plan they came from, those that
    # active runs execute (a dispatched job is not in later plans); a job cancelled, finished or failed since holds
    # nothing. Plain rows, not objects: a plan may hold many thousand jobs.
    executing = (
        select(Run.assignment_id).join(Job, Job.id == Run.job_id)
        .where(or_(Run.state.in_(ACTIVE_RUN_STATES), (Job.state == JobState.PAUSED) & Run.chunk_index.is_not(None)),
               Run.assignment_id.is_not(None))
    )
    waiting = (Assignment.plan_id == plan_id) & (Job.state == JobState.PLANNED)
    shown = Assignment.id.in_(executing) if plan_id is None else or_(waiting, Assignment.id.in_(executing))
    assignments: list[Any] = list(session.execute(
        select(Assignment.region_id, HardwareType.code.label("hardware"), Assignment.start_at, Assignment.end_at,
               Assignment.chunks, Assignment.energy_kwh, Job.gpu_count)
        .join(Job, Job.id == Assignment.job_id)
        .join(HardwareType, HardwareType.id == Assignment.hardware_type_id)
        .where(shown, Assignment.end_at > start, Assignment.start_at < end)
    ).all())
    load: dict[int, list[float]] = defaultdict(lambda: [0.0] * len(slots))
    in_use: dict[tuple[int, str], int] = defaultdict(int)
    peak: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0] * len(slots))
    for a in assignments:
        kw, gpus = assignment_power_kw(a), a.gpu_count
        for s, e in running_intervals(a):
            if s <= now < e:
                in_use[(a.region_id, a.hardware)] += gpus
            for i in slots_of(s, e, start=start, slot_minutes=slot_minutes, n_slots=len(slots)):  # slots it touches
                slot = slots[i]
                overlap = (min(e, slot + step) - max(s, slot)).total_seconds()
                if overlap > 0:
                    load[a.region_id][i] += kw * overlap / step.total_seconds()
                    peak[(a.region_id, a.hardware)][i] += gpus
    out = []
    for r in regions:
        windows = [(o.start_at, o.end_at, o.power_kw) for o in r.overrides]
        budget = [lowest_budget_kw(r.power_budget_kw, windows, slot, slot + step) for slot in slots]
        gpus = [
            {"hardware": inv.hardware_type.code, "inventory": inv.gpu_count,
             "in_use_now": in_use.get((r.id, inv.hardware_type.code), 0),
             "peak_planned": max(peak.get((r.id, inv.hardware_type.code), [0]))}
            for inv in sorted(r.inventory, key=lambda i: i.hardware_type.code)
        ]
        out.append(RegionView(
            code=r.code, name=r.name, zone=r.zone, timezone=r.timezone, power_budget_kw=r.power_budget_kw,
            series=[_series(session, r.zone, k, start, now, end) for k in KINDS],
            slots=slots, planned_kw=[round(x, 3) for x in load[r.id]], budget_kw=budget, gpus=gpus,
        ))
    return out
