"""Run the planner for the whole fleet under one lock, whoever asks (nightly/hourly tasks, an operator, a failure)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import is_postgresql, utcnow
from app.enums import JobState
from app.models import Job
from app.services.assignments import current_plan
from app.services.audit import fleet_changed_since
from app.services.freshness import hourly_reason

#: Key of the PostgreSQL transaction-level advisory lock held while a plan is computed and stored.
PLAN_LOCK_KEY = 0x67726964  # "grid"


def replan(session: Session, settings: Settings, trigger: str, *, now: datetime | None = None,  # type: ignore[no-untyped-def]
           on_phase: Callable[[str], None] | None = None):
    """Plan every open job now with the configured horizon and objective; the caller commits.

    ``on_phase`` is told each step the plan reaches (``planning.plan_fleet``).

    On PostgreSQL concurrent calls (a failure-triggered re-plan meeting the hourly one, or an operator's) wait
    for each other instead of writing two current plans; SQLite serialises writers by itself.
    """
    from app.services.planning import plan_fleet  # OR-Tools is loaded only where planning happens

    if is_postgresql(session):
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": PLAN_LOCK_KEY})
    progress = {"on_phase": on_phase} if on_phase is not None else {}  # only plan runs follow the phases
    return plan_fleet(session, settings, now=now or utcnow(), horizon_hours=settings.horizon_hours,
                      objective=settings.objective, trigger=trigger, **progress)


def fleet_changed(session: Session) -> bool:
    """True when the fleet was changed through the API after the current plan read it.

    Each plan records the newest audit entry there was before it read the fleet (``stats["audit_seen"]``); audit
    entries are written in the change's own transaction. Ids, not timestamps, so clocks of the web and worker hosts
    need not agree. A plan stored before that record counts as having seen none.
    """
    current = current_plan(session)
    if current is None:
        return False  # no plan yet: the first one sees the fleet as it is
    return fleet_changed_since(session, int((current.stats or {}).get("audit_seen", 0)))


def new_work_waiting(session: Session) -> bool:
    """True when a pending job arrived after the current plan was made (or there is no plan yet)."""
    current = current_plan(session)
    q = select(Job.id).where(Job.state == JobState.PENDING)
    if current is not None:
        q = q.where(Job.created_at > current.created_at)
    return session.scalar(q.limit(1)) is not None


def new_work_trigger(session: Session) -> str | None:
    """Why the minute check should plan now: ``new-work``, ``fleet-change``, or None when nothing changed."""
    if new_work_waiting(session):
        return "new-work"
    if fleet_changed(session):
        return "fleet-change"
    return None


def hourly_trigger(session: Session, settings: Settings, *, now: datetime | None = None) -> str | None:
    """Why the hourly re-plan should run now, or None when it would plan the same problem on the same data.

    Jobs submitted or fleet changes since the current plan (:func:`new_work_trigger`), then what the current plan
    read against what is stored now (``freshness.hourly_reason``: new prices or forecasts the objective weighs, work
    that ended, jobs the plan left out, another objective). Without any of those a re-plan would solve the problem
    the current plan solved, on the same values, one hour later: the current plan stands.
    """
    return new_work_trigger(session) or hourly_reason(session, settings.objective, current_plan(session),
                                                      now or utcnow())


def replan_new_work(session: Session, settings: Settings, *, now: datetime | None = None):  # type: ignore[no-untyped-def]
    """Plan again if jobs were submitted or the fleet changed since the current plan; the plan record or None.

    Submissions do not each start a plan (a 10,000-job batch would start 10,000): this check runs every minute
    from beat, so a new job is planned within about a minute, and many submissions share one plan. A fleet change
    (fewer GPUs for maintenance, a demand-response window) re-plans the same way, so work is not dispatched into
    capacity that is gone for longer than about a minute plus the solve.
    """
    trigger = new_work_trigger(session)
    return None if trigger is None else replan(session, settings, trigger, now=now)
