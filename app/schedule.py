"""Periodic jobs declared as data: name -> task, schedule, options. Celery beat reads ``beat_schedule``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from zoneinfo import ZoneInfo

from celery.schedules import crontab

from app.config import Settings


def _at(hhmm: str, tz: str) -> crontab:
    hour, minute = (int(p) for p in hhmm.split(":"))
    sched = crontab(hour=hour, minute=minute)
    sched.tz = ZoneInfo(tz)  # evaluated in that zone, whatever the deployment's zone is
    return sched


def beat_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    return {
        "nightly-plan": {
            "task": "gridshift.plan.nightly",
            "schedule": _at(settings.nightly_plan_at, settings.timezone),
        },
        "replan": {"task": "gridshift.plan.replan", "schedule": timedelta(seconds=settings.replan_interval_s)},
        "plan-new-work": {"task": "gridshift.plan.new_work", "schedule": timedelta(seconds=60), "options": {"expires": 60}},
        "dispatch-tick": {
            "task": "gridshift.dispatch.tick",
            "schedule": timedelta(seconds=settings.dispatch_interval_s),
            "options": {"expires": settings.dispatch_interval_s},
        },
        "status-sync": {
            "task": "gridshift.dispatch.sync",
            "schedule": timedelta(seconds=settings.sync_interval_s),
            "options": {"expires": settings.sync_interval_s},
        },
        "price-forecast": {
            "task": "gridshift.forecasts.refresh_prices",
            "schedule": _at(settings.price_refresh_at, settings.price_refresh_timezone),
        },
        "carbon-forecast": {"task": "gridshift.forecasts.refresh_hourly", "schedule": crontab(minute=5)},
        "broker-cleanup": {"task": "gridshift.maintenance.cleanup", "schedule": timedelta(hours=1)},
    }
