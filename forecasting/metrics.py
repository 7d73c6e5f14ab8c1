"""Point-forecast error measures as used in the epftoolbox benchmark (Lago et al. 2021)."""

from __future__ import annotations

import numpy as np


def _pair(actual: np.ndarray, forecast: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(actual, dtype=float)
    f = np.asarray(forecast, dtype=float)
    if a.shape != f.shape:
        raise ValueError(f"actual {a.shape} and forecast {f.shape} differ in shape")
    ok = np.isfinite(a) & np.isfinite(f)
    return a[ok], f[ok]


def mae(actual: np.ndarray, forecast: np.ndarray) -> float:
    """Mean absolute error [unit of the series]."""
    a, f = _pair(actual, forecast)
    return float(np.mean(np.abs(a - f))) if a.size else float("nan")


def rmse(actual: np.ndarray, forecast: np.ndarray) -> float:
    """Root mean squared error [unit of the series]."""
    a, f = _pair(actual, forecast)
    return float(np.sqrt(np.mean((a - f) ** 2))) if a.size else float("nan")


def smape(actual: np.ndarray, forecast: np.ndarray) -> float:
    """Symmetric MAPE [%]: ``100 * mean(2|y - f| / (|y| + |f|))``; hours with ``y = f = 0`` count 0."""
    a, f = _pair(actual, forecast)
    if not a.size:
        return float("nan")
    den = np.abs(a) + np.abs(f)
    ratio = np.divide(2.0 * np.abs(a - f), den, out=np.zeros_like(den), where=den > 0)
    return float(100.0 * np.mean(ratio))


def mape(actual: np.ndarray, forecast: np.ndarray) -> float:
    """Mean absolute percentage error [%]; NaN if any actual value is zero (undefined)."""
    a, f = _pair(actual, forecast)
    if not a.size or np.any(a == 0):
        return float("nan")
    return float(100.0 * np.mean(np.abs((a - f) / a)))


def rmae(actual: np.ndarray, forecast: np.ndarray, naive: np.ndarray) -> float:
    """MAE relative to the MAE of a naive forecast over the same hours (dimensionless)."""
    a = np.asarray(actual, dtype=float)
    f = np.asarray(forecast, dtype=float)
    n = np.asarray(naive, dtype=float)
    ok = np.isfinite(a) & np.isfinite(f) & np.isfinite(n)
    ref = mae(a[ok], n[ok])
    return mae(a[ok], f[ok]) / ref if ref > 0 else float("nan")
