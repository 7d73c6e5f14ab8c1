"""Benchmarks: seasonal naive (daily or weekly) and persistence."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from forecasting.models.base import assemble, check_inputs, lagged_values, residual_quantiles
from forecasting.task import ForecastTask

_ERROR_WINDOW_H = 28 * 24  # recent errors of the rule used for the quantiles [h]


@dataclass(frozen=True, slots=True)
class SeasonalNaive:
    """Forecast each hour by the value ``season_hours`` earlier (24: daily, 168: weekly).

    Quantiles are the point forecast plus the empirical quantiles of the same rule's errors over the
    last 28 days of history.
    """

    season_hours: int = 24
    name: str = "naive_daily"

    def predict(self, history: pd.DataFrame, future: pd.DataFrame, task: ForecastTask) -> pd.DataFrame:
        """Forecast ``task.target`` over ``future.index`` [unit of the target]."""
        check_inputs(history, future, task, min_hours=self.season_hours)
        y = history[task.target].astype(float)
        point = lagged_values(y, pd.DatetimeIndex(future.index), self.season_hours)
        recent = y.iloc[-_ERROR_WINDOW_H:]
        errors = recent.to_numpy() - y.shift(freq=pd.Timedelta(hours=self.season_hours)).reindex(recent.index).to_numpy()
        return assemble(point, pd.DatetimeIndex(future.index), task, residual_quantiles(errors, task.quantiles))


@dataclass(frozen=True, slots=True)
class Persistence:
    """Forecast every hour by the last observed value; quantiles from errors at the same lead time."""

    name: str = "persistence"

    def predict(self, history: pd.DataFrame, future: pd.DataFrame, task: ForecastTask) -> pd.DataFrame:
        """Forecast ``task.target`` over ``future.index`` [unit of the target]."""
        check_inputs(history, future, task, min_hours=1)
        y = history[task.target].astype(float).to_numpy()[-_ERROR_WINDOW_H:]
        point = np.full(len(future), y[-1])
        lead = min(len(future), max(len(y) - 1, 1))
        errors = y[lead:] - y[:-lead] if len(y) > lead else np.array([])
        return assemble(point, pd.DatetimeIndex(future.index), task, residual_quantiles(errors, task.quantiles))
