"""Housekeeping for dispatch: the embedded broker's delivered rows and finished local runs' scratch.

Celery's SQLAlchemy transport marks a delivered message ``visible = false`` and never deletes it (nor
restores it if the worker crashed: the dispatch tick recovers such runs from our own database). Rows
delivered more than ``BROKER_KEEP`` ago are therefore dead weight and are deleted. Finished runs of the
local runtime keep their spec, state and log under the cluster's ``state_dir``; those of runs that finished
more than ``RUN_SCRATCH_KEEP`` ago are removed.
"""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta

from sqlalchemy import create_engine, inspect, select, text
from sqlalchemy.orm import Session

from app.config import Settings
from app.enums import TERMINAL_RUN_STATES
from app.models import Cluster, Run
from app.services.dispatch.submit import connector_for

#: Delivered broker messages older than this are deleted.
BROKER_KEEP = timedelta(hours=1)
#: Scratch of local runs finished longer ago than this is deleted.
RUN_SCRATCH_KEEP = timedelta(days=7)


def prune_broker_messages(settings: Settings, *, now: datetime, keep: timedelta = BROKER_KEEP) -> int:
    """Delete delivered rows of the SQLAlchemy transport's ``kombu_message`` table [count deleted].

    Does nothing (returns 0) for any other broker, or before the transport created its tables.
    """
    url = settings.effective_broker_url
    if not url.startswith("sqla+"):
        return 0
    engine = create_engine(url[len("sqla+") :])
    try:
        if not inspect(engine).has_table("kombu_message"):
            return 0
        # kombu stamps rows with naive local time (datetime.now) when delivering them.
        cutoff = (now - keep).astimezone().replace(tzinfo=None)
        with engine.begin() as conn:
            done = conn.execute(
                text("DELETE FROM kombu_message WHERE visible = :no AND timestamp < :cutoff"),
                {"no": False, "cutoff": cutoff},
            )
        return int(done.rowcount or 0)
    finally:
        engine.dispose()


def prune_run_scratch(session: Session, settings: Settings, *, now: datetime, keep: timedelta = RUN_SCRATCH_KEEP) -> int:
    """Remove the run directories of local runs that finished before ``now - keep`` [count removed]."""
    cutoff = now - keep
    rows = session.execute(
        select(Run.run_key, Cluster)
        .join(Cluster, Cluster.id == Run.cluster_id)
        .where(Cluster.kind == "local", Run.state.in_(TERMINAL_RUN_STATES), Run.finished_at < cutoff)
    ).all()
    connectors: dict[int, object] = {}
    removed = 0
    for run_key, cluster in rows:
        connector = connectors.get(cluster.id) or connector_for(cluster, settings)
        connectors[cluster.id] = connector
        run_dir = connector.run_dir(run_key)  # type: ignore[attr-defined]
        if run_dir.is_dir():
            shutil.rmtree(run_dir, ignore_errors=True)
            removed += 1
    session.rollback()
    return removed
