"""Market series: import CSV files (harmonized wide format or a long format) and query ranges.

Accepted CSV formats (gzip allowed):

* **harmonized** (one zone per file; ../shared/data/harmonized/README.md): ``timestamp_utc`` plus any of
  ``price_eur_mwh``, ``load_mw``, ``load_forecast_mw``, ``solar_forecast_mw``, ``wind_onshore_forecast_mw``,
  ``wind_offshore_forecast_mw``, ``renewable_share``, ``carbon_intensity_g_per_kwh``, ``generation_forecast_mw``.
  Empty cells are gaps, not errors.
* **long**: ``zone,kind,timestamp,value`` and optionally ``unit,source,issued_at``; one point per line; ``kind`` is
  one of price, carbon_intensity, renewable_share, load, load_forecast, wind_solar_forecast, generation_forecast.

Timestamps must carry a UTC offset (``Z`` or ``+01:00``). Blank lines are skipped. A bad line fails the whole
import with its line number; nothing is stored from a failed import.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from app.db import FIRST_YEAR, LAST_YEAR
from app.enums import SERIES_UNITS, SeriesKind
from app.errors import FieldError, ValidationFailed
from app.models import MarketSeries
from app.services.series import HourlyValue, hourly_series

HARMONIZED_COLUMNS: dict[str, SeriesKind] = {
    "price_eur_mwh": SeriesKind.PRICE,
    "load_mw": SeriesKind.LOAD,
    "load_forecast_mw": SeriesKind.LOAD_FORECAST,
    "renewable_share": SeriesKind.RENEWABLE_SHARE,
    "carbon_intensity_g_per_kwh": SeriesKind.CARBON_INTENSITY,
    "generation_forecast_mw": SeriesKind.GENERATION_FORECAST,
}
WIND_SOLAR_COLUMNS = ("solar_forecast_mw", "wind_onshore_forecast_mw", "wind_offshore_forecast_mw")
# upstream (ENTSO-E via the harmonized and deepforkit files) wrote 0 for a missing load or generation forecast
ZERO_IS_MISSING = {SeriesKind.LOAD, SeriesKind.LOAD_FORECAST, SeriesKind.GENERATION_FORECAST}
MAX_ERRORS = 100  # bad lines listed; every one is counted (error_count)
# the sizes of market_series' text columns: a longer value is a bad line, not a database error
TEXT_LIMITS: dict[str, int] = {
    name: MarketSeries.__table__.c[name].type.length for name in ("zone", "unit", "source")  # type: ignore[attr-defined]
}


@dataclass(frozen=True, slots=True)
class Point:
    zone: str
    kind: SeriesKind
    ts: datetime
    value: float
    unit: str
    source: str
    issued_at: datetime | None = None


def _open_text(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return path.open("r", encoding="utf-8", newline="")


def _ts(raw: str) -> datetime:
    ts = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    if ts.tzinfo is None:
        raise ValueError("timestamp has no UTC offset")
    if not FIRST_YEAR <= ts.year <= LAST_YEAR:
        raise ValueError(f"timestamp {raw.strip()!r} is outside the years {FIRST_YEAR} to {LAST_YEAR}")
    return ts


def _text(value: str, name: str) -> str:
    """A zone, unit or source as stored: no NUL character, at most its column's length."""
    if "\x00" in value:
        raise ValueError(f"{name} contains a NUL character")
    if len(value) > TEXT_LIMITS[name]:
        raise ValueError(f"{name} is longer than {TEXT_LIMITS[name]} characters")
    return value


def _num(raw: str) -> float | None:
    raw = raw.strip()
    if raw == "" or raw.lower() == "nan":
        return None
    value = float(raw)
    if math.isinf(value):
        raise ValueError("infinite value")
    return value


def _parse_csv(
    lines: Iterable[str], *, zone: str | None, source: str, start: datetime | None = None, end: datetime | None = None
) -> list[Point]:
    """Parse either format; raises ValidationFailed naming each bad line (the first MAX_ERRORS, all counted)."""
    reader = csv.reader(lines)
    header = [h.strip() for h in next(reader, [])]
    if not header:
        raise ValidationFailed("empty file", [FieldError("line 1", "no header")])
    errors: list[FieldError] = []
    n_bad = 0
    points: list[Point] = []
    for name, given in (("zone", zone), ("source", source)):
        try:
            _text(given or "", name)
        except ValueError as exc:
            raise ValidationFailed(f"bad {name}", [FieldError(name, str(exc))]) from exc
    if "timestamp_utc" in header:
        if not zone:
            raise ValidationFailed("zone needed", [FieldError("zone", "the harmonized format needs a zone")])
        cols = {name: header.index(name) for name in header}
        if not any(c in cols for c in (*HARMONIZED_COLUMNS, *WIND_SOLAR_COLUMNS)):
            raise ValidationFailed("no known columns", [FieldError("line 1", f"none of {sorted(HARMONIZED_COLUMNS)}")])
        for lineno, row in enumerate(reader, start=2):
            if not any(cell.strip() for cell in row):
                continue  # a blank line (a file ending in an empty line, a spreadsheet's empty row)
            try:
                ts = _ts(row[cols["timestamp_utc"]])
                if (start and ts < start) or (end and ts >= end):
                    continue
                for col, kind in HARMONIZED_COLUMNS.items():
                    if col in cols:
                        value = _num(row[cols[col]])
                        if value is not None and not (value == 0 and kind in ZERO_IS_MISSING):
                            points.append(Point(zone, kind, ts, value, SERIES_UNITS[kind], source))
                parts = [_num(row[cols[c]]) for c in WIND_SOLAR_COLUMNS if c in cols]
                if parts and all(p is not None for p in parts):
                    total = sum(p for p in parts if p is not None)
                    points.append(Point(zone, SeriesKind.WIND_SOLAR_FORECAST, ts, total, "MW", source))
            except (ValueError, IndexError) as exc:
                n_bad += 1
                if len(errors) < MAX_ERRORS:
                    errors.append(FieldError(f"line {lineno}", str(exc) or "malformed row"))
    elif {"zone", "kind", "timestamp", "value"} <= set(header):
        idx = {name: header.index(name) for name in header}
        for lineno, row in enumerate(reader, start=2):
            if not any(cell.strip() for cell in row):
                continue  # a blank line (a file ending in an empty line, a spreadsheet's empty row)
            try:
                kind = SeriesKind(row[idx["kind"]].strip())
                ts = _ts(row[idx["timestamp"]])
                value = _num(row[idx["value"]])
                if value is None:
                    raise ValueError("value is empty")
                issued = _ts(row[idx["issued_at"]]) if "issued_at" in idx and row[idx["issued_at"]].strip() else None
                unit = row[idx["unit"]].strip() if "unit" in idx and row[idx["unit"]].strip() else SERIES_UNITS[kind]
                src = row[idx["source"]].strip() if "source" in idx and row[idx["source"]].strip() else source
                z = _text(row[idx["zone"]].strip(), "zone")
                unit, src = _text(unit, "unit"), _text(src, "source")
                if not z:
                    raise ValueError("zone is empty")
                if (start and ts < start) or (end and ts >= end):
                    continue
                points.append(Point(z, kind, ts, value, unit, src, issued))
            except (ValueError, IndexError) as exc:
                n_bad += 1
                if len(errors) < MAX_ERRORS:
                    errors.append(FieldError(f"line {lineno}", str(exc) or "malformed row"))
    else:
        raise ValidationFailed(
            "unknown CSV format",
            [FieldError("line 1", "expected a 'timestamp_utc' column (harmonized) or zone,kind,timestamp,value")],
        )
    if errors:
        raise ValidationFailed(f"{n_bad} bad line(s); nothing was imported", errors, error_count=n_bad)
    return points


def read_csv(path: Path, *, zone: str | None = None, source: str | None = None,
             start: datetime | None = None, end: datetime | None = None) -> list[Point]:
    """Read a CSV file; the zone of a harmonized file defaults to its name up to the first '_'."""
    zone = zone or path.name.split("_")[0].split(".")[0].upper()
    with _open_text(path) as fh:
        return _parse_csv(fh, zone=zone, source=source or path.name.split(".")[0], start=start, end=end)


def parse_upload(data: bytes, *, zone: str | None, source: str, max_bytes: int = 256 * 1024 * 1024) -> list[Point]:
    """Parse an uploaded CSV (gzip allowed); a gzip stream that inflates past ``max_bytes`` is refused."""
    if data[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as gz:
                data = gz.read(max_bytes + 1)
        except (OSError, EOFError, zlib.error) as exc:
            raise ValidationFailed("not a readable gzip file", [FieldError("file", str(exc))]) from exc
        if len(data) > max_bytes:
            raise ValidationFailed("file too large", [FieldError("file", f"inflates past {max_bytes} bytes")])
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValidationFailed("not UTF-8 text", [FieldError("file", str(exc))]) from exc
    return _parse_csv(io.StringIO(text, newline=""), zone=zone, source=source)


def store(session: Session, points: list[Point], *, chunk: int = 5000,
          on_progress: Callable[[int], None] | None = None) -> int:
    """Upsert points in the caller's transaction (later imports of the same point replace its value).

    A replaced row takes the id a new row would have had, so that ids follow import order and :func:`query` can
    let the latest import of an hour win whichever source it came from. One compiled INSERT ... ON CONFLICT run over the rows (executemany) rather than a multi-row VALUES statement
    compiled afresh per chunk: 60,000 points take 1.5 s instead of 16 s on SQLite and 3.7 s instead of 26 s on
    PostgreSQL (measured here, same rows, same result).
    """
    dialect = session.get_bind().dialect.name
    ins = pg_insert if dialect == "postgresql" else sqlite_insert
    stmt = ins(MarketSeries)
    stmt = stmt.on_conflict_do_update(
        index_elements=["zone", "kind", "source", "ts"],
        set_={"value": stmt.excluded.value, "unit": stmt.excluded.unit, "issued_at": stmt.excluded.issued_at,
              "id": stmt.excluded.id},  # the id drawn for the proposed row (nextval on PostgreSQL, rowid on SQLite)
    )
    for i in range(0, len(points), chunk):
        rows = [
            {"zone": p.zone, "kind": p.kind.value, "ts": p.ts, "value": p.value, "unit": p.unit,
             "source": p.source, "issued_at": p.issued_at}
            for p in points[i : i + chunk]
        ]
        session.execute(stmt, rows)
        if on_progress is not None:
            on_progress(len(rows))  # points stored by this chunk (a progress bar's step)
    return len(points)


def query(
    session: Session, zone: str, kind: SeriesKind, start: datetime, end: datetime, *, limit: int = 10_000
) -> list[HourlyValue]:
    """Points of one series in [start, end), oldest first, at most ``limit``; one value per hour, chosen by
    :func:`app.services.series.hourly_series` (a published value over an imported forecast, else the latest import).
    """
    if end <= start:
        raise ValidationFailed("bad range", [FieldError("to", "must be after from")])
    return hourly_series(session, zone, kind, start, end, limit=limit)


def as_series(rows: list[HourlyValue]) -> dict[str, Any]:
    return {"ts": [r.ts for r in rows], "value": [r.value for r in rows]}
