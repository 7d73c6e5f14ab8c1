"""Averages of other models' forecasts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from forecasting.errors import ForecastInputError
from forecasting.models.base import Model
from forecasting.task import ForecastTask


@dataclass(frozen=True, slots=True)
class Ensemble:
    """Weighted mean of member forecasts, point and quantiles alike (quantile averaging).

    Parameters
    ----------
    members : tuple of Model
        The models averaged.
    weights : tuple of float, optional
        One non-negative weight per member; equal weights when omitted.
    geometric : bool
        Average the logarithms (a weighted geometric mean) instead of the values, for strictly positive
        targets whose members are fitted on the log scale (carbon intensity): the combination is then the
        mean of the members' log forecasts, the quantity they estimate, and a relative error in one member
        weighs the same at any level.
    """

    members: tuple[Model, ...]
    weights: tuple[float, ...] | None = None
    geometric: bool = False
    name: str = "ensemble"

    def __post_init__(self) -> None:
        if not self.members:
            raise ValueError("Ensemble needs at least one member")
        if self.weights is not None and (
            len(self.weights) != len(self.members) or min(self.weights) < 0 or sum(self.weights) <= 0
        ):
            raise ValueError("Ensemble.weights: one non-negative weight per member, not all zero")

    def combine(self, forecasts: list[pd.DataFrame]) -> pd.DataFrame:
        """Average member results (same index and columns) with the ensemble's weights."""
        w = np.ones(len(forecasts)) if self.weights is None else np.asarray(self.weights, dtype=float)
        w = w / w.sum()
        stacked = np.stack([f.to_numpy(dtype=float) for f in forecasts])
        if self.geometric:
            if not (stacked > 0).all():
                raise ForecastInputError(f"{self.name}: a geometric mean needs positive member forecasts")
            out = np.exp(np.tensordot(w, np.log(stacked), axes=1))
        else:
            out = np.tensordot(w, stacked, axes=1)
        return pd.DataFrame(out, index=forecasts[0].index, columns=forecasts[0].columns)

    def predict(
        self,
        history: pd.DataFrame,
        future: pd.DataFrame,
        task: ForecastTask,
        member_predict: Callable[[Model], pd.DataFrame] | None = None,
    ) -> pd.DataFrame:
        """Forecast with every member and average; ``member_predict`` lets a caller reuse results."""
        run = member_predict or (lambda m: m.predict(history, future, task))
        return self.combine([run(m) for m in self.members])
