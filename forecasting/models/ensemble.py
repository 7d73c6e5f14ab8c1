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


def simplex_grid(n_members: int, step: float) -> np.ndarray:
    """All weight vectors of ``n_members`` non-negative multiples of ``step`` summing to 1, (points x members)."""
    units = round(1 / step)
    if n_members < 1 or units < 1 or abs(units * step - 1) > 1e-9:
        raise ValueError(f"simplex_grid: step must divide 1 (got {step}) and n_members be >= 1 (got {n_members})")

    def parts(k: int, total: int) -> list[list[int]]:
        if k == 1:
            return [[total]]
        return [[i, *rest] for i in range(total, -1, -1) for rest in parts(k - 1, total - i)]

    return np.asarray(parts(n_members, units), dtype=float) / units


def fit_weights(member_forecasts: list[np.ndarray], actual: np.ndarray, step: float = 0.05) -> tuple[float, ...]:
    """Convex combination weights of ``member_forecasts`` with the least mean absolute error against ``actual``.

    Parameters
    ----------
    member_forecasts : list of ndarray
        One point forecast per member over the same hours [target unit].
    actual : ndarray
        Observed values over those hours [target unit]; hours where any input is NaN are left out.
    step : float
        Grid resolution of the weights (0.05: every weight a multiple of 5 %); the grid is searched exhaustively,
        so the choice is deterministic (ties go to the first point, the first member's largest weight).

    Returns
    -------
    tuple of float
        One weight per member, summing to 1.
    """
    if not member_forecasts:
        raise ValueError("fit_weights: no member forecasts")
    stacked = np.stack([np.asarray(f, dtype=float) for f in member_forecasts])
    actual = np.asarray(actual, dtype=float)
    if stacked.shape[1:] != actual.shape:
        raise ValueError(f"fit_weights: member forecasts of shape {stacked.shape[1:]}, actual {actual.shape}")
    ok = np.isfinite(stacked).all(axis=0) & np.isfinite(actual)
    if not ok.any():
        raise ValueError("fit_weights: no hour with every member forecast and the actual value")
    grid = simplex_grid(len(member_forecasts), step)
    errors = np.concatenate([  # in blocks: 1771 points (4 members) x 2 years of hours would take 245 MB at once
        np.abs(grid[i : i + 256] @ stacked[:, ok] - actual[ok]).mean(axis=1) for i in range(0, len(grid), 256)
    ])
    return tuple(float(w) for w in grid[int(np.argmin(errors))])
