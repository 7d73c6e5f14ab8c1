"""Forecast refresh tasks: prices daily after the day-ahead auction, carbon and renewables hourly."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from app.enums import SeriesKind
from app.extensions import db_session, settings


def _summary(outcomes: list[Any]) -> dict[str, Any]:
    return {"succeeded": sum(o.error is None for o in outcomes),
            "failed": [f"{o.zone}/{o.kind.value}: {o.error}" for o in outcomes if o.error is not None]}


@shared_task(name="gridshift.forecasts.refresh_prices", ignore_result=True)
def refresh_prices() -> dict[str, Any]:
    """Day-ahead price forecasts of every zone with price history."""
    from app.services.forecasts import refresh_all

    return _summary(refresh_all(db_session(), (SeriesKind.PRICE,), horizon_hours=settings().horizon_hours))


@shared_task(name="gridshift.forecasts.refresh_hourly", ignore_result=True)
def refresh_hourly() -> dict[str, Any]:
    """Carbon-intensity and renewable-share forecasts of every zone with that history."""
    from app.services.forecasts import refresh_all

    kinds = (SeriesKind.CARBON_INTENSITY, SeriesKind.RENEWABLE_SHARE)
    return _summary(refresh_all(db_session(), kinds, horizon_hours=settings().horizon_hours))
