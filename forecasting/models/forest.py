"""Extremely randomised trees on the hours of the LEAR inputs: the same features and target as
:class:`forecasting.models.boost.Boosted`, another tree learner.

Boosting adds shallow trees, each fitted to what the previous ones left; a forest averages deep trees, each grown
with random split thresholds on a random third of the features (P. Geurts, D. Ernst, L. Wehenkel, "Extremely
randomized trees", Machine Learning 63 (2006) 3-42; scikit-learn's ``ExtraTreesRegressor``). Its errors are
meant to differ from the boosted trees' where they are averaged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sklearn.ensemble import ExtraTreesRegressor

from forecasting.models.base import assemble
from forecasting.models.boost import fit_hourly
from forecasting.models.daily import DailyData, build_daily, forecast_days
from forecasting.task import ForecastTask


@dataclass(frozen=True, slots=True)
class Forest:
    """Extremely randomised trees over the hours of the LEAR inputs; see the module docstring.

    Parameters
    ----------
    window_days : int
        Calibration window [days] (shortened to the available history).
    trees, min_samples_leaf, max_features :
        ``ExtraTreesRegressor`` settings (one process: the bench and the refresh run days in parallel).
    seed : int
        Random state of the split draws (a fit depends only on its data and the seed).
    differences : bool
        Day-to-day changes as features (see :func:`forecasting.models.boost.hourly_features`).
    """

    window_days: int = 364
    trees: int = 100
    min_samples_leaf: int = 20
    max_features: float = 1 / 3
    seed: int = 0
    differences: bool = True
    target_lags: tuple[int, ...] = (1, 2, 3, 7)
    exog_lags: tuple[int, ...] = (0, 1, 7)
    min_days: int = 28
    name: str = "forest"

    def predict(self, history: pd.DataFrame, future: pd.DataFrame, task: ForecastTask) -> pd.DataFrame:
        """Forecast whole days of ``task.target`` [unit of the target]."""
        data = build_daily(
            history, future, task, target_lags=self.target_lags, exog_lags=self.exog_lags,
            min_days=self.min_days, name=self.name,
        )
        point, offsets = forecast_days(data, [self.fit(data)], task.quantiles)
        return assemble(point, pd.DatetimeIndex(future.index), task, offsets)

    def fit(self, data: DailyData) -> Callable[[np.ndarray], np.ndarray]:
        """Fit on the last ``window_days`` complete days; returns design rows -> (rows x 24) forecasts."""
        model = ExtraTreesRegressor(
            n_estimators=self.trees, min_samples_leaf=self.min_samples_leaf, max_features=self.max_features,
            random_state=self.seed, n_jobs=1,
        )
        return fit_hourly(model, data, self.window_days, len(self.target_lags), len(self.exog_lags), self.differences)
