"""Planning tasks: the nightly plan and the re-plan of not-yet-started work (hourly and on events).

Both call ``app.services.replan.replan``, which serialises concurrent plan runs.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task
from sqlalchemy.orm import Session

from app.config import Settings
from app.extensions import db_session, settings
from app.services import plan_runs
from app.services import replan as replan_service
from app.tasks import REPLAN


def run_planning(session: Session, cfg: Settings, trigger: str) -> dict[str, Any]:
    """Plan the fleet now (app.services.replan holds the lock); commits."""
    record = replan_service.replan(session, cfg, trigger)
    session.commit()
    return {"trigger": trigger, "plan_id": record.plan_id, "status": str(record.status),
            "n_assigned": record.n_assigned, "n_unplanned": record.n_unplanned}


@shared_task(name="gridshift.plan.nightly", ignore_result=True)
def nightly() -> dict[str, Any]:
    """The nightly plan over the whole horizon."""
    return run_planning(db_session(), settings(), "nightly")


@shared_task(name=REPLAN, ignore_result=True)
def replan(trigger: str = "hourly") -> dict[str, Any]:
    """Re-plan work that has not started (hourly, after a dispatch failure, or on request)."""
    return run_planning(db_session(), settings(), trigger)


@shared_task(name="gridshift.plan.new_work", ignore_result=True)
def new_work() -> dict[str, Any] | None:
    """Plan jobs submitted, or fleet changes made, since the current plan (every minute; nothing when none)."""
    session, cfg = db_session(), settings()
    record = replan_service.replan_new_work(session, cfg)
    if record is None:
        return None
    session.commit()
    return {"trigger": record.trigger, "plan_id": record.plan_id, "n_assigned": record.n_assigned}


@shared_task(name=plan_runs.TASK, ignore_result=True)
def run_plan(run_id: int) -> dict[str, Any] | None:
    """Execute a plan run asked for through the API (``POST /api/v1/plans``); its state is polled there."""
    run = plan_runs.execute(db_session(), settings(), run_id)
    return None if run is None else {"run_id": run.id, "state": run.state.value, "plan_id": run.plan_id}
