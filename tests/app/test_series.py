"""One rule for the value of an hour of a market series, whoever reads it (planner, dashboard, market API, costs)."""

from __future__ import annotations

import math
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


def test_quarter_hour_imports_are_stored_as_such_and_hourly_prices_are_held_over_the_grid(session):
    from app.services import market
    from app.services.series import slot_values

    # ENTSO-E's 15-minute day-ahead products for DE, long format; FI stays hourly (harmonized file)
    quarter = "zone,kind,timestamp,value\n" + "".join(
        f"DE,price,{(T0 + k * timedelta(minutes=15)).isoformat()},{10.0 * k}\n" for k in range(8))
    market.store(session, market.parse_upload(quarter.encode(), zone=None, source="entsoe"))
    hourly = "timestamp_utc,price_eur_mwh\n" + "".join(f"{(T0 + k * H).isoformat()},{50.0 + k}\n" for k in range(2))
    market.store(session, market.parse_upload(hourly.encode(), zone="FI", source="harmonized"))
    session.commit()
    stored = {(r.zone, r.resolution_minutes) for r in session.query(MarketSeries)}
    assert stored == {("DE", 15), ("FI", 60)}
    slots = [T0 + k * timedelta(minutes=15) for k in range(8)]
    assert slot_values(session, "DE", SeriesKind.PRICE, slots) == [10.0 * k for k in range(8)]
    assert slot_values(session, "FI", SeriesKind.PRICE, slots) == [50.0] * 4 + [51.0] * 4
    # past the last hourly point nothing holds the slot
    assert math.isnan(slot_values(session, "FI", SeriesKind.PRICE, [T0 + 2 * H])[0])


def test_a_resolution_is_taken_from_the_line_or_else_from_the_spacing(session):
    from app.services import market

    given = "zone,kind,timestamp,value,resolution_minutes\n" + f"DE,price,{T0.isoformat()},1.0,30\n"
    odd = "zone,kind,timestamp,value\n" + "".join(
        f"FI,price,{(T0 + k * timedelta(minutes=7)).isoformat()},1.0\n" for k in range(3))
    points = market.parse_upload(given.encode(), zone=None, source="x") + market.parse_upload(
        odd.encode(), zone=None, source="x")
    assert [(p.zone, p.minutes) for p in points] == [("DE", 30), ("FI", 60), ("FI", 60), ("FI", 60)]


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
