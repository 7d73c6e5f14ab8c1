"""The one model signature and helpers shared by models.

Every model is an object with ``name`` and ``predict(history, future, task) -> DataFrame``:

* ``history``: hourly frame on a UTC index, ending just before the first forecast hour, holding
  ``task.target`` and the ``task.exog`` columns;
* ``future``: frame indexed by the forecast hours, holding the ``task.exog`` columns (values known at
  issue time, e.g. day-ahead load forecasts);
* result: frame indexed like ``future`` with the columns of ``task.columns`` (``forecast`` and one
  column per quantile), in the target's unit.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import pandas as pd

from forecasting.errors import ForecastInputError
from forecasting.frame import HOUR, check_index
from forecasting.task import ForecastTask, quantile_column


class Model(Protocol):
    """A forecasting model; see the module docstring for the contract."""

    @property
    def name(self) -> str:
        """Display name."""
        ...

    def predict(self, history: pd.DataFrame, future: pd.DataFrame, task: ForecastTask) -> pd.DataFrame:
        """Forecast ``task.target`` over ``future.index``."""
        ...


def check_inputs(history: pd.DataFrame, future: pd.DataFrame, task: ForecastTask, min_hours: int) -> None:
    """Validate the model inputs; raise :class:`ForecastInputError` with the series and range at fault."""
    check_index(history.index, f"history of {task.target}")
    check_index(future.index, "forecast hours")
    if len(future) == 0:
        raise ForecastInputError("no forecast hours requested")
    if task.target not in history.columns:
        raise ForecastInputError(f"history has no column {task.target!r}")
    for col in task.exog:
        if col not in history.columns:
            raise ForecastInputError(f"regressor {col!r} missing from the history")
        if col not in future.columns:
            raise ForecastInputError(
                f"regressor {col!r} missing for the forecast hours "
                f"{future.index[0].isoformat()}..{future.index[-1].isoformat()}"
            )
        bad = future.index[~np.isfinite(future[col].to_numpy(dtype=float))]
        if len(bad):
            raise ForecastInputError(
                f"regressor {col!r} has no value for {len(bad)} forecast hour(s) "
                f"{bad[0].isoformat()}..{bad[-1].isoformat()}"
            )
    if len(history) and future.index[0] <= history.index[-1]:
        raise ForecastInputError("forecast hours must start after the history ends")
    if len(history) < min_hours:
        span = f"{history.index[0].isoformat()}..{history.index[-1].isoformat()}" if len(history) else "empty"
        raise ForecastInputError(
            f"too little history for {task.target}: {len(history)} h ({span}), at least {min_hours} h needed"
        )


def lagged_values(history: pd.Series, hours: pd.DatetimeIndex, lag_hours: int) -> np.ndarray:
    """Values of ``history`` ``lag_hours`` before each of ``hours``, recursively using the lag itself when
    the lagged hour lies in the future (e.g. hour 30 of a 48 h horizon with a 24 h lag)."""
    out = np.empty(len(hours))
    lag = pd.Timedelta(hours=lag_hours)
    last = history.index[-1]
    for i, t in enumerate(hours):
        src = t - lag
        while src > last:
            src -= lag
        out[i] = history.get(src, np.nan)
    return out


def residual_quantiles(residuals: np.ndarray, quantiles: tuple[float, ...]) -> np.ndarray:
    """Empirical quantiles of forecast errors (``actual - forecast``), NaNs ignored; zeros when empty."""
    residuals = np.asarray(residuals, dtype=float)
    residuals = residuals[np.isfinite(residuals)]
    if residuals.size == 0:
        return np.zeros(len(quantiles))
    return np.quantile(residuals, quantiles)


def assemble(
    point: np.ndarray, index: pd.DatetimeIndex, task: ForecastTask, offsets: np.ndarray
) -> pd.DataFrame:
    """Build the result frame from point forecasts and quantile offsets.

    ``offsets`` has shape (n_quantiles,) or (len(index), n_quantiles); quantile columns are
    ``point + offset``, sorted along the quantile axis so they never cross.
    """
    point = np.asarray(point, dtype=float)
    offsets = np.asarray(offsets, dtype=float)
    if offsets.ndim == 1:
        offsets = np.broadcast_to(offsets, (len(point), len(task.quantiles)))
    quants = np.sort(point[:, None] + offsets, axis=1)
    data = {"forecast": point}
    for j, q in enumerate(task.quantiles):
        data[quantile_column(q)] = quants[:, j]
    return pd.DataFrame(data, index=index)


def whole_days(history: pd.DataFrame, future: pd.DataFrame, what: str) -> tuple[pd.DataFrame, int]:
    """Trim ``history`` to whole days and check ``future`` starts at midnight right after it.

    Returns the trimmed history and the number of forecast days.
    """
    start = future.index[0]
    if start.hour != 0 or len(future) % 24:
        raise ForecastInputError(
            f"{what} forecasts whole days: forecast hours must start at 00:00 and cover 24 h per day "
            f"(got {len(future)} h from {start.isoformat()})"
        )
    if history.index[-1] != start - HOUR:
        raise ForecastInputError(
            f"{what}: history must end at {(start - HOUR).isoformat()}, ends at {history.index[-1].isoformat()}"
        )
    first_midnight = history.index[0].normalize()
    if history.index[0] != first_midnight:
        first_midnight += pd.Timedelta(days=1)
    trimmed = history.loc[first_midnight:]
    expected = pd.date_range(first_midnight, start - HOUR, freq="h", tz="UTC")
    if len(trimmed) != len(expected):
        raise ForecastInputError(f"{what}: history has gaps; regularise it first (forecasting.frame.regularize_hourly)")
    return trimmed, len(future) // 24
