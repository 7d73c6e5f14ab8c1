"""The simulation task: replay a what-if asked for through the API (``POST /api/v1/simulations``)."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from app.extensions import db_session, settings
from app.services.simulation import runs


@shared_task(name=runs.TASK, ignore_result=True)
def run_simulation(sim_id: int) -> dict[str, Any] | None:
    """Replay the queued simulation ``sim_id``; its progress and result are polled through the API."""
    sim = runs.execute(db_session(), settings(), sim_id)
    return None if sim is None else {"simulation_id": sim.id, "state": sim.state.value}
