"""A model fitted to a transformed target: log for strictly positive series (carbon intensity), logit for
fractions (renewable share). Errors in the transformed space are relative errors, which is what MAPE
scores; forecasts and quantiles are mapped back (both maps are monotone, so quantiles stay ordered)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from forecasting.errors import ForecastInputError
from forecasting.models.base import Model
from forecasting.task import ForecastTask

LOGIT_EPS = 0.005  # fractions are clipped to [eps, 1 - eps] before the logit


def _forward(kind: str, values: np.ndarray) -> np.ndarray:
    if kind == "log":
        return np.log(values)
    clipped = np.clip(values, LOGIT_EPS, 1.0 - LOGIT_EPS)
    return np.log(clipped / (1.0 - clipped))


def _inverse(kind: str, values: np.ndarray) -> np.ndarray:
    if kind == "log":
        return np.exp(values)
    return 1.0 / (1.0 + np.exp(-values))


@dataclass(frozen=True, slots=True)
class Transformed:
    """Fit ``model`` to log(target) (``kind="log"``) or logit(target) (``kind="logit"``).

    A non-positive value (log) or a value outside [0, 1] (logit) in the history raises
    :class:`ForecastInputError` naming the target and the first offending hour.
    """

    model: Model
    kind: str = "log"
    name: str = "transformed"

    def __post_init__(self) -> None:
        if self.kind not in ("log", "logit"):
            raise ValueError(f"Transformed.kind must be 'log' or 'logit', got {self.kind!r}")

    def predict(self, history: pd.DataFrame, future: pd.DataFrame, task: ForecastTask) -> pd.DataFrame:
        """Forecast ``task.target`` [its unit] through the transform."""
        if task.target not in history.columns:
            raise ForecastInputError(f"history has no column {task.target!r}")
        values = history[task.target].to_numpy(dtype=float)
        bad = (values <= 0) if self.kind == "log" else ((values < 0) | (values > 1))
        if bad.any():
            first = history.index[np.flatnonzero(bad)[0]]
            rule = "> 0" if self.kind == "log" else "within [0, 1]"
            raise ForecastInputError(
                f"{self.name}: {task.target} must be {rule}; {int(bad.sum())} hour(s) are not, "
                f"first {first.isoformat()}"
            )
        shifted = history.copy()
        shifted[task.target] = _forward(self.kind, values)
        out = self.model.predict(shifted, future, task)
        return pd.DataFrame(_inverse(self.kind, out.to_numpy(dtype=float)), index=out.index, columns=out.columns)
