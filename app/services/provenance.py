"""Where the market data comes from: real, replayed from an earlier year, or synthetic (the demo's seeded scenario).

The demo stores its series with source ``synthetic`` or ``harmonized-replay-<year>`` (app.services.demo); any view
that shows prices or carbon intensity, and every report, says so when the series it reads are such data, so that a
December price of 700 EUR/MWh replayed from 2022 is not taken for today's market.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import distinct, select
from sqlalchemy.orm import Session

from app.models import MarketSeries

_REPLAY = re.compile(r"replay-(\d{4})")


@dataclass(frozen=True, slots=True)
class Provenance:
    """``kind``: real, replayed, synthetic or mixed; ``notice``: one sentence for a page or a report (None: real)."""

    kind: str
    notice: str | None
    sources: tuple[str, ...]


def classify(sources: list[str]) -> Provenance:
    """The provenance of market series stored under ``sources``."""
    synthetic = sorted(s for s in sources if s == "synthetic" or s.startswith("synthetic"))
    years = sorted({m.group(1) for s in sources if (m := _REPLAY.search(s))})
    parts = []
    if years:
        parts.append(f"real {', '.join(years)} market data replayed onto the present dates")
    if synthetic:
        parts.append("SYNTHETIC prices and carbon intensity (a seeded demo scenario)")
    if not parts:
        return Provenance("real", None, tuple(sorted(sources)))
    kind = "mixed" if years and synthetic else "replayed" if years else "synthetic"
    notice = "Not live market data: " + "; ".join(parts) + f" (sources: {', '.join(sorted(sources))})."
    return Provenance(kind, notice, tuple(sorted(sources)))


def market_provenance(session: Session, start: datetime | None = None, end: datetime | None = None) -> Provenance:
    """The provenance of the market series stored in [start, end) (all of them without a range)."""
    q = select(distinct(MarketSeries.source))
    if start is not None:
        q = q.where(MarketSeries.ts >= start)
    if end is not None:
        q = q.where(MarketSeries.ts < end)
    return classify([s for s in session.scalars(q) if s])
