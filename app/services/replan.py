"""Run the planner for the whole fleet under one lock, whoever asks (nightly/hourly tasks, an operator, a failure)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import utcnow

#: Key of the PostgreSQL transaction-level advisory lock held while a plan is computed and stored.
PLAN_LOCK_KEY = 0x67726964  # "grid"


def replan(session: Session, settings: Settings, trigger: str, *, now: datetime | None = None):  # type: ignore[no-untyped-def]
    """Plan every open job now with the configured horizon and objective; the caller commits.

    On PostgreSQL concurrent calls (a failure-triggered re-plan meeting the hourly one, or an operator's) wait
    for each other instead of writing two current plans; SQLite serialises writers by itself.
    """
    from app.services.planning import plan_fleet  # OR-Tools is loaded only where planning happens

    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": PLAN_LOCK_KEY})
    return plan_fleet(session, settings, now=now or utcnow(), horizon_hours=settings.horizon_hours,
                      objective=settings.objective, trigger=trigger)
