"""Planning tasks: the nightly plan and the re-plan of not-yet-started work (hourly and on events).

Each plan they make is a recorded plan run (table ``plan_runs``, as ``POST /api/v1/plans`` and ``gridshift plan``
make), so operators see every plan with its trigger, phase and outcome. ``app.services.replan.replan`` serialises
concurrent plan runs.
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
    """Plan the fleet now as a plan run of ``trigger``: queued, executed here, its outcome recorded; commits."""
    run = plan_runs.create(session, cfg, trigger=trigger)
    session.commit()
    done = plan_runs.execute(session, cfg, run.id)
    if done is None:  # not possible for a run this process has just queued, unless it was deleted meanwhile
        return {"trigger": trigger, "run_id": run.id, "state": None}
    summary = done.summary or {}
    return {"trigger": trigger, "run_id": done.id, "state": done.state.value, "plan_id": done.plan_id,
            "status": summary.get("status"), "n_assigned": summary.get("jobs_planned"),
            "n_unplanned": summary.get("jobs_left_out"), "error": done.error}


@shared_task(name="gridshift.plan.nightly", ignore_result=True)
def nightly() -> dict[str, Any]:
    """The nightly plan over the whole horizon."""
    return run_planning(db_session(), settings(), "nightly")


@shared_task(name=REPLAN, ignore_result=True)
def replan(trigger: str = "hourly") -> dict[str, Any]:
    """Re-plan work that has not started (hourly, after a dispatch failure, or on request).

    The hourly one runs only when something it plans on changed (``replan.hourly_trigger``); else it is skipped.
    """
    session, cfg = db_session(), settings()
    if trigger == "hourly":
        why = replan_service.hourly_trigger(session, cfg)
        session.rollback()  # ends the check's read transaction
        if why is None:
            return {"trigger": trigger, "skipped": "nothing new since the current plan"}
    return run_planning(session, cfg, trigger)


@shared_task(name="gridshift.plan.new_work", ignore_result=True)
def new_work() -> dict[str, Any] | None:
    """Plan jobs submitted, or fleet changes made, since the current plan (every minute; nothing when none)."""
    session, cfg = db_session(), settings()
    trigger = replan_service.new_work_trigger(session)
    if trigger is None:
        session.rollback()  # ends the check's read transaction
        return None
    return run_planning(session, cfg, trigger)


@shared_task(name=plan_runs.TASK, ignore_result=True)
def run_plan(run_id: int) -> dict[str, Any] | None:
    """Execute a plan run asked for through the API (``POST /api/v1/plans``); its state is polled there."""
    run = plan_runs.execute(db_session(), settings(), run_id)
    return None if run is None else {"run_id": run.id, "state": run.state.value, "plan_id": run.plan_id}
