"""Maintenance: delete delivered messages of the embedded SQLAlchemy broker; prune finished local runs' files."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from app.db import utcnow
from app.extensions import db_session, settings
from app.services import dispatch_maintenance


@shared_task(name="gridshift.maintenance.cleanup", ignore_result=True)
def cleanup() -> dict[str, Any]:
    """Hourly: broker rows already delivered, and scratch directories of runs finished long ago."""
    cfg = settings()
    now = utcnow()
    removed_messages = dispatch_maintenance.prune_broker_messages(cfg, now=now)
    removed_dirs = dispatch_maintenance.prune_run_scratch(db_session(), cfg, now=now)
    return {"broker_messages": removed_messages, "run_dirs": removed_dirs}
