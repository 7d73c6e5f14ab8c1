"""What ``/metrics`` reports about plans, dispatch and forecasts, read from the database at scrape time.

Read from the database rather than counted in the process that did the work, so that every web process reports
the same figures whichever worker host planned or dispatched (and a restart loses nothing). Each figure is one
small aggregate query; ``app.metrics`` caches the snapshot for a few seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.enums import ForecastRunStatus, JobState, PlanStatus
from app.models import Assignment, ForecastRun, Job, ModelSelection, Plan, PlanRun, Run

#: A planned start older than this without a dispatch counts as late [s] (the dispatch tick runs every 30 s).
LATE_AFTER_S = 300.0


@dataclass(frozen=True, slots=True)
class OpsSnapshot:
    """Figures at ``now``; None where there is nothing to report yet (no plan, no forecast)."""

    now: datetime
    plan_solve_s: float | None = None  # the newest plan's solve [s]
    plan_gap_pct: float | None = None
    plan_age_s: float | None = None  # since the current plan was made [s]
    plan_jobs_planned: int | None = None  # in the current plan
    plan_jobs_left_out: int | None = None
    plan_objective_value: float | None = None
    plans_by_status: dict[str, int] = field(default_factory=dict)
    plan_runs_by_state: dict[str, int] = field(default_factory=dict)
    dispatch_due: int = 0  # planned starts that have come, not yet dispatched
    dispatch_late: int = 0  # of those, due for more than LATE_AFTER_S
    runs_by_state: dict[str, int] = field(default_factory=dict)  # lost included
    queue_depth: int = 0  # runs claimed and waiting to be submitted to their runtime
    forecast_age_s: dict[tuple[str, str], float] = field(default_factory=dict)  # (zone, kind) -> age [s]
    backtest_error: dict[tuple[str, str, str, str], float] = field(default_factory=dict)  # (zone, kind, model, metric)


def snapshot(session: Session, now: datetime) -> OpsSnapshot:
    """Read every figure at ``now``."""
    newest = session.scalar(select(Plan).order_by(Plan.id.desc()).limit(1))
    current = session.scalar(select(Plan).where(Plan.is_current.is_(True)).order_by(Plan.id.desc()).limit(1))
    jobs = ((current.stats or {}).get("jobs") or {}) if current is not None else {}
    solve = ((newest.stats or {}).get("solve") or {}) if newest is not None else {}
    due_q = (
        select(func.count(), func.min(Assignment.start_at))
        .join(Job, Job.id == Assignment.job_id)
        .where(Assignment.plan_id == (current.id if current is not None else -1),
               Job.state == JobState.PLANNED, Assignment.start_at <= now)
    )
    due = session.execute(due_q).one()
    late = session.scalar(
        due_q.with_only_columns(func.count()).where(Assignment.start_at <= now - timedelta(seconds=LATE_AFTER_S))
    )
    runs = {str(s): int(n) for s, n in session.execute(select(Run.state, func.count()).group_by(Run.state))}
    newest_forecast = (
        select(ForecastRun.zone, ForecastRun.kind, func.max(ForecastRun.issued_at))
        .where(ForecastRun.status == ForecastRunStatus.SUCCEEDED)
        .group_by(ForecastRun.zone, ForecastRun.kind)
    )
    ages = {(zone, str(kind)): (now - issued).total_seconds() for zone, kind, issued in session.execute(newest_forecast)}
    errors: dict[tuple[str, str, str, str], float] = {}
    for sel in session.scalars(select(ModelSelection)):
        for metric, value in ((sel.metrics or {}).get(sel.model) or {}).items():
            if isinstance(value, int | float):
                errors[(sel.zone, str(sel.kind), sel.model, metric)] = float(value)
    return OpsSnapshot(
        now=now,
        plan_solve_s=solve.get("wall_s"),
        plan_gap_pct=newest.gap_pct if newest is not None and newest.status is not PlanStatus.FAILED else None,
        plan_age_s=(now - current.created_at).total_seconds() if current is not None else None,
        plan_jobs_planned=jobs.get("assigned") if current is not None else None,
        plan_jobs_left_out=jobs.get("unplanned") if current is not None else None,
        plan_objective_value=current.objective_value if current is not None else None,
        plans_by_status={str(s): int(n) for s, n in session.execute(select(Plan.status, func.count())
                                                                       .group_by(Plan.status))},
        plan_runs_by_state={str(s): int(n) for s, n in session.execute(select(PlanRun.state, func.count())
                                                                          .group_by(PlanRun.state))},
        dispatch_due=int(due[0] or 0),
        dispatch_late=int(late or 0),
        runs_by_state=runs,
        queue_depth=runs.get("dispatching", 0),
        forecast_age_s=ages,
        backtest_error=errors,
    )
