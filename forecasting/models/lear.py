"""LEAR: lasso-estimated autoregressive model, one linear model per hour of the day.

Follows the description of J. Lago, G. Marcjasz, B. De Schutter, R. Weron, "Forecasting day-ahead
electricity prices: A review of state-of-the-art algorithms, best practices and an open-access
benchmark", Applied Energy 293 (2021) 116983, section 4 (our implementation):

* inputs for day d: the 24 prices of days d-1, d-2, d-3 and d-7, the 24 values of each regressor
  (day-ahead forecasts) of days d, d-1 and d-7, and a day-of-week dummy;
* every column is variance-stabilised with asinh(median/MAD) over the calibration window
  (Uniejewski et al. 2018, see :mod:`forecasting.transforms`);
* for each hour a lasso whose penalty is chosen by the Akaike information criterion along the LARS
  path (Zou, Hastie, Tibshirani 2007, with the noise variance taken as the target's variance);
* recalibrated on every call over several calibration windows (default 56, 84, 1092 and 1456 days)
  whose forecasts are averaged (Hubicka, Marcjasz, Weron 2019, IEEE Trans. Sustain. Energy 10(1)).

All 24 hourly models of a window share their design matrix, so the Gram matrix is formed once per
window and the 24 LARS paths run on it (``sklearn.linear_model.lars_path_gram``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from sklearn.linear_model import Lasso, lars_path_gram

from forecasting.models.base import assemble
from forecasting.models.daily import build_daily, forecast_days
from forecasting.task import ForecastTask
from forecasting.transforms import AsinhScaler


@dataclass(frozen=True, slots=True)
class HourlyLasso:
    """A fitted window: transforms, kept columns and the (features x 24) coefficient matrix."""

    x_scaler: AsinhScaler
    y_scaler: AsinhScaler
    n_continuous: int
    mean: np.ndarray
    norms: np.ndarray
    keep: np.ndarray
    coef: np.ndarray
    intercept: np.ndarray

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Prices [target unit] for feature rows ``x`` (rows x features) -> (rows x 24)."""
        z = _transform(self.x_scaler, x, self.n_continuous)
        zn = (z - self.mean)[:, self.keep] / self.norms[self.keep]
        return self.y_scaler.inverse(zn @ self.coef + self.intercept)


def _transform(scaler: AsinhScaler, x: np.ndarray, n_continuous: int) -> np.ndarray:
    out = np.array(x, dtype=float, copy=True)
    out[:, :n_continuous] = scaler.transform(x[:, :n_continuous])
    return out


def fit_hourly_lasso(
    x: np.ndarray, y: np.ndarray, n_continuous: int, max_steps: int = 40, raw_penalty: bool = True
) -> HourlyLasso:
    """Fit 24 AIC-tuned lasso models sharing the design ``x``.

    Parameters
    ----------
    x : ndarray (days, features)
        Design; the first ``n_continuous`` columns are asinh-transformed, the rest (dummies) are not.
    y : ndarray (days, 24)
        Target per hour of the day [target unit].
    n_continuous : int
        Number of leading continuous columns.
    max_steps : int
        LARS steps computed first. The AIC-selected models have a few dozen variables while the full
        path has hundreds of steps, so the path is cut here and only recomputed in full when the AIC
        minimum falls on its last step.
    """
    n = x.shape[0]
    x_scaler = AsinhScaler.fit(x[:, :n_continuous])
    y_scaler = AsinhScaler.fit(y)
    z = _transform(x_scaler, x, n_continuous)
    t = y_scaler.transform(y)
    mean = z.mean(axis=0)
    zc = z - mean
    norms = np.sqrt((zc**2).sum(axis=0))
    keep = norms > 1e-10
    zn = zc[:, keep] / norms[keep]
    t_mean = t.mean(axis=0)
    tc = t - t_mean
    gram = zn.T @ zn
    xy = zn.T @ tc
    tt = (tc**2).sum(axis=0)
    gram_raw = zc[:, keep].T @ zc[:, keep] if raw_penalty else None
    coef = np.zeros((int(keep.sum()), y.shape[1]))
    for h in range(y.shape[1]):
        if tt[h] <= 1e-12:  # constant hour: the intercept alone
            continue
        steps = max_steps
        while True:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                alphas, _, path = lars_path_gram(
                    xy[:, h], gram, n_samples=n, method="lasso", max_iter=steps, copy_Gram=True
                )
            rss = tt[h] - 2.0 * path.T @ xy[:, h] + np.einsum("ik,ik->k", path, gram @ path)
            df = (np.abs(path) > np.finfo(float).eps).sum(axis=0)
            aic = rss / (tt[h] / n) + 2.0 * df
            best = int(np.argmin(aic))
            if best < path.shape[1] - 1 or path.shape[1] <= steps or steps >= 10 * max_steps:
                break
            steps *= 4  # minimum at the cut: extend the path
        if raw_penalty and best > 0:
            coef[:, h] = _raw_lasso(zc[:, keep], tc[:, h], float(alphas[best]), gram_raw) * norms[keep]
        else:
            coef[:, h] = path[:, best]
    return HourlyLasso(x_scaler, y_scaler, n_continuous, mean, norms, keep, coef, t_mean)


def _raw_lasso(zc: np.ndarray, tc: np.ndarray, alpha: float, gram: np.ndarray | None) -> np.ndarray:
    """Lasso on the centred but unnormalised design at penalty ``alpha`` (coordinate descent)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = Lasso(alpha=alpha, fit_intercept=False, precompute=gram, max_iter=2500, tol=1e-4)
        model.fit(zc, tc)
    return model.coef_


@dataclass(frozen=True, slots=True)
class Lear:
    """LEAR averaged over calibration windows; see the module docstring.

    Parameters
    ----------
    windows_days : tuple of int
        Calibration windows [days]; windows longer than the available history are shortened to it.
    min_days : int
        Fewest complete training days accepted.
    raw_penalty : bool
        Apply the AIC-selected penalty to the unnormalised (asinh-scaled) design, as the epftoolbox
        reference implementation effectively does (its LassoLarsIC normalised the columns, its final
        Lasso did not); this reproduces the published per-window errors. ``False`` keeps the sparser
        solution on the normalised LARS path.
    """

    windows_days: tuple[int, ...] = (56, 84, 1092, 1456)
    price_lags: tuple[int, ...] = (1, 2, 3, 7)
    exog_lags: tuple[int, ...] = (0, 1, 7)
    min_days: int = 28
    raw_penalty: bool = True
    name: str = "lear"

    def predict(self, history: pd.DataFrame, future: pd.DataFrame, task: ForecastTask) -> pd.DataFrame:
        """Forecast whole days of ``task.target`` [unit of the target]."""
        data = build_daily(
            history, future, task, target_lags=self.price_lags, exog_lags=self.exog_lags,
            min_days=self.min_days, name=self.name,
        )
        n = len(data.rows)
        windows = sorted({min(w, n) for w in self.windows_days if w >= self.min_days} or {n})
        y = data.target[data.rows]
        models = [
            fit_hourly_lasso(data.x[-w:], y[-w:], data.n_continuous, raw_penalty=self.raw_penalty)
            for w in windows
        ]
        point, offsets = forecast_days(data, [m.predict for m in models], task.quantiles)
        return assemble(point, pd.DatetimeIndex(future.index), task, offsets)
