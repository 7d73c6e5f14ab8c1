"""Non-linear day-ahead models on the LEAR inputs: a small neural network and gradient boosting.

Both are recalibrated on every call, like LEAR, and are meant to be averaged with it: their errors are
less correlated with LEAR's than LEAR's windows are with each other (Lago et al. 2021 found the same for
their DNN).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.neural_network import MLPRegressor

from forecasting.models.base import assemble
from forecasting.models.daily import DailyData, build_daily, forecast_days
from forecasting.task import ForecastTask
from forecasting.transforms import AsinhScaler


def _standardise(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean = z.mean(axis=0)
    std = z.std(axis=0)
    return mean, np.where(std > 1e-12, std, 1.0)


@dataclass(frozen=True, slots=True)
class NeuralNet:
    """Multi-layer perceptron mapping the LEAR inputs of a day to its 24 values.

    Inputs and outputs are asinh(median/MAD)-transformed then standardised over the calibration window;
    ``seeds`` networks with different initialisations are averaged.
    """

    window_days: int = 1456
    hidden: tuple[int, ...] = (256, 128)
    l2: float = 1e-3
    seeds: tuple[int, ...] = (0, 1)
    target_lags: tuple[int, ...] = (1, 2, 3, 7)
    exog_lags: tuple[int, ...] = (0, 1, 7)
    min_days: int = 56
    name: str = "nn"

    def predict(self, history: pd.DataFrame, future: pd.DataFrame, task: ForecastTask) -> pd.DataFrame:
        """Forecast whole days of ``task.target`` [unit of the target]."""
        data = build_daily(
            history, future, task, target_lags=self.target_lags, exog_lags=self.exog_lags,
            min_days=self.min_days, name=self.name,
        )
        x = data.x[-self.window_days :]
        y = data.target[data.rows[-self.window_days :]]
        nc = data.n_continuous
        xs, ys = AsinhScaler.fit(x[:, :nc]), AsinhScaler.fit(y)
        zx = np.hstack([xs.transform(x[:, :nc]), x[:, nc:]])
        zy = ys.transform(y)
        mx, sx = _standardise(zx)
        my, sy = _standardise(zy)
        nets = []
        for seed in self.seeds:
            net = MLPRegressor(
                hidden_layer_sizes=self.hidden, alpha=self.l2, learning_rate_init=1e-3, max_iter=300,
                early_stopping=True, validation_fraction=0.15, n_iter_no_change=20, random_state=seed,
            )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                net.fit((zx - mx) / sx, (zy - my) / sy)
            nets.append(net)

        def predictor(rows_x: np.ndarray) -> np.ndarray:
            z = np.hstack([xs.transform(rows_x[:, :nc]), rows_x[:, nc:]])
            out = np.mean([n.predict((z - mx) / sx).reshape(len(rows_x), -1) for n in nets], axis=0)
            return ys.inverse(out * sy + my)

        point, offsets = forecast_days(data, [predictor], task.quantiles)
        return assemble(point, pd.DatetimeIndex(future.index), task, offsets)


def _hourly_rows(data: DailyData, days: np.ndarray) -> np.ndarray:
    """One row per (day, hour): same-hour lags, daily summaries of day d-1, regressors at the hour and
    their daily means, hour and weekday."""
    t = data.target
    feats = [t[days - lag] for lag in data.target_lags]  # (n, 24) each
    prev = t[days - 1]
    for stat in (prev.mean(axis=1), prev.min(axis=1), prev.max(axis=1), prev[:, -1]):
        feats.append(np.repeat(stat[:, None], 24, axis=1))
    for e in data.exog:
        feats.extend([e[days], e[days - 1], e[days - 7]])
        feats.append(np.repeat(e[days].mean(axis=1)[:, None], 24, axis=1))
    feats.append(np.tile(np.arange(24), (len(days), 1)))
    feats.append(np.repeat(data.dow[days][:, None], 24, axis=1))
    return np.stack([f.ravel() for f in feats], axis=1)


@dataclass(frozen=True, slots=True)
class GradientBoosting:
    """Histogram gradient boosting over (day, hour) rows, fitted on asinh(median/MAD) of the target."""

    window_days: int = 728
    iterations: int = 300
    learning_rate: float = 0.05
    leaves: int = 31
    target_lags: tuple[int, ...] = (1, 2, 3, 7)
    exog_lags: tuple[int, ...] = (0, 1, 7)
    min_days: int = 56
    seed: int = 0
    name: str = "gbm"

    def predict(self, history: pd.DataFrame, future: pd.DataFrame, task: ForecastTask) -> pd.DataFrame:
        """Forecast whole days of ``task.target`` [unit of the target]."""
        data = build_daily(
            history, future, task, target_lags=self.target_lags, exog_lags=self.exog_lags,
            min_days=self.min_days, name=self.name,
        )
        days = data.rows[-self.window_days :]
        y = data.target[days].ravel()
        scaler = AsinhScaler.fit(y[:, None])
        model = HistGradientBoostingRegressor(
            max_iter=self.iterations, learning_rate=self.learning_rate, max_leaf_nodes=self.leaves,
            early_stopping=False, random_state=self.seed,
        )
        model.fit(_hourly_rows(data, days), scaler.transform(y[:, None])[:, 0])
        index_of = {int(d): i for i, d in enumerate(data.rows)}

        def predictor(rows_x: np.ndarray) -> np.ndarray:
            # rows_x are LEAR design rows; map them back to day numbers through their position
            raise NotImplementedError

        target = data.target.copy()
        for d in range(data.n_hist, len(target)):
            rows = _hourly_rows(DailyData(target, data.exog, data.dow, data.n_hist, data.rows, data.x,
                                          data.n_continuous, data.target_lags, data.exog_lags), np.array([d]))
            target[d] = scaler.inverse(model.predict(rows)[:, None])[:, 0]
        point = target[data.n_hist :].ravel()
        k = min(182, len(days))
        fitted = scaler.inverse(model.predict(_hourly_rows(data, days[-k:]))[:, None])[:, 0].reshape(k, 24)
        resid = data.target[days[-k:]] - fitted
        del index_of, predictor
        from forecasting.models.base import residual_quantiles

        offsets = np.stack([residual_quantiles(resid[:, h], task.quantiles) for h in range(24)])
        return assemble(point, pd.DatetimeIndex(future.index), task, np.tile(offsets, (len(target) - data.n_hist, 1)))
