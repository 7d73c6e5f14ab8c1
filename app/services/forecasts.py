"""Forecast refreshes: load history from ``market_series``, forecast with the selected model, store a run.

Per (zone, kind) the model is the one recorded in ``model_selections`` by the latest backtest, else the
default of the kind (:data:`DEFAULT_MODELS`). A refresh forecasts whole UTC days from the first hour
after the last known value of the series until ``horizon_hours`` past now. Regressors (day-ahead load and
wind/solar forecasts, and the day-ahead price for carbon and renewable share) come from ``market_series``
too; for forecast hours where a regressor is not published yet, the value of the same hour one week
earlier is used (documented fill; the run records how many hours were filled).

Carbon intensity of BE, CH, ES and PL also takes the day-ahead prices of interconnected zones
(``forecasting.sources.harmonized.CARBON_NEIGHBOURS``; a flow-traced intensity follows imports, and those
prices are published with the zone's own the day before). A neighbour whose price is not stored over the
whole history window is left out and the run's note says so (documented fallback: the model runs on the
regressors it has). Carbon intensity also takes the zone's day-ahead generation forecast
(``generation_forecast``, ENTSO-E's day-ahead aggregated generation) where it is stored over the history, as the
benchmark's best figures do; a zone without it runs on the other regressors (the benchmark's
``--no-generation-forecast`` figures), and one with it stored over part of the history only says so in the run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import pandas as pd
from sqlalchemy import select
from sqlalchemy.orm import Session
from threadpoolctl import threadpool_limits

from app.db import utcnow
from app.enums import ForecastRunStatus, SeriesKind
from app.errors import FieldError, ValidationFailed
from app.models import ForecastPoint, ForecastRun, MarketSeries, ModelSelection
from app.services.series import hourly_series
from forecasting.errors import ForecastInputError
from forecasting.frame import issue_frame
from forecasting.models import get_model
from forecasting.sources.harmonized import CARBON_NEIGHBOURS
from forecasting.task import ForecastTask

log = logging.getLogger(__name__)

REGRESSORS: dict[SeriesKind, tuple[SeriesKind, ...]] = {
    SeriesKind.PRICE: (SeriesKind.LOAD_FORECAST, SeriesKind.WIND_SOLAR_FORECAST),
    SeriesKind.CARBON_INTENSITY: (SeriesKind.LOAD_FORECAST, SeriesKind.WIND_SOLAR_FORECAST, SeriesKind.PRICE),
    SeriesKind.RENEWABLE_SHARE: (SeriesKind.LOAD_FORECAST, SeriesKind.WIND_SOLAR_FORECAST, SeriesKind.PRICE),
}
NEIGHBOUR_COVERAGE = 0.98  # least share of the target's history hours a neighbour's price must cover
DEFAULT_MODELS: dict[SeriesKind, str] = {
    SeriesKind.PRICE: "lear",
    SeriesKind.CARBON_INTENSITY: "lear_hgbra_log",  # lear_log, hgbr_log and hgba_log averaged (geometric mean)
    SeriesKind.RENEWABLE_SHARE: "lear_short",
}
HISTORY_DAYS: dict[SeriesKind, int] = {  # longest calibration window + lags [days]
    SeriesKind.PRICE: 1456 + 8,
    SeriesKind.CARBON_INTENSITY: 364 + 8,
    SeriesKind.RENEWABLE_SHARE: 364 + 8,
}
FORECAST_KINDS = tuple(REGRESSORS)
HOUR = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class RefreshOutcome:
    """Summary of one (zone, kind) refresh."""

    zone: str
    kind: SeriesKind
    run_id: int
    status: ForecastRunStatus
    model: str
    points: int
    error: str | None


def selected_model(session: Session, zone: str, kind: SeriesKind) -> str:
    """Model name picked by the latest backtest of (zone, kind), else the kind's default."""
    row = session.scalar(select(ModelSelection).where(ModelSelection.zone == zone, ModelSelection.kind == kind))
    return row.model if row is not None else DEFAULT_MODELS[kind]


def select_model(session: Session, zone: str, kind: SeriesKind, model: str, metrics: dict) -> ModelSelection:
    """Record ``model`` as the choice for (zone, kind) with its backtest metrics (caller commits)."""
    get_model(model)  # unknown names fail here, listing the valid ones
    row = session.scalar(select(ModelSelection).where(ModelSelection.zone == zone, ModelSelection.kind == kind))
    if row is None:
        row = ModelSelection(zone=zone, kind=kind, model=model, metrics=metrics)
        session.add(row)
    row.model, row.metrics, row.backtested_at = model, metrics, utcnow()
    return row


def _series(session: Session, zone: str, kind: SeriesKind, start: datetime, end: datetime) -> pd.Series:
    points = hourly_series(session, zone, kind, start, end)  # one value per hour, published ones first
    if not points:
        return pd.Series(dtype=float, name=kind.value)
    ts = pd.DatetimeIndex([p.ts for p in points]).tz_convert("UTC")
    series = pd.Series([p.value for p in points], index=ts, dtype=float, name=kind.value)
    if any(p.minutes < 60 for p in points):  # quarter-hourly products: the forecast models work on hours
        series = series.resample("h").mean().dropna().rename(kind.value)
    return series


def _covers(series: pd.Series, target: pd.Series) -> int | None:
    """Hours of ``target``'s history that ``series`` covers, or None when that is enough to use it as a regressor
    (:data:`NEIGHBOUR_COVERAGE` of the hours, from the first one on)."""
    covered = int(series.index.isin(target.index).sum()) if len(series) else 0
    if covered >= NEIGHBOUR_COVERAGE * len(target) and series.index[0] <= target.index[0]:
        return None
    return covered


def neighbour_prices(session: Session, zone: str, kind: SeriesKind, start: datetime, end: datetime,
                     target: pd.Series) -> tuple[dict[str, pd.Series], list[str]]:
    """Day-ahead prices of the interconnected zones (carbon intensity only), keyed ``price@ZONE``.

    Returns the series used and the neighbours left out because their price does not cover
    :data:`NEIGHBOUR_COVERAGE` of the target's history hours.
    """
    if kind != SeriesKind.CARBON_INTENSITY:
        return {}, []
    used, left_out = {}, []
    for other in CARBON_NEIGHBOURS.get(zone, ()):
        price = _series(session, other, SeriesKind.PRICE, start, end)
        if _covers(price, target) is None:
            used[f"{SeriesKind.PRICE.value}@{other}"] = price
        else:
            left_out.append(other)
    return used, left_out


def generation_forecast(session: Session, zone: str, kind: SeriesKind, start: datetime, end: datetime,
                        target: pd.Series) -> tuple[dict[str, pd.Series], str | None]:
    """The zone's day-ahead generation forecast as a regressor (carbon intensity only), and a note when left out.

    Used when it covers :data:`NEIGHBOUR_COVERAGE` of the target's history hours from the first one; a zone that
    stores none is not noted (most do not), one that stores it over part of the history is.
    """
    if kind != SeriesKind.CARBON_INTENSITY:
        return {}, None
    gen = _series(session, zone, SeriesKind.GENERATION_FORECAST, start, end)
    if gen.empty:
        return {}, None
    covered = _covers(gen, target)
    if covered is None:
        return {SeriesKind.GENERATION_FORECAST.value: gen}, None
    return {}, f"generation forecast covers {covered} of {len(target)} history hours: left out"


def load_frame(session: Session, zone: str, kind: SeriesKind, now: datetime, horizon_hours: int) -> tuple[
    pd.DataFrame, pd.DataFrame, int
]:
    """History (whole UTC days up to the last known value) and regressors of the forecast hours.

    Returns
    -------
    (history, future, filled_hours)
    """
    hist, future, filled, _ = _load_frame(session, zone, kind, now, horizon_hours)
    return hist, future, filled


def _load_frame(session: Session, zone: str, kind: SeriesKind, now: datetime, horizon_hours: int) -> tuple[
    pd.DataFrame, pd.DataFrame, int, list[str]
]:
    """``load_frame`` and the run's notes on regressors left out."""
    start = now - timedelta(days=HISTORY_DAYS[kind])
    end = now + timedelta(hours=horizon_hours + 48)
    target = _series(session, zone, kind, start, now + timedelta(days=2))
    if target.empty:
        raise ForecastInputError(f"{zone} {kind.value}: no history in market_series since {start:%Y-%m-%d}")
    cols = {kind.value: target}
    for reg in REGRESSORS[kind]:
        cols[reg.value] = _series(session, zone, reg, start, end)
    extra, left_out = neighbour_prices(session, zone, kind, start, end, target)
    gen, gen_note = generation_forecast(session, zone, kind, start, end, target)
    extra.update(gen)
    cols.update(extra)
    notes = [f"neighbour price(s) {', '.join(left_out)} not stored over the history: left out"] if left_out else []
    notes += [gen_note] if gen_note else []
    hist, future, filled = issue_frame(cols, pd.Timestamp(now), horizon_hours, name=f"{zone} {kind.value}")
    return hist, future, filled, notes


def refresh(
    session: Session, zone: str, kind: SeriesKind, *, now: datetime | None = None, horizon_hours: int = 48,
    model: str | None = None,
) -> RefreshOutcome:
    """Forecast one (zone, kind) and store the run; commits. Failures are stored, logged and returned, whatever
    the model raised (a run left ``running`` would stay so, and ``refresh_all`` would skip the zones after it)."""
    if kind not in REGRESSORS:
        raise ValidationFailed("no forecast for this kind",
                               [FieldError("kind", f"one of {[k.value for k in FORECAST_KINDS]}")])
    now = now or utcnow()
    name = model or selected_model(session, zone, kind)
    run = ForecastRun(zone=zone, kind=kind, model=name, issued_at=now, status=ForecastRunStatus.RUNNING)
    session.add(run)
    session.commit()
    try:
        history, future, filled, frame_notes = _load_frame(session, zone, kind, now, horizon_hours)
        task = ForecastTask(kind.value, tuple(future.columns))
        # The models multiply matrices of a few hundred columns: BLAS threads only contend with each other and
        # with the other processes (a 7 x 3 refresh on 2 busy cores took 67 s with them, see README).
        with threadpool_limits(limits=1):
            result = get_model(name).predict(history, future, task)
        if not np.isfinite(result.to_numpy()).all():
            raise ForecastInputError(f"{zone} {kind.value}: model {name} produced non-finite values")
    except Exception as exc:  # any model error fails this run only: the last good one stays, other zones go on
        expected = isinstance(exc, ForecastInputError | KeyError | ValueError)
        error = str(exc) if expected else f"{type(exc).__name__}: {exc}"
        session.rollback()
        failed = session.get(ForecastRun, run.id)
        assert failed is not None
        failed.status, failed.error, failed.finished_at = ForecastRunStatus.FAILED, error, utcnow()
        session.commit()
        log.warning("forecast refresh failed for %s %s with %s: %s", zone, kind.value, name, error,
                    exc_info=not expected)
        return RefreshOutcome(zone, kind, failed.id, failed.status, name, 0, error)
    qcols = [c for c in result.columns if c != "forecast"]
    for ts, row in zip(pd.DatetimeIndex(result.index), result.to_dict("records"), strict=True):
        quantiles = {f"{int(c[1:]) / 100:g}": float(row[c]) for c in qcols}
        run.points.append(ForecastPoint(ts=ts.to_pydatetime(), value=float(row["forecast"]), quantiles=quantiles))
    run.status, run.finished_at = ForecastRunStatus.SUCCEEDED, utcnow()
    notes = [f"{filled} regressor hours filled from the week before"] if filled else []
    notes += frame_notes
    run.error = "; ".join(notes) or None
    session.commit()
    log.info("forecast %s %s with %s: %d points", zone, kind.value, name, len(result))
    return RefreshOutcome(zone, kind, run.id, run.status, name, len(result), None)


def zones_with(session: Session, kind: SeriesKind) -> list[str]:
    """Zones that have history of ``kind``."""
    return sorted(session.scalars(select(MarketSeries.zone).where(MarketSeries.kind == kind).distinct()))


def refresh_all(session: Session, kinds: tuple[SeriesKind, ...], *, now: datetime | None = None,
                horizon_hours: int = 48) -> list[RefreshOutcome]:
    """Refresh every zone of every kind; one failure does not stop the others."""
    now = now or utcnow()
    return [refresh(session, zone, kind, now=now, horizon_hours=horizon_hours)
            for kind in kinds for zone in zones_with(session, kind)]


def latest_run(session: Session, zone: str, kind: SeriesKind, status: ForecastRunStatus | None = None
               ) -> ForecastRun | None:
    """The most recent run of (zone, kind), optionally only with ``status``."""
    q = select(ForecastRun).where(ForecastRun.zone == zone, ForecastRun.kind == kind)
    if status is not None:
        q = q.where(ForecastRun.status == status)
    return session.scalar(q.order_by(ForecastRun.issued_at.desc(), ForecastRun.id.desc()).limit(1))


def forecast_points(session: Session, zone: str, kind: SeriesKind, start: datetime, end: datetime
                    ) -> tuple[ForecastRun | None, list[ForecastPoint]]:
    """Points in [start, end) of the latest succeeded run (the forecast in force)."""
    if end <= start:
        raise ValidationFailed("bad range", [FieldError("to", "must be after from")])
    run = latest_run(session, zone, kind, ForecastRunStatus.SUCCEEDED)
    if run is None:
        return None, []
    points = session.scalars(
        select(ForecastPoint).where(ForecastPoint.run_id == run.id, ForecastPoint.ts >= start, ForecastPoint.ts < end)
        .order_by(ForecastPoint.ts)
    ).all()
    return run, list(points)


def run_status(session: Session, zone: str, kind: SeriesKind) -> dict | None:
    """The latest run of (zone, kind), any status, and the issue time of the forecast in force."""
    last = latest_run(session, zone, kind)
    if last is None:
        return None
    good = latest_run(session, zone, kind, ForecastRunStatus.SUCCEEDED)
    return {"zone": zone, "kind": kind.value, "model": last.model, "status": last.status.value,
            "issued_at": last.issued_at, "error": last.error,
            "in_force_issued_at": good.issued_at if good else None, "in_force_run_id": good.id if good else None}


def status_overview(session: Session) -> list[dict]:
    """:func:`run_status` of every (zone, kind) that has runs."""
    pairs = session.execute(select(ForecastRun.zone, ForecastRun.kind).distinct()).all()
    rows = (run_status(session, zone, kind) for zone, kind in sorted(pairs, key=lambda p: (p[0], p[1].value)))
    return [r for r in rows if r is not None]
