"""Day-by-day models: arrays of (days x 24 hours) built from the history, shared by LEAR and the
machine-learning models that forecast whole days (the epftoolbox setting)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from forecasting.errors import ForecastInputError
from forecasting.models.base import check_inputs, residual_quantiles, whole_days
from forecasting.task import ForecastTask

RESIDUAL_DAYS = 182  # in-sample residuals used for the quantiles [days]


@dataclass(frozen=True, slots=True)
class DailyData:
    """Target and regressors as (days x 24) arrays; the last ``n_future`` target rows are unknown (NaN).

    ``rows`` are the complete training days (all lags available) and ``x`` their design rows.
    """

    target: np.ndarray
    exog: list[np.ndarray]
    dow: np.ndarray
    n_hist: int
    rows: np.ndarray
    x: np.ndarray
    n_continuous: int
    target_lags: tuple[int, ...]
    exog_lags: tuple[int, ...]

    def design(self, rows: np.ndarray) -> np.ndarray:
        """Design rows for days ``rows`` (see :func:`design`)."""
        return design(self.target, self.exog, self.dow, rows, self.target_lags, self.exog_lags)


def design(
    target: np.ndarray, exog: list[np.ndarray], dow: np.ndarray, rows: np.ndarray,
    target_lags: tuple[int, ...], exog_lags: tuple[int, ...],
) -> np.ndarray:
    """Feature rows for days ``rows``: the 24 lagged target values per lag, the 24 lagged values of every
    regressor per lag (lag 0 = the forecast day itself), then 7 weekday dummies."""
    blocks = [target[rows - lag] for lag in target_lags]
    for e in exog:
        blocks.extend(e[rows - lag] for lag in exog_lags)
    blocks.append(np.eye(7)[dow[rows]])
    return np.hstack(blocks)


def build_daily(
    history: pd.DataFrame,
    future: pd.DataFrame,
    task: ForecastTask,
    *,
    target_lags: tuple[int, ...],
    exog_lags: tuple[int, ...],
    min_days: int,
    name: str,
) -> DailyData:
    """Check the inputs and build :class:`DailyData`; too little complete history raises
    :class:`ForecastInputError` naming the target and the forecast day."""
    max_lag = max(target_lags)
    check_inputs(history, future, task, min_hours=24 * (min_days + max_lag))
    hist, n_future_days = whole_days(history, future, name)
    n_hist = len(hist) // 24
    n_all = n_hist + n_future_days
    target = np.full((n_all, 24), np.nan)
    target[:n_hist] = hist[task.target].to_numpy(dtype=float).reshape(n_hist, 24)
    exog = [
        np.concatenate([hist[c].to_numpy(dtype=float), future[c].to_numpy(dtype=float)]).reshape(n_all, 24)
        for c in task.exog
    ]
    days = pd.DatetimeIndex(pd.DatetimeIndex(hist.index[::24]).append(pd.DatetimeIndex(future.index[::24])))
    dow = np.asarray(days.day_of_week)
    n_cont = 24 * (len(target_lags) + len(exog) * len(exog_lags))
    rows = np.arange(max_lag, n_hist)
    x = design(target, exog, dow, rows, target_lags, exog_lags)
    ok = np.isfinite(x).all(axis=1) & np.isfinite(target[rows]).all(axis=1)
    rows, x = rows[ok], x[ok]
    if len(rows) < min_days:
        raise ForecastInputError(
            f"too little history for {name} on {task.target}: {len(rows)} complete days "
            f"before {future.index[0].date()}, at least {min_days} needed"
        )
    return DailyData(target, exog, dow, n_hist, rows, x, n_cont, target_lags, exog_lags)


def forecast_days(
    data: DailyData, predictors: list[Callable[[np.ndarray], np.ndarray]], quantiles: tuple[float, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """Average the predictors day by day (recursively beyond the first day) and derive quantile offsets
    per hour of the day from in-sample residuals of the last :data:`RESIDUAL_DAYS` training days.

    Returns
    -------
    (ndarray, ndarray)
        Point forecasts (n_future_days * 24,) and offsets (n_future_days * 24, n_quantiles).
    """
    target = data.target.copy()
    for d in range(data.n_hist, len(target)):
        x = design(target, data.exog, data.dow, np.array([d]), data.target_lags, data.exog_lags)
        target[d] = np.mean([p(x)[0] for p in predictors], axis=0)
    point = target[data.n_hist :].ravel()
    k = min(RESIDUAL_DAYS, len(data.rows))
    fitted = np.mean([p(data.x[-k:]) for p in predictors], axis=0)
    resid = data.target[data.rows[-k:]] - fitted
    offsets = np.stack([residual_quantiles(resid[:, h], quantiles) for h in range(24)])
    return point, np.tile(offsets, (len(target) - data.n_hist, 1))
