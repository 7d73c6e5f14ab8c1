"""The zone's day-ahead generation forecast: imported from CSV, used by carbon-intensity refreshes where it covers the
history, and left out with a note where it covers only part of it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
from sqlalchemy import select

from app.enums import ForecastRunStatus, SeriesKind
from app.models import ForecastRun, MarketSeries
from app.services import forecasts, market

START = datetime(2022, 1, 3, tzinfo=UTC)
DAYS = 60


def _store(session, zone: str, *, generation_from_day: int | None) -> None:
    """History in which carbon intensity follows the share of the generation forecast that wind and solar cover."""
    rng = np.random.default_rng(7)
    points = []
    for i in range(DAYS * 24):
        ts = START + timedelta(hours=i)
        load = 40_000 + 8_000 * np.sin((ts.hour - 6) / 24 * 2 * np.pi) + rng.normal(0, 300)
        wind = 10_000 + 8_000 * np.sin(i / 53) + rng.normal(0, 300)
        generation = load - 5_000 + 4_000 * np.sin(i / 31)  # the rest is imported
        ci = 60 + 300 * max(0.05, 1 - wind / generation)
        points += [
            market.Point(zone, SeriesKind.PRICE, ts, float(0.002 * load - 0.003 * wind), "EUR/MWh", "t"),
            market.Point(zone, SeriesKind.LOAD_FORECAST, ts, float(load), "MW", "t"),
            market.Point(zone, SeriesKind.WIND_SOLAR_FORECAST, ts, float(wind), "MW", "t"),
            market.Point(zone, SeriesKind.CARBON_INTENSITY, ts, float(ci), "gCO2eq/kWh", "t"),
        ]
        if generation_from_day is not None and i >= generation_from_day * 24:
            points.append(market.Point(zone, SeriesKind.GENERATION_FORECAST, ts, float(generation), "MW", "t"))
    market.store(session, points)
    session.commit()


def test_harmonized_csv_imports_the_generation_forecast_and_skips_upstream_zeros(tmp_path, session):
    path = tmp_path / "PL_2022.csv"
    path.write_text(
        "timestamp_utc,price_eur_mwh,generation_forecast_mw\n"
        "2022-01-01T00:00:00+00:00,101.5,18500\n"
        "2022-01-01T01:00:00+00:00,99.0,0\n"  # ENTSO-E's files write 0 for a forecast not published
        "2022-01-01T02:00:00+00:00,97.2,18100.5\n"
    )
    market.store(session, market.read_csv(path))
    session.commit()
    rows = session.execute(
        select(MarketSeries.ts, MarketSeries.value, MarketSeries.unit)
        .where(MarketSeries.zone == "PL", MarketSeries.kind == SeriesKind.GENERATION_FORECAST)
        .order_by(MarketSeries.ts)
    ).all()
    assert [(r.ts.hour, r.value, r.unit) for r in rows] == [(0, 18500.0, "MW"), (2, 18100.5, "MW")]


def test_carbon_refresh_uses_a_stored_generation_forecast(session):
    _store(session, "PL", generation_from_day=0)
    now = START + timedelta(days=DAYS, hours=1)
    hist, future, _ = forecasts.load_frame(session, "PL", SeriesKind.CARBON_INTENSITY, now, 24)
    assert "generation_forecast" in hist.columns and "generation_forecast" in future.columns
    assert np.isfinite(future["generation_forecast"].to_numpy()).all()
    out = forecasts.refresh(session, "PL", SeriesKind.CARBON_INTENSITY, now=now, horizon_hours=24)
    assert out.status == ForecastRunStatus.SUCCEEDED, out.error
    run = session.get(ForecastRun, out.run_id)
    assert all(p.value > 0 for p in run.points) and "generation forecast" not in (run.error or "")


def test_generation_forecast_over_part_of_the_history_is_left_out_and_noted(session):
    _store(session, "ES", generation_from_day=30)
    now = START + timedelta(days=DAYS, hours=1)
    _, future, _ = forecasts.load_frame(session, "ES", SeriesKind.CARBON_INTENSITY, now, 24)
    assert "generation_forecast" not in future.columns
    out = forecasts.refresh(session, "ES", SeriesKind.CARBON_INTENSITY, now=now, horizon_hours=24)
    assert out.status == ForecastRunStatus.SUCCEEDED, out.error
    assert "generation forecast covers 720 of" in session.get(ForecastRun, out.run_id).error


def test_price_forecasts_do_not_take_the_generation_forecast(session):
    _store(session, "FI", generation_from_day=0)
    _, future, _ = forecasts.load_frame(session, "FI", SeriesKind.PRICE, START + timedelta(days=DAYS, hours=1), 24)
    assert list(future.columns) == ["load_forecast", "wind_solar_forecast"]
