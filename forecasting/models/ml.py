"""A non-linear day-ahead model on the LEAR inputs: a small neural network.

It is recalibrated on every call, like LEAR, and is meant to be averaged with it: its errors are
less correlated with LEAR's than LEAR's windows are with each other (Lago et al. 2021 found the same for
their DNN).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sklearn.neural_network import MLPRegressor

from forecasting.models.base import assemble
from forecasting.models.daily import build_daily, forecast_days
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
