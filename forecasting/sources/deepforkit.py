"""Deepforkit's ENTSO-E zone files (``shared/data/deepforkit_entsoe/{ZONE}.csv.gz``): day-ahead price, load
and generation forecasts on a CET/CEST wall clock, 24 rows per local day."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from forecasting.errors import ForecastInputError

TIME_COLUMN = "timestamp_cet_local"
CLOCK = "Europe/Berlin"
ZERO_MEANS_MISSING = ("load_forecast_mw", "load_actual_mw", "generation_forecast_mw")


def _parse_deepforkit(raw: pd.DataFrame, zone: str = "") -> tuple[pd.DataFrame, dict[str, Any]]:
    """Turn a raw zone table into an hourly UTC frame.

    The source has 24 rows per local day: the spring-forward row (an hour that does not exist) is
    dropped and the autumn row (the mean of both 02:00 hours) is used for both, as in the harmonized
    table; other missing hours stay missing. Zeros in load and generation forecasts [MW] are missing
    data (upstream wrote 0 for gaps) and become NaN.

    Returns
    -------
    (DataFrame, dict)
        Numeric columns on an hourly UTC index; metadata with zone, rows and zeros set missing.
    """
    name = f"deepforkit {zone}".strip()
    if TIME_COLUMN not in raw.columns:
        raise ForecastInputError(f"{name}: no {TIME_COLUMN!r} column; columns are {list(raw.columns)}")
    try:
        local = pd.DatetimeIndex(pd.to_datetime(raw[TIME_COLUMN], format="ISO8601"))
    except (ValueError, TypeError) as exc:
        raise ForecastInputError(f"{name}: unparseable {TIME_COLUMN}: {exc}") from exc
    frame = raw.drop(columns=[TIME_COLUMN]).apply(pd.to_numeric, errors="coerce")
    zeros = 0
    for col in ZERO_MEANS_MISSING:
        if col in frame.columns:
            is_zero = frame[col] == 0
            zeros += int(is_zero.sum())
            frame.loc[is_zero, col] = float("nan")
    summer = local.tz_localize(CLOCK, ambiguous=np.ones(len(local), dtype=bool), nonexistent="NaT")
    winter = local.tz_localize(CLOCK, ambiguous=np.zeros(len(local), dtype=bool), nonexistent="NaT")
    twice = np.asarray(summer != winter)  # the autumn 02:00 row stands for both 02:00 hours
    frame = pd.concat([frame.set_axis(summer), frame[twice].set_axis(winter[twice])])
    frame = frame[frame.index.notna()]
    frame.index = pd.DatetimeIndex(frame.index).tz_convert("UTC").rename("time")
    frame = frame[~frame.index.duplicated(keep="first")].sort_index()
    if len(frame) == 0:
        raise ForecastInputError(f"{name}: no rows")
    meta = {"source": "deepforkit_entsoe", "zone": zone, "rows": len(frame), "zero_set_missing": zeros,
            "timezone": "UTC"}
    return frame, meta


def read_deepforkit(path: str | Path, zone: str | None = None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Read one ``{ZONE}.csv[.gz]`` of Deepforkit; see :func:`_parse_deepforkit`.

    Parameters
    ----------
    path : str or Path
        File path; gzip is detected from the suffix.
    zone : str, optional
        Zone code; default: the file name before the first ``.``.
    """
    path = Path(path)
    return _parse_deepforkit(pd.read_csv(path), zone or path.name.split(".")[0])
