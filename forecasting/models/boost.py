"""Gradient-boosted trees on the LEAR inputs, one model for all hours of the day.

A different learner on the same information as :class:`forecasting.models.lear.Lear`, meant to be averaged
with it: trees capture thresholds and interactions (an import regime that switches with a neighbour's price)
that the per-hour linear models cannot, while LEAR extrapolates trends that trees cannot.

Each design row of a day (see :func:`forecasting.models.daily.design`) is unfolded into 24 rows, one per hour,
with the values of that hour (the target of days d-1, d-2, d-3, d-7, every regressor on days d, d-1 and d-7)
plus the hour, the weekday, yesterday's mean and last value of the target and each regressor's mean over day d.
With ``differences`` (the registered ``hgb_log``) the day-to-day changes are features too: each lagged target
value minus yesterday's mean, and each regressor's change from day d-1 to day d, per hour and in its daily mean.
The target is the hour's value minus yesterday's mean (so that a level shift does not leave the trees'
range) and the fitted model is scikit-learn's ``HistGradientBoostingRegressor`` with fixed iterations and seed.
With ``half_life_days`` the training days are weighted by recency, ``0.5 ** (age / half_life_days)`` with the
age in days before the last history day, so that a regime that changed within the window (fuel prices, a
nuclear fleet's availability) outweighs the older days without dropping them.
The production carbon-intensity model averages two such tree models with LEAR (``forecasting.models.carbon``):
with ``recent`` (``hgbr_log``) the rows also say where yesterday's last observed value stands, and with
``anchored`` as well (``hgba_log``) each hour's target is its deviation from yesterday's mean plus a share of
yesterday's last deviation fitted per hour, in units of that hour's spread, since the first hours of a day follow
the last value more closely than any daily pattern.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pandas as pd
from sklearn.ensemble import HistGradientBoostingRegressor

from forecasting.models.base import assemble
from forecasting.models.daily import DailyData, build_daily, forecast_days
from forecasting.task import ForecastTask


class Regressor(Protocol):
    """What :func:`fit_hourly` needs of a scikit-learn regressor."""

    def fit(self, x: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None = None) -> object: ...

    def predict(self, x: np.ndarray) -> np.ndarray: ...


def hourly_features(
    x: np.ndarray, n_target_lags: int, n_exog_blocks: int, n_exog_lags: int, differences: bool = False,
    recent: bool = False,
) -> np.ndarray:
    """Unfold design rows (days x features) into (days * 24) rows of per-hour features.

    The design is ``n_target_lags`` blocks of 24 target values, ``n_exog_blocks * n_exog_lags`` blocks of 24
    regressor values (lag-major within a regressor) and 7 weekday dummies. With ``differences`` the rows also
    hold each lagged target value minus yesterday's mean and, per regressor, the change of its hour and of its
    daily mean between its first two lags (day d against day d-1 with the default lags): trees split on one feature at a
    time, so a change that drives the target has to be a feature of its own. With ``recent`` the rows also hold
    where the last observed value (yesterday's last hour) stands: against yesterday's mean, against the hour
    before it, and against the same hour yesterday. The first hours of the forecast day are closer to that value
    than to any daily pattern, and the trees, which see the hour and the last value as separate features, do not
    form those differences themselves.
    """
    days = x.shape[0]
    hours = np.tile(np.arange(24, dtype=float), days)
    dow = np.repeat(np.argmax(x[:, -7:], axis=1).astype(float), 24)
    blocks = x[:, : 24 * (n_target_lags + n_exog_blocks * n_exog_lags)].reshape(days, -1, 24)
    per_hour = blocks.transpose(0, 2, 1).reshape(days * 24, -1)  # every lagged value of the same hour
    yesterday = blocks[:, 0, :]
    daily = [np.repeat(yesterday.mean(axis=1), 24), np.repeat(yesterday[:, -1], 24)]
    for e in range(n_exog_blocks):
        daily.append(np.repeat(blocks[:, n_target_lags + e * n_exog_lags, :].mean(axis=1), 24))
    if differences:
        level = yesterday.mean(axis=1)[:, None]
        for k in range(n_target_lags):
            daily.append((blocks[:, k, :] - level).ravel())
        if n_exog_lags >= 2:
            for e in range(n_exog_blocks):
                first, second = blocks[:, n_target_lags + e * n_exog_lags], blocks[:, n_target_lags + e * n_exog_lags + 1]
                daily.append((first - second).ravel())
                daily.append(np.repeat(first.mean(axis=1) - second.mean(axis=1), 24))
    if recent:
        last = yesterday[:, -1:]
        daily.append(np.repeat(last[:, 0] - yesterday.mean(axis=1), 24))
        daily.append(np.repeat(last[:, 0] - yesterday[:, -2], 24))
        daily.append((last - yesterday).ravel())
    return np.column_stack([hours, dow, per_hour, *daily])


@dataclass(frozen=True, slots=True)
class Boosted:
    """Histogram gradient boosting over the hours of the LEAR inputs; see the module docstring.

    Parameters
    ----------
    window_days : int
        Calibration window [days] (shortened to the available history).
    iterations, learning_rate, max_leaf_nodes, min_samples_leaf, l2 :
        ``HistGradientBoostingRegressor`` settings (no early stopping, so a fit depends only on its data).
    seed : int
        Random state of the trees' binning subsample.
    differences : bool
        Add day-to-day changes as features (see :func:`hourly_features`).
    loss : str
        ``HistGradientBoostingRegressor`` loss: ``"squared_error"`` (the conditional mean) or
        ``"absolute_error"`` (the conditional median; on a log target the median of the relative error).
    half_life_days : float, optional
        Half-life [days] of the training days' weights by age (see :func:`recency_weights`); ``None`` weighs
        every day of the window alike.
    recent : bool
        Add the last observed value's differences as features (see :func:`hourly_features`).
    anchored : bool
        Forecast each hour's deviation from yesterday's mean plus a fitted share of yesterday's last deviation
        (see :func:`anchor_level`) instead of from the mean alone, in units of each hour's spread: the trees,
        whose leaves are constants shared by all hours, then need not rebuild from the last value the
        near-identity that the first hours follow, nor carry the later hours' larger noise into them.
    """

    window_days: int = 364
    iterations: int = 300
    learning_rate: float = 0.05
    max_leaf_nodes: int = 15
    min_samples_leaf: int = 40
    l2: float = 1.0
    seed: int = 0
    differences: bool = False
    loss: str = "squared_error"
    half_life_days: float | None = None
    recent: bool = False
    anchored: bool = False
    target_lags: tuple[int, ...] = (1, 2, 3, 7)
    exog_lags: tuple[int, ...] = (0, 1, 7)
    min_days: int = 28
    name: str = "boosted"

    def predict(self, history: pd.DataFrame, future: pd.DataFrame, task: ForecastTask) -> pd.DataFrame:
        """Forecast whole days of ``task.target`` [unit of the target]."""
        data = build_daily(
            history, future, task, target_lags=self.target_lags, exog_lags=self.exog_lags,
            min_days=self.min_days, name=self.name,
        )
        predictor = self.fit(data)
        point, offsets = forecast_days(data, [predictor], task.quantiles)
        return assemble(point, pd.DatetimeIndex(future.index), task, offsets)

    def fit(self, data: DailyData) -> Callable[[np.ndarray], np.ndarray]:
        """Fit on the last ``window_days`` complete days; returns design rows -> (rows x 24) forecasts."""
        model = HistGradientBoostingRegressor(
            loss=self.loss, max_iter=self.iterations, learning_rate=self.learning_rate,
            max_leaf_nodes=self.max_leaf_nodes, min_samples_leaf=self.min_samples_leaf, l2_regularization=self.l2,
            early_stopping=False, random_state=self.seed,
        )
        return fit_hourly(model, data, self.window_days, len(self.target_lags), len(self.exog_lags), self.differences,
                          self.half_life_days, self.recent, self.anchored)


def recency_weights(rows: np.ndarray, last_day: int, half_life_days: float) -> np.ndarray:
    """Weights ``0.5 ** (age / half_life_days)`` of training days ``rows`` (day indices), the age [days] counted
    back from day ``last_day`` (weight 1); a half-life that is not positive raises ``ValueError``."""
    if not half_life_days > 0:
        raise ValueError(f"half_life_days must be positive, got {half_life_days}")
    return np.power(0.5, (last_day - rows) / half_life_days)


def quantile_edges(features: np.ndarray, n_bins: int = 255) -> list[np.ndarray]:
    """Per column, the distinct inner quantiles that cut it into at most ``n_bins`` bins of equal counts."""
    levels = np.linspace(0.0, 1.0, n_bins + 1)[1:-1]
    return [np.unique(np.quantile(col, levels)) for col in features.T]


def apply_edges(features: np.ndarray, edges: list[np.ndarray]) -> np.ndarray:
    """Each value replaced by its bin number under ``edges`` (see :func:`quantile_edges`): at most 255
    distinct values per column, which the trees then split on as they are."""
    return np.column_stack([np.searchsorted(e, col, side="right") for e, col in zip(edges, features.T, strict=True)])


def fit_last_value_pull(yesterday: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per hour of the day, the least-squares slope of (the hour's value - yesterday's mean) on (yesterday's last
    value - yesterday's mean), through the origin: how much of the last deviation from the daily level is still
    there h hours later (near 1 in the first hours, falling towards 0). ``yesterday`` and ``y`` are (days x 24)."""
    level = yesterday.mean(axis=1)
    dev = yesterday[:, -1] - level
    denominator = float(dev @ dev)
    if denominator <= 1e-12:  # a flat history: no pull
        return np.zeros(y.shape[1])
    return dev @ (y - level[:, None]) / denominator


def anchor_level(yesterday: np.ndarray, pull: np.ndarray | None) -> np.ndarray:
    """The (days x 24) level the trees forecast the deviation from: yesterday's mean, plus with ``pull`` (see
    :func:`fit_last_value_pull`) that share of yesterday's last deviation from it."""
    level = yesterday.mean(axis=1)[:, None]
    if pull is None:
        return np.repeat(level, yesterday.shape[1], axis=1)
    return level + (yesterday[:, -1:] - level) * pull


def fit_hourly(
    model: Regressor, data: DailyData, window_days: int, n_target_lags: int, n_exog_lags: int, differences: bool,
    half_life_days: float | None = None, recent: bool = False, anchored: bool = False,
) -> Callable[[np.ndarray], np.ndarray]:
    """Fit ``model`` to the hours of the last ``window_days`` complete days (features: :func:`hourly_features`;
    target: the hour's value minus yesterday's mean, or with ``anchored`` minus :func:`anchor_level` with the
    pull fitted on the same days and divided by that hour's standard deviation over them), weighted by
    :func:`recency_weights` when ``half_life_days`` is given (``recent``: see :func:`hourly_features`); returns
    design rows -> (rows x 24) forecasts."""
    n_exog = len(data.exog)
    unfold = lambda x: hourly_features(x, n_target_lags, n_exog, n_exog_lags, differences, recent)  # noqa: E731
    x = data.x[-window_days:]
    rows = data.rows[-window_days:]
    y = data.target[rows]
    pull = fit_last_value_pull(x[:, :24], y) if anchored else None  # x[:, :24]: yesterday's 24 values
    base = anchor_level(x[:, :24], pull)
    scale = np.ones(y.shape[1])
    if anchored:  # every hour's deviation in units of its own spread, so that no hour's noise fills another's leaves
        scale = np.maximum((y - base).std(axis=0), 1e-9)
    features = unfold(x)
    weights, edges = None, None
    if half_life_days is not None:
        weights = np.repeat(recency_weights(rows, data.n_hist - 1, half_life_days), 24)
        # scikit-learn bins weighted data at weighted quantiles, ~20 s for this design; bin unweighted here
        edges = quantile_edges(features)
        features = apply_edges(features, edges)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(features, ((y - base) / scale).ravel(), sample_weight=weights)

    def predictor(rows_x: np.ndarray) -> np.ndarray:
        f = unfold(rows_x)
        out = model.predict(f if edges is None else apply_edges(f, edges)).reshape(len(rows_x), 24)
        return out * scale + anchor_level(rows_x[:, :24], pull)

    return predictor
