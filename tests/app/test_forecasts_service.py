from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from app.enums import ForecastRunStatus, Role, SeriesKind
from app.models import ForecastRun
from app.services import forecasts, market
from tests.conftest import make_token

START = datetime(2022, 1, 3, tzinfo=UTC)
DAYS = 60


def _store(session, zone: str = "DE", days: int = DAYS, drop_regressors_after: datetime | None = None) -> None:
    rng = np.random.default_rng(1)
    points = []
    for i in range(days * 24):
        ts = START + timedelta(hours=i)
        load = 40_000 + 8_000 * np.sin((ts.hour - 6) / 24 * 2 * np.pi) + rng.normal(0, 300)
        wind = 10_000 + 8_000 * np.sin(i / 53) + rng.normal(0, 300)
        price = 0.002 * load - 0.003 * wind + rng.normal(0, 1)
        points.append(market.Point(zone, SeriesKind.PRICE, ts, float(price), "EUR/MWh", "t"))
        if drop_regressors_after is None or ts < drop_regressors_after:
            points.append(market.Point(zone, SeriesKind.LOAD_FORECAST, ts, float(load), "MW", "t"))
            points.append(market.Point(zone, SeriesKind.WIND_SOLAR_FORECAST, ts, float(wind), "MW", "t"))
    market.store(session, points)
    session.commit()


def test_refresh_stores_a_complete_run_with_quantiles(session):
    _store(session, drop_regressors_after=START + timedelta(days=DAYS - 1))
    now = START + timedelta(days=DAYS, hours=13)
    out = forecasts.refresh(session, "DE", SeriesKind.PRICE, now=now, horizon_hours=24)
    assert out.status == ForecastRunStatus.SUCCEEDED, out.error
    run = session.get(ForecastRun, out.run_id)
    first = run.points[0].ts
    assert first == START + timedelta(days=DAYS)  # right after the last known price
    assert run.points[-1].ts >= now + timedelta(hours=23)
    assert len(run.points) % 24 == 0 and run.model == "lear"
    q = run.points[0].quantiles
    assert set(q) == {"0.1", "0.5", "0.9"} and q["0.1"] <= q["0.9"]
    assert "filled from the week before" in run.error  # regressors of the last day were never published


def test_failed_refresh_keeps_the_last_good_forecast(session, client):
    _store(session)
    now = START + timedelta(days=DAYS, hours=1)
    good = forecasts.refresh(session, "DE", SeriesKind.PRICE, now=now, horizon_hours=24)
    bad = forecasts.refresh(session, "DE", SeriesKind.PRICE, now=now + timedelta(hours=1), model="lear_nn",
                            horizon_hours=24 * 8)  # a week of unpublished regressors, then more: cannot fill
    assert good.status == ForecastRunStatus.SUCCEEDED
    assert bad.status == ForecastRunStatus.FAILED and bad.error
    assert session.get(ForecastRun, bad.run_id).points == []  # nothing half-written
    token = make_token(session, "viewer", Role.MEMBER)
    frm = (START + timedelta(days=DAYS)).isoformat().replace("+00:00", "Z")
    to = (START + timedelta(days=DAYS + 1)).isoformat().replace("+00:00", "Z")
    resp = client.get(f"/api/v1/forecasts?zone=DE&kind=price&from={frm}&to={to}",
                      headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == 200, resp.json
    body = resp.json
    assert len(body["points"]) == 24 and body["model"] == "lear"
    assert body["latest_refresh"]["status"] == "failed" and body["latest_refresh"]["error"]
    assert body["latest_refresh"]["in_force_run_id"] == good.run_id
    status = client.get("/api/v1/forecasts/status", headers={"Authorization": f"Bearer {token}"}).json
    assert [(i["zone"], i["kind"], i["status"]) for i in status["items"]] == [("DE", "price", "failed")]


def test_the_price_ensemble_forecasts_through_the_service(session):
    _store(session, days=70)  # the network needs 56 complete days (+ 7 of lags)
    now = START + timedelta(days=70, hours=1)
    out = forecasts.refresh(session, "DE", SeriesKind.PRICE, now=now, horizon_hours=24, model="price_ens")
    assert out.status == ForecastRunStatus.SUCCEEDED, out.error
    run = session.get(ForecastRun, out.run_id)
    values = np.array([p.value for p in run.points])
    assert run.model == "price_ens" and len(values) % 24 == 0 and np.isfinite(values).all()
    # the synthetic price is 0.002 load - 0.003 wind + noise: about 50 EUR/MWh, never beyond 100
    assert 0 < values.mean() < 100 and all(p.quantiles["0.1"] <= p.quantiles["0.9"] for p in run.points)


def test_too_little_history_fails_with_the_series_named(session):
    _store(session, zone="FR", days=10)
    out = forecasts.refresh(session, "FR", SeriesKind.PRICE, now=START + timedelta(days=10), horizon_hours=24)
    assert out.status == ForecastRunStatus.FAILED and "too little history" in out.error


def test_selection_picks_the_model(session):
    forecasts.select_model(session, "DE", SeriesKind.PRICE, "naive_daily", {"naive_daily": {"mae": 1.0}})
    session.commit()
    assert forecasts.selected_model(session, "DE", SeriesKind.PRICE) == "naive_daily"
    assert forecasts.selected_model(session, "DE", SeriesKind.CARBON_INTENSITY) == "lear_hgbra_log"
    with pytest.raises(KeyError, match="valid"):
        forecasts.select_model(session, "DE", SeriesKind.PRICE, "arima", {})


def test_api_validates_the_query(session, client):
    token = make_token(session, "viewer", Role.MEMBER)
    resp = client.get("/api/v1/forecasts?zone=DE&kind=bogus&from=2022-01-01T00:00:00Z&to=2022-01-02T00:00:00Z",
                      headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == 422


def test_a_model_that_crashes_fails_its_run_and_the_other_zones_still_refresh(session, monkeypatch):
    _store(session, zone="AT")
    _store(session, zone="DE")
    real = forecasts.get_model

    class Crashing:
        def predict(self, *_args):
            raise RuntimeError("Error during optimization")  # what Prophet raises when Stan gives up

    monkeypatch.setattr(forecasts, "get_model", lambda name: Crashing() if name == "prophet" else real(name))
    monkeypatch.setattr(forecasts, "selected_model", lambda _s, zone, _k: "prophet" if zone == "AT" else "naive_daily")
    out = forecasts.refresh_all(session, (SeriesKind.PRICE,), now=START + timedelta(days=DAYS, hours=1),
                                horizon_hours=24)
    assert [(o.zone, o.status) for o in out] == [("AT", ForecastRunStatus.FAILED), ("DE", ForecastRunStatus.SUCCEEDED)]
    failed = session.get(ForecastRun, out[0].run_id)
    assert failed.status is ForecastRunStatus.FAILED and "Error during optimization" in failed.error
    assert failed.finished_at is not None and failed.points == []
