"""Checks and documented repairs of hourly input frames.

Policy (the same for every model and source):

* the index must be a tz-aware hourly :class:`~pandas.DatetimeIndex` in UTC, strictly increasing,
  without duplicates (sources resolve DST duplicates before this point);
* a gap of at most ``max_fill_hours`` consecutive missing hours in a column is filled by linear
  interpolation in time and reported; a longer gap raises :class:`ForecastInputError` naming the
  column and the missing time range;
* negative values are kept (negative prices are real);
* a constant target is allowed (naive models handle it), but models that standardise refuse it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from forecasting.errors import ForecastInputError

HOUR = pd.Timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class FillReport:
    """One repaired gap: ``column`` was missing from ``start`` to ``end`` (inclusive, UTC)."""

    column: str
    start: pd.Timestamp
    end: pd.Timestamp
    hours: int


def check_index(index: pd.Index, name: str = "series") -> pd.DatetimeIndex:
    """Raise :class:`ForecastInputError` unless ``index`` is a sorted, unique, tz-aware UTC index."""
    if not isinstance(index, pd.DatetimeIndex):
        raise ForecastInputError(f"{name}: index must be a DatetimeIndex, got {type(index).__name__}")
    if index.tz is None:
        raise ForecastInputError(f"{name}: index must be timezone-aware (UTC); got naive timestamps")
    if str(index.tz) != "UTC":
        raise ForecastInputError(f"{name}: index must be in UTC, got {index.tz}")
    dup = index[index.duplicated()]
    if len(dup):
        raise ForecastInputError(
            f"{name}: {len(dup)} duplicated timestamps, first {dup[0].isoformat()} "
            "(resolve DST duplicates in the source reader)"
        )
    if not index.is_monotonic_increasing:
        raise ForecastInputError(f"{name}: index is not sorted in time")
    return index


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """Start/end positions (inclusive) of runs of True in ``mask``."""
    if not mask.any():
        return []
    padded = np.concatenate([[False], mask, [False]]).astype(np.int8)
    diff = np.diff(padded)
    starts = np.flatnonzero(diff == 1)
    ends = np.flatnonzero(diff == -1) - 1
    return list(zip(starts.tolist(), ends.tolist(), strict=True))


def regularize_hourly(
    frame: pd.DataFrame,
    columns: list[str] | tuple[str, ...],
    *,
    max_fill_hours: int = 3,
    name: str = "series",
    seasonal_columns: tuple[str, ...] | list[str] = (),
    start_after_gaps: bool = False,
) -> tuple[pd.DataFrame, list[FillReport]]:
    """Reindex ``frame`` to a complete hourly UTC grid and fill short gaps.

    Parameters
    ----------
    frame : DataFrame
        Hourly data with a UTC index.
    columns : sequence of str
        Columns that must be complete afterwards; each must exist.
    max_fill_hours : int
        Longest run of missing hours [h] filled by linear interpolation.
    name : str
        Name of the series used in error messages.
    seasonal_columns : sequence of str
        Regressor columns whose longer gaps, and gaps at the end that cannot be interpolated, are filled with the
        value of the same hour one week earlier (a day-ahead forecast that was not published is replaced by last
        week's); reported too.
    start_after_gaps : bool
        A gap that cannot be filled, unless it reaches the last hour, cuts the history instead: the frame starts
        at the first midnight after it (older data is dropped, not repaired).

    Returns
    -------
    (DataFrame, list of FillReport)
        The regular frame (only ``columns``) and one report per filled gap.
    """
    index = check_index(frame.index, name)
    missing_cols = [c for c in columns if c not in frame.columns]
    if missing_cols:
        raise ForecastInputError(
            f"{name}: missing column(s) {missing_cols}; available: {sorted(map(str, frame.columns))}"
        )
    if len(index) == 0:
        raise ForecastInputError(f"{name}: no rows")
    off_grid = index[(index.minute != 0) | (index.second != 0)]
    if len(off_grid):
        raise ForecastInputError(f"{name}: timestamps not on the hour, first {off_grid[0].isoformat()}")
    grid = pd.date_range(index[0], index[-1], freq="h", tz="UTC")
    out = frame.loc[:, list(columns)].astype(float).reindex(grid)
    reports: list[FillReport] = []
    for col in columns:
        values = out[col].to_numpy()
        mask = ~np.isfinite(values)
        runs = _runs(mask)
        for start, end in runs:
            hours = end - start + 1
            at_edge = start == 0 or end == len(values) - 1
            if col in seasonal_columns and start >= 168 and (hours > max_fill_hours or at_edge):
                week_ago = out[col].to_numpy()[start - 168 : end - 168 + 1]
                if np.isfinite(week_ago).all():
                    out.loc[grid[start : end + 1], col] = week_ago
                    reports.append(FillReport(col, grid[start], grid[end], hours))
                    continue
            if start_after_gaps and (hours > max_fill_hours or at_edge) and end < len(values) - 1:
                cut = (grid[end] + HOUR).ceil("D")
                if cut <= grid[-1]:
                    return regularize_hourly(frame.loc[cut:], columns, max_fill_hours=max_fill_hours, name=name,
                                             seasonal_columns=seasonal_columns, start_after_gaps=True)
            if hours > max_fill_hours or at_edge:
                where = "at the edge of the data" if at_edge else f"longer than {max_fill_hours} h"
                raise ForecastInputError(
                    f"{name}: column {col!r} is missing {hours} h from {grid[start].isoformat()} "
                    f"to {grid[end].isoformat()} ({where}; not filled)"
                )
            reports.append(FillReport(col, grid[start], grid[end], hours))
        if runs:
            out[col] = out[col].interpolate(method="linear", limit_area="inside", limit=max_fill_hours)
    return out, reports


def daily_matrix(values: pd.Series) -> tuple[np.ndarray, pd.DatetimeIndex]:
    """Reshape an hourly series that starts at midnight into a (days, 24) array.

    Returns
    -------
    (ndarray, DatetimeIndex)
        Values per day and hour, and the midnight of each day.
    """
    index = check_index(values.index, str(values.name))
    if len(index) % 24 or (len(index) and index[0].hour != 0):
        raise ForecastInputError(
            f"{values.name}: hourly data must cover whole days starting at 00:00 "
            f"(got {len(index)} rows starting {index[0] if len(index) else '-'})"
        )
    days = index[::24]
    return values.to_numpy(dtype=float).reshape(-1, 24), days


def issue_frame(
    columns: dict[str, pd.Series], now: pd.Timestamp, horizon_hours: int, name: str = "series"
) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """History and forecast-hour regressors of a forecast issued at ``now``, from what is known then.

    The service's forecast refresh and the closed-loop replay both call this (one rule for what a forecast sees).

    Parameters
    ----------
    columns : dict of str to Series
        The target first, then its regressors, each an hourly UTC series of the values published by ``now``.
    now : Timestamp
        Issue time (aware UTC).
    horizon_hours : int
        Forecast at least this many hours past ``now`` [h].
    name : str
        Used in error messages.

    Returns
    -------
    (history, future, filled_hours)
        ``history``: whole UTC days up to the last complete day of the target, gaps repaired by
        :func:`regularize_hourly`, starting after the last gap it cannot repair (an old hole in a regressor
        shortens the calibration window instead of failing the forecast); ``future``: the regressors of whole days from there until ``horizon_hours`` past
        ``now``, an hour not published yet taking the value of the same hour one week earlier (documented fill);
        ``filled_hours``: how many regressor values were filled so.
    """
    names = list(columns)
    target = columns[names[0]]
    if target.empty:
        raise ForecastInputError(f"{name}: no history")
    first = (target.index[-1] + HOUR).floor("D")  # history stops at the last complete UTC day
    stop = max(pd.Timestamp(now).ceil("h") + pd.Timedelta(hours=horizon_hours), first + pd.Timedelta(days=1))
    n_days = int(np.ceil((stop - first) / pd.Timedelta(days=1)))
    future_index = pd.date_range(first, periods=24 * n_days, freq="h", tz="UTC")
    frame = pd.DataFrame(columns).sort_index()
    hist = frame.loc[: first - HOUR]
    hist = hist.loc[hist.index[0].ceil("D"):] if len(hist) else hist
    hist, _ = regularize_hourly(hist, names, name=name, seasonal_columns=names[1:], start_after_gaps=True)
    future = frame.reindex(future_index)[names[1:]]
    filled = int(future.isna().to_numpy().sum())
    known = pd.concat([hist[names[1:]], future])
    for col in future.columns:  # unpublished regressors: same hour one week earlier, in time order
        values = known[col]
        for ts in future_index[future[col].isna().to_numpy()]:
            values.at[ts] = values.get(ts - pd.Timedelta(hours=168), np.nan)
        future[col] = values.reindex(future_index)
    if not np.isfinite(future.to_numpy(dtype=float)).all():
        raise ForecastInputError(f"{name}: regressors missing for the forecast hours and the week before")
    return hist, future, filled
