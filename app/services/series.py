"""Market series as every service reads them: one value per point in time, chosen by one rule.

A point holds its value over ``[ts, ts + minutes)``: an hour for hourly data, a quarter-hour for the 15-minute products
the day-ahead auction trades since October 2025 (``market_series.resolution_minutes``). :func:`slot_values` gives the
value of each slot of a planning grid from the point that holds the slot's start, so an hourly price is held over the
hour's quarter-hours and a quarter-hourly one is used as it is.

A zone's series of one kind can hold several values for the same hour: the published (realised) value, forecasts of
it imported into ``market_series`` (rows with ``issued_at``), the points of our own forecast runs, and the same hour
again from a later import. :func:`hourly_series` picks one per hour, the same way for the planner, the dashboard,
the forecast refresh, the market API and the cost of finished runs:

1. a published value beats every forecast of the hour: once the day-ahead auction has published tomorrow's prices,
   a forecast issued the day before still covers those hours and must not win over them;
2. among forecasts, the point of a succeeded forecast run (asked for with ``forecasts=True``) beats a forecast
   imported into ``market_series``, and a later run beats an earlier one;
3. among values of the same rank, the latest import wins (several sources of the same hours);
4. where points of different resolutions hold a slot's start, the higher rank wins, then the finer resolution.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from app.enums import SERIES_UNITS, ForecastRunStatus, SeriesKind
from app.models import ForecastPoint, ForecastRun, MarketSeries

# ranks of rule 1 and 2: a higher rank wins the hour, an equal one replaces it (rule 3, rows come oldest first)
IMPORTED_FORECAST, RUN_FORECAST, PUBLISHED = 0, 1, 2


@dataclass(frozen=True, slots=True)
class HourlyValue:
    """The value of one hour of a series [its unit], where it came from, and when it was forecast (None: published)."""

    ts: datetime
    value: float
    unit: str
    source: str  # the import's source, or ``forecast:<model>`` for a point of our own forecast run
    issued_at: datetime | None = None
    minutes: int = 60  # how long the value holds from ts [min]

    @property
    def published(self) -> bool:
        """True for a published (realised) value, False for a forecast of it."""
        return self.issued_at is None


_PAGE_ROWS = 5000


def _market_rows(
    session: Session, zone: str, kind: SeriesKind, start: datetime, end: datetime, hours: int | None,
) -> Iterator[Row[datetime, float, str, str, datetime | None, int]]:
    """The ``market_series`` rows of (zone, kind) in [start, end) by hour; with ``hours``, those of the first ones.

    A limited read pages by hour (keyset on ``ts``, ``_PAGE_ROWS`` rows a query) and stops after its last hour, so
    the market API does not read a whole range for a few hours. Plain queries rather than a server-side cursor:
    API reads run in autocommit on PostgreSQL, where a cursor cannot be declared outside a transaction.
    """
    ms = MarketSeries
    query = (select(ms.ts, ms.value, ms.unit, ms.source, ms.issued_at, ms.resolution_minutes)
             .where(ms.zone == zone, ms.kind == kind, ms.ts < end).order_by(ms.ts, ms.id))
    if hours is None:
        yield from session.execute(query.where(ms.ts >= start))
        return
    seen: set[datetime] = set()
    after: datetime | None = None  # every row up to this hour has been read
    while True:
        page = session.execute(
            query.where(ms.ts >= start if after is None else ms.ts > after).limit(_PAGE_ROWS)).all()
        if not page:
            return
        last = page[-1].ts
        full = len(page) == _PAGE_ROWS
        if full and page[0].ts == last:  # one hour fills the page: read that hour whole
            page = session.execute(query.where(ms.ts == last)).all()
        elif full:  # the last hour may go on in the next page: leave it to that one
            page = [row for row in page if row.ts != last]
        for row in page:
            if row.ts not in seen:
                if len(seen) == hours:
                    return  # rows come by hour: every later one lies past the limit
                seen.add(row.ts)
            yield row
        if not full:
            return
        after = page[-1].ts


def hourly_series(
    session: Session, zone: str, kind: SeriesKind, start: datetime, end: datetime, *, forecasts: bool = False,
    limit: int | None = None,
) -> list[HourlyValue]:
    """One value per point time of (``zone``, ``kind``) in [start, end) (hours, or quarter-hours where the series
    is quarter-hourly), oldest first, by the module's rule.

    Parameters
    ----------
    forecasts : bool
        Also consider the points of succeeded forecast runs (the planner's inputs); otherwise only
        ``market_series`` is read (published values and imported forecasts).
    limit : int or None
        At most this many hours, the first ones; applied after the choice, so that two sources of the same hours do
        not halve the range returned.
    """
    best = _choose(session, zone, kind, start, end, forecasts=forecasts, limit=limit)
    out = [best[ts][1] for ts in sorted(best)]
    return out if limit is None else out[:limit]


def slot_values(
    session: Session, zone: str, kind: SeriesKind, slot_starts: list[datetime], *, forecasts: bool = True,
    published: bool = False,
) -> list[float]:
    """The value of each slot [the series' unit]: the point holding the slot's start, NaN where none does
    (``published``: realised values only, NaN where only a forecast holds the slot).

    An hourly point holds every slot of its hour; a quarter-hourly one its quarter-hour. Where several hold a slot,
    the rule of the module decides (rank, then the finer resolution).
    """
    if not slot_starts:
        return []
    best = _choose(session, zone, kind, slot_starts[0] - _REACH, slot_starts[-1] + timedelta(minutes=1),
                   forecasts=forecasts)
    return values_at(best, slot_starts, published=published)


_REACH = timedelta(days=1)  # no point holds longer than a day


def choose_points(candidates: Iterable[tuple[int, HourlyValue]]) -> dict[datetime, tuple[int, HourlyValue]]:
    """One value per point time by rules 1-3 of the module: ``candidates`` are ``(rank, point)`` pairs, oldest
    import first; a higher rank wins the time, an equal one replaces it."""
    best: dict[datetime, tuple[int, HourlyValue]] = {}
    for rank, point in candidates:
        held = best.get(point.ts)
        if held is None or rank >= held[0]:
            best[point.ts] = (rank, point)
    return best


def values_at(
    best: dict[datetime, tuple[int, HourlyValue]], slot_starts: list[datetime], *, published: bool = False
) -> list[float]:
    """The value of each slot from the chosen points (:func:`choose_points`): the point holding the slot's start,
    the higher rank then the finer resolution where several do, NaN where none does (``published``: where no
    realised value does)."""
    stamps = sorted(best)
    out: list[float] = []
    for t in slot_starts:
        pick: tuple[int, int, HourlyValue] | None = None
        k = bisect.bisect_right(stamps, t)
        while k > 0 and stamps[k - 1] > t - _REACH:
            k -= 1
            rank, point = best[stamps[k]]
            if t < point.ts + timedelta(minutes=point.minutes) and (pick is None or (rank, -point.minutes) > pick[:2]):
                pick = (rank, -point.minutes, point)
        if pick is not None and published and not pick[2].published:
            pick = None
        out.append(float(pick[2].value) if pick is not None else math.nan)
    return out


def _choose(
    session: Session, zone: str, kind: SeriesKind, start: datetime, end: datetime, *, forecasts: bool,
    limit: int | None = None,
) -> dict[datetime, tuple[int, HourlyValue]]:
    """One value per point time in [start, end) with its rank, by rules 1-3 of the module."""
    return choose_points(_candidates(session, zone, kind, start, end, forecasts=forecasts, limit=limit))


def _candidates(
    session: Session, zone: str, kind: SeriesKind, start: datetime, end: datetime, *, forecasts: bool,
    limit: int | None,
) -> Iterator[tuple[int, HourlyValue]]:
    """Every stored value of (zone, kind) in [start, end) with its rank: imports oldest first, then forecast runs."""
    rows = _market_rows(session, zone, kind, start, end, limit if not forecasts else None)
    for ts, value, unit, source, issued_at, minutes in rows:
        rank = PUBLISHED if issued_at is None else IMPORTED_FORECAST
        yield rank, HourlyValue(ts, float(value), unit, source, issued_at, int(minutes or 60))
    if forecasts:
        unit = SERIES_UNITS.get(kind, "")
        for ts, value, model, issued_at in session.execute(
            select(ForecastPoint.ts, ForecastPoint.value, ForecastRun.model, ForecastRun.issued_at)
            .join(ForecastRun, ForecastRun.id == ForecastPoint.run_id)
            .where(ForecastRun.zone == zone, ForecastRun.kind == kind, ForecastRun.status == ForecastRunStatus.SUCCEEDED,
                   ForecastPoint.ts >= start, ForecastPoint.ts < end)
            .order_by(ForecastRun.issued_at, ForecastRun.id)
        ):
            yield RUN_FORECAST, HourlyValue(ts, float(value), unit, f"forecast:{model}", issued_at)


def hour_weights(started: datetime, finished: datetime) -> dict[datetime, float]:
    """Share of an interval's time in each UTC hour it touches [fraction, sums to 1]."""
    first = started.replace(minute=0, second=0, microsecond=0)
    total = (finished - started).total_seconds()
    if total <= 0:
        return {first: 1.0}
    out: dict[datetime, float] = {}
    hour = first
    while hour < finished:
        nxt = hour + timedelta(hours=1)
        overlap = (min(nxt, finished) - max(hour, started)).total_seconds()
        if overlap > 0:
            out[hour] = overlap / total
        hour = nxt
    return out


def priced(values: dict[datetime, float], started: datetime, finished: datetime, energy_kwh: float) -> float | None:
    """``energy_kwh`` drawn evenly from ``started`` to ``finished`` times the hourly ``values`` [per MWh, or g/kWh],
    divided by 1000 (cost in the series' currency, or kg). An hour without a value takes the mean of those with one;
    None when no hour of the interval has a value."""
    weights = hour_weights(started, finished)
    known = [values[h] for h in weights if h in values]
    if not known:
        return None
    fallback = sum(known) / len(known)
    return energy_kwh * sum(w * values.get(h, fallback) for h, w in weights.items()) / 1000.0
