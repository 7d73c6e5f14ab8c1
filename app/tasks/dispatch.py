"""Dispatch tasks: the tick (claim due work, recover stale claims), one submit per run, the status sync.

``acks_late`` with ``reject_on_worker_lost`` (app/celery_app.py) re-queues a task whose worker died; the
services make every task safe to run twice. Retry countdowns stay below the broker's visibility timeout so a
retried message is never delivered twice by Redis.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import current_app, shared_task

from app.db import utcnow
from app.extensions import db_session, settings
from app.services.dispatch import claim as dispatch_claim
from app.services.dispatch import submit as dispatch_submit
from app.services.dispatch import sync as dispatch_sync
from app.tasks import REPLAN
from connectors.base import ConnectorError

log = logging.getLogger(__name__)

#: Submit attempts after the first one before :func:`app.services.dispatch.submit.give_up` [count].
SUBMIT_MAX_RETRIES = 5


def retry_countdown_s(retries: int, visibility_timeout_s: float) -> float:
    """Exponential backoff 2, 4, 8, ... s, capped at 30 s and at half the broker's visibility timeout."""
    return float(min(2.0 ** (retries + 1), 30.0, max(1.0, visibility_timeout_s / 2)))


def _request_replan(reason: str) -> None:
    """Send the re-plan task by its name (the planning tasks' module is not imported here)."""
    current_app.signature(REPLAN, kwargs={"trigger": reason}).delay()


@shared_task(name="gridshift.dispatch.tick", ignore_result=True)
def tick() -> dict[str, Any]:
    """Claim due assignments and stale claims, then send one submit task per run."""
    result = dispatch_claim.tick(db_session(), settings(), now=utcnow(), worker=dispatch_submit.worker_id())
    for run_id in result.claimed:
        submit.delay(run_id, fresh=True)
    for run_id in result.recovered:
        submit.delay(run_id)
    if result.failed_jobs:
        _request_replan("dispatch-failure")
    return {"claimed": list(result.claimed), "recovered": list(result.recovered), "failed_jobs": list(result.failed_jobs)}


@shared_task(name="gridshift.dispatch.submit", bind=True, ignore_result=True, max_retries=SUBMIT_MAX_RETRIES)
def submit(self: Any, run_id: int, fresh: bool = False) -> dict[str, Any]:
    """Submit one claimed run; retry with backoff while the runtime fails retryably, then give up safely."""
    session, cfg = db_session(), settings()
    redelivered = bool((self.request.delivery_info or {}).get("redelivered"))
    first = fresh and self.request.retries == 0 and not redelivered
    try:
        outcome = dispatch_submit.submit_run(session, cfg, run_id, now=utcnow(), worker=dispatch_submit.worker_id(), fresh=first)
    except ConnectorError as exc:
        log.warning("run %s: runtime refused the submission (attempt %s): %s", run_id, self.request.retries + 1, exc,
                    extra={"run_id": run_id, "task_id": self.request.id})
        if self.request.retries < self.max_retries:
            raise self.retry(countdown=retry_countdown_s(self.request.retries, cfg.visibility_timeout_s), exc=exc) from exc
        outcome = dispatch_submit.give_up(session, cfg, run_id, str(exc), now=utcnow())
    log.info("run %s: %s%s", run_id, outcome.state, " (adopted)" if outcome.adopted else "",
             extra={"run_id": run_id, "task_id": self.request.id})
    if outcome.replan:
        _request_replan("dispatch-failure")
    return {"run_id": run_id, "state": outcome.state, "adopted": outcome.adopted}


@shared_task(name="gridshift.dispatch.sync", ignore_result=True)
def sync() -> dict[str, Any]:
    """Poll the runtimes of active runs; trigger a re-plan when a job went back to pending."""
    result = dispatch_sync.sync(db_session(), settings(), now=utcnow())
    if result.lost or result.failed:
        log.warning("sync: runs lost %s, failed %s", list(result.lost)[:50], list(result.failed)[:50])
    if result.replan:
        _request_replan("run-failure")
    return {
        "polled": result.polled, "started": len(result.started), "succeeded": len(result.succeeded),
        "failed": len(result.failed), "cancelled": len(result.cancelled), "lost": len(result.lost),
        "unreachable": len(result.unreachable),
    }  # fmt: skip
