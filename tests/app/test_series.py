"""One rule for the value of an hour of a market series, whoever reads it (planner, dashboard, market API, costs)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from app.enums import ForecastRunStatus, SeriesKind
from app.models import ForecastPoint, ForecastRun, MarketSeries
from app.services.series import hourly_series

T0 = datetime(2030, 6, 1, tzinfo=UTC)
H = timedelta(hours=1)


def _row(ts: datetime, value: float, source: str, issued_at: datetime | None = None) -> MarketSeries:
    return MarketSeries(zone="DE", kind=SeriesKind.PRICE, ts=ts, value=value, unit="EUR/MWh", source=source,
                        issued_at=issued_at)


def test_a_published_value_beats_every_forecast_of_its_hour_and_the_latest_import_wins_among_equals(session):
    session.add_all([
        _row(T0, 50.0, "entsoe"),                       # published
        _row(T0, 99.0, "vendor", issued_at=T0 - 24 * H),  # a forecast of the same hour, imported later
        _row(T0 + H, 70.0, "vendor", issued_at=T0 - 24 * H),
        _row(T0 + H, 72.0, "meteo", issued_at=T0 - 12 * H),  # a later forecast import replaces the earlier one
        _row(T0 + 2 * H, 60.0, "upload"),
        _row(T0 + 2 * H, 61.0, "entsoe"),                # two sources of a published hour: the later import wins
    ])
    run = ForecastRun(zone="DE", kind=SeriesKind.PRICE, model="naive_daily", issued_at=T0 - 6 * H,
                      status=ForecastRunStatus.SUCCEEDED)
    run.points = [ForecastPoint(ts=T0 + t * H, value=80.0 + t) for t in range(4)]
    session.add(run)
    session.commit()

    imported_only = hourly_series(session, "DE", SeriesKind.PRICE, T0, T0 + 4 * H)
    assert [(p.ts, p.value, p.published) for p in imported_only] == [
        (T0, 50.0, True), (T0 + H, 72.0, False), (T0 + 2 * H, 61.0, True)]

    with_runs = hourly_series(session, "DE", SeriesKind.PRICE, T0, T0 + 4 * H, forecasts=True)
    # our own forecast run beats an imported forecast, never a published value
    assert [(p.value, p.source) for p in with_runs] == [
        (50.0, "entsoe"), (81.0, "forecast:naive_daily"), (61.0, "entsoe"), (83.0, "forecast:naive_daily")]

    assert [p.ts for p in hourly_series(session, "DE", SeriesKind.PRICE, T0, T0 + 4 * H, limit=2)] == [T0, T0 + H]


def test_a_limited_read_pages_by_hour_and_gives_what_an_unlimited_one_gives(session, monkeypatch):
    """Pages of a few rows split hours (several rows each) and one hour fills a page; the rule still holds."""
    import app.services.series as series

    monkeypatch.setattr(series, "_PAGE_ROWS", 3)
    rows = [_row(T0 + h * H, float(h), "entsoe") for h in range(10)]
    rows += [_row(T0 + h * H, 100.0 + h, "vendor", issued_at=T0 - 24 * H) for h in (1, 2, 5)]
    rows += [_row(T0 + 7 * H, 200.0 + k, f"src{k}") for k in range(5)]  # one hour holds more rows than a page
    session.add_all(rows)
    session.commit()

    whole = hourly_series(session, "DE", SeriesKind.PRICE, T0, T0 + 10 * H)
    for limit in (1, 2, 6, 8, 10, 20):
        limited = hourly_series(session, "DE", SeriesKind.PRICE, T0, T0 + 10 * H, limit=limit)
        assert [(p.ts, p.value, p.source) for p in limited] == [(p.ts, p.value, p.source) for p in whole[:limit]]
    assert whole[7].value == 204.0 and whole[1].value == 1.0
