"""Any CSV with a time column, a target column and regressor columns.

Recognised without flags:

* the harmonized table (``timestamp_utc`` + ``price_eur_mwh``; see :mod:`forecasting.sources.harmonized`);
* the epftoolbox datasets: naive local timestamps holding exactly 24 values per calendar day (the
  authors already resolved DST). Their wall-clock hours are kept as labels on a UTC index so that every
  day has 24 hours, and ``metadata["wall_clock"]`` is ``True``;
* other files: the time column is the first one whose name contains ``time`` or ``date`` (else the first
  column), the target the first column containing ``price`` (else the first numeric one), regressors
  the numeric columns whose name contains ``forecast``. Timestamps with an offset are converted to UTC;
  naive ones are read as UTC (recorded in the metadata).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from forecasting.errors import ForecastInputError
from forecasting.sources.harmonized import _parse_harmonized


def _pick_time_column(columns: list[str]) -> str:
    for col in columns:
        if "time" in col.lower() or "date" in col.lower():
            return col
    return columns[0]


_OFFSET = r"(?:Z|[+-]\d{2}:?\d{2})$"


def _parse_stamps(column: pd.Series, name: str) -> pd.Series:
    """Timestamps of a time column; unparseable ones become NaT. Offsets that change within the file (a DST
    change written as +01:00 then +02:00) are read as the instants they name, on UTC; a file that mixes
    timestamps with and without an offset is refused at the first one without."""
    try:
        return pd.to_datetime(column, format="mixed", errors="coerce")
    except ValueError:  # pandas refuses differing offsets unless asked to convert them to UTC
        text = column.astype(str).str.strip()
        naive = ~text.str.contains(_OFFSET, regex=True)
        if naive.any():
            row = int(naive.to_numpy().argmax())
            raise ForecastInputError(
                f"{name}: time {column.iloc[row]!r} at line {row + 2} has no UTC offset while others have one"
            ) from None
        return pd.to_datetime(column, format="mixed", errors="coerce", utc=True)


def _parse_series_csv(
    raw: pd.DataFrame,
    *,
    time_col: str | None = None,
    target_col: str | None = None,
    exog_cols: list[str] | None = None,
    name: str = "csv",
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Parse a table into an hourly UTC frame and pick target and regressors.

    Returns
    -------
    (DataFrame, dict)
        Numeric columns on a UTC index; metadata keys ``target``, ``exog``, ``wall_clock``,
        ``timezone`` and ``format``.
    """
    columns = [str(c) for c in raw.columns]
    raw.columns = columns
    if not columns:
        raise ForecastInputError(f"{name}: empty table")
    fmt = "generic"
    if time_col is None and "timestamp_utc" in columns and "price_eur_mwh" in columns:
        frame, meta = _parse_harmonized(raw, name.split("_")[0])
        fmt, wall_clock, tz_note = "harmonized", False, "UTC"
    else:
        time_col = time_col or _pick_time_column(columns)
        if time_col not in columns:
            raise ForecastInputError(f"{name}: time column {time_col!r} not found; columns are {columns}")
        stamps = _parse_stamps(raw[time_col], name)
        bad = stamps.isna()
        if bad.any():
            row = int(bad.to_numpy().argmax()) + 2
            raise ForecastInputError(f"{name}: unparseable time {raw[time_col].iloc[row - 2]!r} at line {row}")
        frame = raw.drop(columns=[time_col]).apply(pd.to_numeric, errors="coerce")
        if stamps.dt.tz is not None:
            index = pd.DatetimeIndex(stamps.dt.tz_convert("UTC"))
            wall_clock, tz_note = False, "UTC (converted from offsets)"
        else:
            per_day = stamps.dt.normalize().value_counts()
            wall_clock = bool(len(per_day)) and bool((per_day == 24).all()) and not stamps.duplicated().any()
            if wall_clock:
                fmt = "epftoolbox" if len(columns) <= 6 else "wall-clock"
            tz_note = "local wall clock, 24 h per day (labels on a UTC index)" if wall_clock else "naive, read as UTC"
            index = pd.DatetimeIndex(stamps).tz_localize("UTC")
        frame.index = pd.DatetimeIndex(index, name="time")
        if frame.index.has_duplicates:
            first = frame.index[frame.index.duplicated()][0]
            raise ForecastInputError(
                f"{name}: duplicated timestamp {first} (a DST repeat?): give timestamps with UTC offsets"
            )
        frame = frame.sort_index()
        meta = {"source": "csv", "rows": len(frame)}
    numeric = [c for c in frame.columns if frame[c].notna().any()]
    if target_col is None:
        priced = [c for c in numeric if "price" in c.lower()]
        if not priced and not numeric:
            raise ForecastInputError(f"{name}: no numeric column to forecast")
        target_col = (priced or numeric)[0]
    if target_col not in frame.columns:
        raise ForecastInputError(f"{name}: target column {target_col!r} not found; columns are {list(frame.columns)}")
    if exog_cols is None:
        exog_cols = [c for c in numeric if c != target_col and "forecast" in c.lower()]
        if fmt == "epftoolbox":
            exog_cols = [c for c in numeric if c != target_col]
    unknown = [c for c in exog_cols if c not in frame.columns]
    if unknown:
        raise ForecastInputError(f"{name}: regressor column(s) {unknown} not found; columns are {list(frame.columns)}")
    if target_col in exog_cols:
        raise ForecastInputError(f"{name}: {target_col!r} is both target and regressor")
    meta.update(
        {
            "format": fmt,
            "target": target_col,
            "exog": list(exog_cols),
            "wall_clock": wall_clock,
            "timezone": tz_note,
        }
    )
    return frame[[target_col, *exog_cols]], meta


def read_series_csv(
    path: str | Path,
    *,
    time_col: str | None = None,
    target_col: str | None = None,
    exog_cols: list[str] | None = None,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Read a CSV (optionally gzip) of hourly data for forecasting.

    Parameters
    ----------
    path : str or Path
        The file.
    time_col, target_col : str, optional
        Column names; detected when omitted (see the module docstring).
    exog_cols : list of str, optional
        Regressor columns; default: numeric columns whose name contains ``forecast``.

    Returns
    -------
    (DataFrame, dict)
        Frame with the target first then the regressors, on an hourly UTC index; metadata.
    """
    path = Path(path)
    if not path.exists():
        raise ForecastInputError(f"{path}: no such file")
    name = path.name.split(".")[0]
    return _parse_series_csv(
        pd.read_csv(path), time_col=time_col, target_col=target_col, exog_cols=exog_cols, name=name
    )
