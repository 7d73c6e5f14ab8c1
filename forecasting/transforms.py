"""Variance-stabilising transformation for spiky and negative prices.

The area hyperbolic sine of the median/MAD-normalised series, as proposed by
B. Uniejewski, R. Weron, F. Ziel, "Variance stabilizing transformations for electricity spot price
forecasting", IEEE Trans. Power Systems 33(2), 2018, doi:10.1109/TPWRS.2017.2734563:
``z = asinh((x - a) / b)`` with ``a`` the median and ``b`` the median absolute deviation divided by
the 0.75 quantile of the standard normal (0.6745), so that ``b`` estimates the standard deviation.
It is defined for negative values and compresses spikes logarithmically.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_MAD_TO_SIGMA = 0.674489750196  # Phi^{-1}(0.75)


@dataclass(frozen=True, slots=True)
class AsinhScaler:
    """Column-wise asinh(median/MAD) transform fitted on a calibration sample."""

    center: np.ndarray
    scale: np.ndarray

    @classmethod
    def fit(cls, values: np.ndarray) -> AsinhScaler:
        """Fit on ``values`` (rows are samples, columns variables)."""
        values = np.asarray(values, dtype=float)
        center = np.median(values, axis=0)
        scale = np.median(np.abs(values - center), axis=0) / _MAD_TO_SIGMA
        # A column whose median absolute deviation is zero (constant, or mostly constant like solar at
        # night): fall back to its standard deviation, then to 1, so the transform stays finite.
        std = values.std(axis=0)
        scale = np.where(scale > 1e-12, scale, np.where(std > 1e-12, std, 1.0))
        return cls(center=center, scale=scale)

    def transform(self, values: np.ndarray) -> np.ndarray:
        """Apply ``asinh((x - center) / scale)``."""
        return np.arcsinh((np.asarray(values, dtype=float) - self.center) / self.scale)

    def inverse(self, values: np.ndarray) -> np.ndarray:
        """Undo :meth:`transform`."""
        return np.sinh(np.asarray(values, dtype=float)) * self.scale + self.center
