"""The forecast refresh tasks run eagerly on the embedded default and their forecasts reach the API."""

from __future__ import annotations

from datetime import timedelta

import pytest

from app.db import utcnow
from app.enums import Role, SeriesKind
from app.services import market
from app.tasks import forecasts as forecast_tasks
from tests.conftest import make_token


@pytest.fixture
def eager(app):
    celery = app.extensions["celery"]
    celery.conf.task_always_eager = True
    celery.conf.task_eager_propagates = True
    yield celery
    celery.conf.task_always_eager = False


def _recent_history(session, zone: str, days: int) -> None:
    now = utcnow().replace(minute=0, second=0, microsecond=0)
    start = (now - timedelta(days=days)).replace(hour=0)
    points = []
    for i in range(days * 24):
        ts = start + timedelta(hours=i)
        if ts >= now:
            break
        base = 300 + 50 * ((ts.hour - 12) / 12) ** 2 + (i % 7)
        points.append(market.Point(zone, SeriesKind.CARBON_INTENSITY, ts, base, "gCO2eq/kWh", "t"))
        points.append(market.Point(zone, SeriesKind.RENEWABLE_SHARE, ts, 0.3 + 0.01 * (i % 5), "fraction", "t"))
        points.append(market.Point(zone, SeriesKind.PRICE, ts, 80 + ts.hour, "EUR/MWh", "t"))
        points.append(market.Point(zone, SeriesKind.LOAD_FORECAST, ts, 40_000 + 100 * ts.hour, "MW", "t"))
        points.append(market.Point(zone, SeriesKind.WIND_SOLAR_FORECAST, ts, 9_000 + 10 * (i % 11), "MW", "t"))
    market.store(session, points)
    session.commit()


def test_hourly_task_refreshes_every_zone_and_the_api_serves_it(app, client, session, eager):
    _recent_history(session, "PL", days=45)
    _recent_history(session, "XX", days=5)  # too little history: fails alone
    with app.app_context():
        summary = forecast_tasks.refresh_hourly.delay().get()
    assert summary["succeeded"] == 2  # PL carbon intensity and renewable share
    assert len(summary["failed"]) == 2 and all(f.startswith("XX/") for f in summary["failed"])
    token = make_token(session, "viewer", Role.MEMBER)
    now = utcnow()
    frm = now.strftime("%Y-%m-%dT%H:00:00Z")
    to = (now + timedelta(hours=24)).strftime("%Y-%m-%dT%H:00:00Z")
    body = client.get(f"/api/v1/forecasts?zone=PL&kind=carbon_intensity&from={frm}&to={to}",
                      headers={"Authorization": f"Bearer {token}"}).json
    assert len(body["points"]) == 24 and body["latest_refresh"]["status"] == "succeeded"
    assert body["unit"] == "gCO2eq/kWh"
    assert all(200 < p["value"] < 500 for p in body["points"])


def test_price_task_reports_failures_without_raising(app, session, eager):
    _recent_history(session, "YY", days=3)
    with app.app_context():
        summary = forecast_tasks.refresh_prices.delay().get()
    assert summary["succeeded"] == 0 and summary["failed"][0].startswith("YY/price")
