"""Carbon-intensity refreshes: neighbours' day-ahead prices go in where stored, and are left out (noted) where not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from app.enums import ForecastRunStatus, SeriesKind
from app.models import ForecastRun
from app.services import forecasts, market

START = datetime(2022, 1, 3, tzinfo=UTC)
DAYS = 60


def _store(session, zone: str, *, carbon: bool, days: int = DAYS, first_day: int = 0) -> None:
    rng = np.random.default_rng(len(zone))
    points = []
    for i in range(first_day * 24, days * 24):
        ts = START + timedelta(hours=i)
        load = 40_000 + 8_000 * np.sin((ts.hour - 6) / 24 * 2 * np.pi) + rng.normal(0, 300)
        wind = 10_000 + 8_000 * np.sin(i / 53) + rng.normal(0, 300)
        price = 0.002 * load - 0.003 * wind + rng.normal(0, 1)
        points.append(market.Point(zone, SeriesKind.PRICE, ts, float(price), "EUR/MWh", "t"))
        points.append(market.Point(zone, SeriesKind.LOAD_FORECAST, ts, float(load), "MW", "t"))
        points.append(market.Point(zone, SeriesKind.WIND_SOLAR_FORECAST, ts, float(wind), "MW", "t"))
        if carbon:
            ci = 150 * np.exp(2e-5 * (load - 40_000) - 3e-5 * (wind - 10_000))
            points.append(market.Point(zone, SeriesKind.CARBON_INTENSITY, ts, float(ci), "gCO2eq/kWh", "t"))
    market.store(session, points)
    session.commit()


def test_carbon_refresh_uses_stored_neighbour_prices(session):
    _store(session, "CH", carbon=True)
    _store(session, "DE", carbon=False)
    _store(session, "FR", carbon=False)
    now = START + timedelta(days=DAYS, hours=1)
    _, future, _ = forecasts.load_frame(session, "CH", SeriesKind.CARBON_INTENSITY, now, 24)
    assert {"price@DE", "price@FR"} <= set(future.columns) and np.isfinite(future.to_numpy()).all()
    out = forecasts.refresh(session, "CH", SeriesKind.CARBON_INTENSITY, now=now, horizon_hours=24)
    assert out.status == ForecastRunStatus.SUCCEEDED, out.error
    assert out.model == "lear_hgbra_log" and out.points % 24 == 0
    run = session.get(ForecastRun, out.run_id)
    assert all(p.value > 0 for p in run.points)
    assert "left out" not in (run.error or "")


def test_carbon_refresh_without_neighbour_prices_falls_back_and_says_so(session):
    _store(session, "CH", carbon=True)
    _store(session, "FR", carbon=False, first_day=30)  # FR's price covers only the last half of the history
    now = START + timedelta(days=DAYS, hours=1)
    _, future, _ = forecasts.load_frame(session, "CH", SeriesKind.CARBON_INTENSITY, now, 24)
    assert not any(c.startswith("price@") for c in future.columns)
    out = forecasts.refresh(session, "CH", SeriesKind.CARBON_INTENSITY, now=now, horizon_hours=24)
    assert out.status == ForecastRunStatus.SUCCEEDED, out.error
    error = session.get(ForecastRun, out.run_id).error
    assert "neighbour price(s) DE, FR not stored over the history: left out" in error


def test_non_positive_carbon_history_fails_naming_the_series(session):
    _store(session, "PL", carbon=True)
    market.store(session, [market.Point("PL", SeriesKind.CARBON_INTENSITY, START + timedelta(days=40), 0.0,
                                        "gCO2eq/kWh", "t")])
    session.commit()
    out = forecasts.refresh(session, "PL", SeriesKind.CARBON_INTENSITY, now=START + timedelta(days=DAYS, hours=1),
                            horizon_hours=24)
    assert out.status == ForecastRunStatus.FAILED
    assert "carbon_intensity must be > 0" in out.error and "2022-02-12T00:00" in out.error
