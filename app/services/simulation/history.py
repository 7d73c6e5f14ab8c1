"""The stored history a replay reads, from the database into plain data (:class:`engine.History`)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from app.config import Settings
from app.enums import JobState, SeriesKind
from app.models import Job, MarketSeries, Region
from app.services.fleet import snapshot
from app.services.job_values import JobValues
from app.services.series import slot_values
from app.services.simulation.engine import History
from optimizer.grid import TimeGrid


def stored_zones(session: Session) -> set[str]:
    """Zones with a stored price series (a scenario may move a region onto one of them)."""
    return set(session.scalars(select(MarketSeries.zone).where(MarketSeries.kind == SeriesKind.PRICE).distinct()))


def read_history(session: Session, settings: Settings, start: datetime, end: datetime, *,
                 zones: Collection[str] = ()) -> History:
    """The fleet as it stands, the jobs released in [start, end) as stored (cancelled ones left out: nobody wanted
    them run), and the realised price and carbon of every region's zone (and of ``zones``) on slots from ``start``
    to ``end`` plus the planning horizon, published values only (``series.slot_values``), NaN where none is stored."""
    grid = TimeGrid.at(start, settings.slot_minutes, (end - start).total_seconds() / 60 + settings.horizon_hours * 60)
    slots = grid.slot_starts()
    regions = list(session.scalars(select(Region).options(selectinload(Region.overrides)).order_by(Region.code)))
    price, carbon = {}, {}
    for zone in sorted({r.zone for r in regions} | set(zones)):
        price[zone] = slot_values(session, zone, SeriesKind.PRICE, slots, forecasts=False, published=True)
        carbon[zone] = slot_values(session, zone, SeriesKind.CARBON_INTENSITY, slots, forecasts=False, published=True)
    horizon_end = end + timedelta(hours=settings.horizon_hours)
    jobs = session.scalars(select(Job).where(Job.release_at >= start, Job.release_at < end,
                                             Job.state != JobState.CANCELLED).order_by(Job.id))
    return History(
        start=grid.start, slot_minutes=grid.slot_minutes, fleet=snapshot(session),
        currencies={r.code: r.currency for r in regions}, price=price, carbon=carbon,
        jobs=[(str(j.id), JobValues.from_row(j)) for j in jobs],
        overrides={r.code: [(o.start_at, o.end_at, o.power_kw) for o in r.overrides
                            if o.end_at > start and o.start_at < horizon_end] for r in regions},
    )
