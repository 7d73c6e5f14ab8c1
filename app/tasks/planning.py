"""Planning tasks: the nightly plan and the re-plan of not-yet-started work (hourly and on events).

Both call ``app.services.planning.plan_fleet``. On PostgreSQL a transaction-level advisory lock makes
concurrent plan runs (a failure-triggered re-plan meeting the hourly one) wait for each other instead of
writing two current plans; SQLite serialises writers by itself.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task
from sqlalchemy import text
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import utcnow
from app.extensions import db_session, settings

#: Key of the PostgreSQL advisory lock held while a plan is computed and stored.
PLAN_LOCK_KEY = 0x67726964  # "grid"


def run_planning(session: Session, cfg: Settings, trigger: str) -> dict[str, Any]:
    """Plan the fleet now with the configured horizon and objective; commits."""
    from app.services.planning import plan_fleet

    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": PLAN_LOCK_KEY})
    record = plan_fleet(
        session, cfg, now=utcnow(), horizon_hours=cfg.horizon_hours, objective=cfg.objective, trigger=trigger
    )
    session.commit()
    summary: dict[str, Any] = {"trigger": trigger}
    for name in ("plan_id", "id", "status", "n_assigned", "n_unplanned"):
        value = getattr(record, name, None)
        if value is not None:
            summary[name] = value if isinstance(value, int | float | str) else str(value)
    return summary


@shared_task(name="gridshift.plan.nightly", ignore_result=True)
def nightly() -> dict[str, Any]:
    """The nightly plan over the whole horizon."""
    return run_planning(db_session(), settings(), "nightly")


@shared_task(name="gridshift.plan.replan", ignore_result=True)
def replan(trigger: str = "hourly") -> dict[str, Any]:
    """Re-plan work that has not started (hourly, or after a failure, new forecasts or capacity changes)."""
    return run_planning(db_session(), settings(), trigger)
