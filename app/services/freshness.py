"""Whether the hourly re-plan has anything new to plan on, or would only solve the same problem again.

A plan records what it read (``plans.stats["data_seen"]``, :func:`data_seen`): per series kind the newest stored
point and each zone's newest succeeded forecast run, and the newest job event. A newer run counts as new data only
where its values differ: the hourly carbon refresh re-issues the same forecast until a new day of history or the
next day-ahead regressors arrive. The hourly re-plan (``gridshift.plan.replan`` with
trigger ``hourly``) runs only when :func:`hourly_reason` names a reason; the nightly plan, re-plans after a failure and
an operator's always run. :func:`replan_reason` is the decision itself on plain data, shared with the closed-loop
replay (``bench/closed_loop.py``), so the replay re-plans exactly where the service would.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from app.enums import TERMINAL_JOB_STATES, ForecastRunStatus, JobState, SeriesKind
from app.models import ForecastPoint, ForecastRun, JobEvent, MarketSeries, Plan, UnplannedJob
from app.models import Job as JobRow
from optimizer import ObjectiveKind

#: The series a plan's inputs are made of: each slot's price and carbon intensity (``planning.build_problem``).
PLAN_SERIES = (SeriesKind.PRICE, SeriesKind.CARBON_INTENSITY)
#: Job states whose arrival frees capacity a plan counted as held (a run that ended before its planned end).
ENDED_STATES = tuple(s.value for s in TERMINAL_JOB_STATES if s is not JobState.UNSCHEDULABLE)


def valued_kinds(objective: str) -> tuple[SeriesKind, ...]:
    """The series whose values the objective weighs (``ObjectiveKind.uses_price`` / ``uses_carbon``).

    A plan under ``cost`` does not change when only carbon forecasts do (it needs carbon to be known, not its
    value), nor one under ``carbon`` when only prices do. An unknown name counts as weighing both.
    """
    try:
        kind = ObjectiveKind(objective)
    except ValueError:
        return PLAN_SERIES
    return tuple(k for k, used in ((SeriesKind.PRICE, kind.uses_price),
                                   (SeriesKind.CARBON_INTENSITY, kind.uses_carbon)) if used)


def replan_reason(objective: str, changed: Iterable[SeriesKind], *, left_out: bool = False,
                  runs_ended: bool = False, objective_changed: bool = False) -> str | None:
    """Why an hourly re-plan should run, or None when it would plan the same problem on the same data.

    Parameters
    ----------
    objective : str
        The objective the re-plan would use.
    changed : iterable of SeriesKind
        Series with new values for the plan's slots since the current plan read them (points published, forecast
        runs succeeded).
    left_out : bool
        The current plan left open jobs out (for capacity, their window or the horizon): time alone may let them in.
    runs_ended : bool
        Work the current plan counted as held ended since (its capacity is free earlier than planned).
    objective_changed : bool
        The configured objective is not the current plan's.
    """
    if objective_changed:
        return "objective"
    new = [k.value for k in valued_kinds(objective) if k in set(changed)]
    if new:
        return "new-data:" + ",".join(new)
    if runs_ended:
        return "runs-ended"
    if left_out:
        return "left-out"
    return None


def _latest_runs(session: Session, kind: SeriesKind) -> dict[str, int]:
    """Per zone the id of the newest succeeded forecast run of ``kind`` (the one whose points win, ``series``): one
    row per zone, on the (zone, kind, issued_at) index, however many runs are kept."""
    ok = (ForecastRun.kind == kind, ForecastRun.status == ForecastRunStatus.SUCCEEDED)
    newest = (select(ForecastRun.zone, func.max(ForecastRun.issued_at).label("at")).where(*ok)
              .group_by(ForecastRun.zone).subquery())
    rows = session.execute(
        select(ForecastRun.zone, func.max(ForecastRun.id)).where(*ok)
        .join(newest, and_(ForecastRun.zone == newest.c.zone, ForecastRun.issued_at == newest.c.at))
        .group_by(ForecastRun.zone))
    return {zone: int(run_id) for zone, run_id in rows}


def data_seen(session: Session) -> dict[str, Any]:
    """What a plan reads, as ids: per series kind the newest stored point and each zone's newest succeeded forecast
    run, and the newest job event."""
    out: dict[str, Any] = {"events": int(session.scalar(select(func.max(JobEvent.id))) or 0)}
    for kind in PLAN_SERIES:
        point = session.scalar(select(func.max(MarketSeries.id)).where(MarketSeries.kind == kind))
        out[kind.value] = {"point": int(point or 0), "runs": _latest_runs(session, kind)}
    return out


def _points(session: Session, run_id: int, now: datetime) -> dict[datetime, float]:
    return {ts: float(v) for ts, v in session.execute(select(ForecastPoint.ts, ForecastPoint.value).where(
        ForecastPoint.run_id == run_id, ForecastPoint.ts >= now))}


def runs_differ(old: dict[datetime, float], new: dict[datetime, float]) -> bool:
    """True when a forecast run gives other values than the one before it (hours from now on): a refresh on the
    same inputs (the hourly carbon refresh between two complete days of history) changes no plan."""
    return old.keys() != new.keys() or any(abs(old[t] - v) > 1e-9 * max(1.0, abs(v)) for t, v in new.items())


def changed_kinds(session: Session, seen: dict[str, Any], now: datetime) -> list[SeriesKind]:
    """Series with other values for slots from ``now`` on than ``seen`` (:func:`data_seen` of a plan) had: a point
    stored since for an hour still ahead, or a zone whose newest forecast run is another one with other values."""
    out = []
    for kind in PLAN_SERIES:
        before = seen.get(kind.value)
        if not isinstance(before, dict) or not isinstance(before.get("runs"), dict):
            out.append(kind)  # a plan stored before this record: count everything as new
            continue
        point = session.scalar(select(MarketSeries.id).where(
            MarketSeries.kind == kind, MarketSeries.id > int(before.get("point", 0)), MarketSeries.ts >= now).limit(1))
        old_runs = {z: int(r) for z, r in before["runs"].items()}
        new_runs = _latest_runs(session, kind)
        if point is not None or any(
            old_runs.get(z) != r and (z not in old_runs or runs_differ(_points(session, old_runs[z], now),
                                                                        _points(session, r, now)))
            for z, r in new_runs.items()
        ):
            out.append(kind)
    return out


def hourly_reason(session: Session, objective: str, plan: Plan | None, now: datetime) -> str | None:
    """Why the hourly re-plan should run against the current ``plan`` (:func:`replan_reason`), or None to skip it.

    New work and fleet changes are planned by the minute check (``replan.new_work_trigger``), which the hourly task
    asks first.
    """
    if plan is None:
        return "no-plan"
    seen = (plan.stats or {}).get("data_seen")
    if not isinstance(seen, dict):
        return "no-record"
    ended = session.scalar(select(JobEvent.id).where(
        JobEvent.id > int(seen.get("events", 0)), JobEvent.state.in_(ENDED_STATES)).limit(1)) is not None
    left_out = session.scalar(select(UnplannedJob.id).join(JobRow, JobRow.id == UnplannedJob.job_id).where(
        UnplannedJob.plan_id == plan.id, JobRow.state == JobState.PENDING).limit(1)) is not None
    return replan_reason(objective, changed_kinds(session, seen, now), left_out=left_out, runs_ended=ended,
                         objective_changed=plan.objective != objective)
