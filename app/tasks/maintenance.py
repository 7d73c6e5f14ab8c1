"""Maintenance: delete delivered messages of the embedded SQLAlchemy broker; prune finished local runs' files and
the rows of superseded plans and the finished plan runs past their retention periods."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from app.db import utcnow
from app.extensions import db_session, settings
from app.services import plan_history, plan_runs
from app.services.dispatch import maintenance as dispatch_maintenance


@shared_task(name="gridshift.maintenance.cleanup", ignore_result=True)
def cleanup() -> dict[str, Any]:
    """Hourly: broker rows already delivered, scratch directories of runs finished long ago, old plans' rows, old
    plan runs."""
    cfg = settings()
    now = utcnow()
    removed_messages = dispatch_maintenance.prune_broker_messages(cfg, now=now)
    session = db_session()
    removed_dirs = dispatch_maintenance.prune_run_scratch(session, cfg, now=now)
    pruned = plan_history.prune(session, cfg, now=now)
    plan_runs_pruned = plan_runs.prune(session, cfg, now=now)
    session.commit()
    return {"broker_messages": removed_messages, "run_dirs": removed_dirs, "plans_pruned": pruned,
            "plan_runs_pruned": plan_runs_pruned}
