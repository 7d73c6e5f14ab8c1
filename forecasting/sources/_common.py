"""Helpers shared by the feed parsers."""

from __future__ import annotations

import pandas as pd

from forecasting.errors import ForecastInputError


def to_hourly_utc(frame: pd.DataFrame, name: str) -> pd.DataFrame:
    """Convert to a UTC index and average sub-hourly values to hourly means (hour-start labels)."""
    if not isinstance(frame.index, pd.DatetimeIndex) or frame.index.tz is None:
        raise ForecastInputError(f"{name}: timestamps must carry a UTC offset")
    frame = frame.tz_convert("UTC").sort_index()
    if frame.index.has_duplicates:
        frame = frame.groupby(level=0).mean()
    if len(frame) > 1 and (frame.index.to_series().diff().dropna() < pd.Timedelta(hours=1)).any():
        frame = frame.resample("h").mean()
    frame.index.name = "time"
    return frame


def require_keys(payload: object, keys: tuple[str, ...], name: str) -> dict:
    """Raise a clear error unless ``payload`` is a JSON object holding ``keys``."""
    if not isinstance(payload, dict):
        raise ForecastInputError(f"{name}: expected a JSON object, got {type(payload).__name__}")
    missing = [k for k in keys if k not in payload]
    if missing:
        raise ForecastInputError(f"{name}: response lacks {missing}; keys are {sorted(payload)}")
    return payload
