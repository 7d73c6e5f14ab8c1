"""Celery attached to the Flask app (Flask's own pattern): tasks run inside the app context."""

from __future__ import annotations

import importlib
from typing import Any

from celery import Celery, Task
from flask import Flask

from app.config import Settings
from app.schedule import beat_schedule


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
        "task_always_eager": False,
    }


def celery_init_app(app: Flask, settings: Settings) -> Celery:
    class FlaskTask(Task):  # type: ignore[misc]
        def __call__(self, *args: object, **kwargs: object) -> object:
            with app.app_context():
                return self.run(*args, **kwargs)

    from celery.signals import after_setup_logger, after_setup_task_logger

    from app import logs

    def _our_format(logger: Any = None, **_kw: Any) -> None:  # Celery set up its handlers: give them our format
        if logger is not None:
            logs.apply_to_handlers(logger, settings)

    after_setup_logger.connect(_our_format, weak=False)
    after_setup_task_logger.connect(_our_format, weak=False)
    celery = Celery(app.name, task_cls=FlaskTask)
    celery.config_from_object(celery_config(settings))
    celery.set_default()
    app.extensions["celery"] = celery
    from app.tasks import TASK_MODULES

    for name in TASK_MODULES:  # declared, not discovered: grep TASK_MODULES to find where tasks come from
        importlib.import_module(name)
    return celery
