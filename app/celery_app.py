"""Celery attached to the Flask app (Flask's own pattern): tasks run inside the app context."""

from __future__ import annotations

import importlib
import logging
from typing import Any

from celery import Celery, Task
from celery.worker.consumer import Consumer
from celery.worker.request import Request
from flask import Flask

from app.config import Settings
from app.schedule import beat_schedule

log = logging.getLogger(__name__)


# A worker executing a task (acks_late) died when Redis restarted under it (celery 5.7 / kombu 5.7):
# ``Unrecoverable error: AttributeError("'NoneType' object has no attribute 'hostname'")``. On the connection loss
# the consumer's ``collect()`` closes the channel, whose QoS tries to put the unacked message back; Redis is down, so
# that close fails half-way and ``collect()`` then detaches the transport (``transport.client = None``). The
# consumer's ``connection.close()`` closes the same channel again, which needs a new Redis pool, whose parameters are
# read from ``transport.client``: None. When the task finishes later, its ack goes to that dead channel and fails the
# same way. An idle worker has no unacked message, so neither path runs. Both errors escape only because kombu
# expects connection errors there; the two classes below make them what they are (a dead connection), so the worker
# reconnects and keeps serving. The message is not acked: Redis redelivers it after the visibility timeout (or it was
# lost with a Redis that keeps nothing), and the tasks are idempotent (the dispatch tick re-sends from the database).


class BrokerLossConsumer(Consumer):  # type: ignore[misc]
    """Celery's consumer, reconnecting when closing the lost connection trips on the detached transport."""

    def on_connection_error_after_connected(self, exc: Exception) -> None:
        try:
            super().on_connection_error_after_connected(exc)
        except AttributeError:
            log.warning("closing the lost broker connection failed on a detached transport (kombu); reconnecting",
                        exc_info=True)


class BrokerLossRequest(Request):  # type: ignore[misc]
    """Celery's task request; an ack or reject on the channel of a lost connection is logged, not fatal."""

    def __init__(self, *args: Any, connection_errors: tuple[type[BaseException], ...] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, connection_errors=(*(connection_errors or ()), AttributeError), **kwargs)


def celery_config(settings: Settings) -> dict[str, Any]:
    broker = settings.effective_broker_url
    if broker.startswith("sqla+"):
        # The SQLAlchemy transport forwards these options to create_engine; it never restores a crashed
        # worker's message, which is why the dispatch tick also recovers stale claims from the database.
        transport: dict[str, Any] = {}
    else:
        # A crashed worker's unacked message comes back after visibility_timeout, scanned every second.
        transport = {
            "visibility_timeout": settings.visibility_timeout_s,
            "unacked_restore_interval": 1,
            "unacked_restore_throttle": 1,
        }
    return {
        "broker_url": broker,
        "result_backend": settings.result_backend,
        "task_ignore_result": settings.result_backend is None,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "broker_transport_options": transport,
        "broker_connection_retry_on_startup": True,
        "timezone": settings.timezone,
        "enable_utc": True,
        "beat_schedule": beat_schedule(settings),
        "task_default_queue": "gridshift",
        "worker_consumer": "app.celery_app:BrokerLossConsumer",
        "task_always_eager": False,
        # logging stays as app.logs configured it (GRIDSHIFT_LOG_FORMAT / _LEVEL), JSON included
        "worker_hijack_root_logger": False,
    }


def celery_init_app(app: Flask, settings: Settings) -> Celery:
    class FlaskTask(Task):  # type: ignore[misc]
        Request = "app.celery_app:BrokerLossRequest"

        def __call__(self, *args: object, **kwargs: object) -> object:
            with app.app_context():
                return self.run(*args, **kwargs)

    celery = Celery(app.name, task_cls=FlaskTask)
    celery.config_from_object(celery_config(settings))
    celery.set_default()
    app.extensions["celery"] = celery
    from app.tasks import TASK_MODULES

    for name in TASK_MODULES:  # declared, not discovered: grep TASK_MODULES to find where tasks come from
        importlib.import_module(name)
    return celery
