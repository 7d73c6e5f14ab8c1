"""Prophet with regressors, holidays and a variance-stabilising transform of the target.

Prophet (Taylor & Letham 2018) is additive; electricity prices are spiky and can be negative, so the
target is fitted after asinh(median/MAD) (:mod:`forecasting.transforms`) and the predictive samples are
mapped back, which keeps quantiles valid because the transform is monotone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pandas as pd

from forecasting.models.base import assemble, check_inputs
from forecasting.task import ForecastTask
from forecasting.transforms import AsinhScaler


@dataclass(frozen=True, slots=True)
class ProphetModel:
    """Prophet fitted on the last ``history_days`` days at every call.

    Parameters
    ----------
    history_days : int
        Fitting window [days].
    country : str, optional
        Country code for Prophet's built-in holiday calendar (``"DE"``, ``"FR"``...).
    samples : int
        Predictive samples drawn for the quantiles.
    """

    history_days: int = 364
    country: str | None = None
    samples: int = 200
    yearly: bool = False
    name: str = "prophet"

    def predict(self, history: pd.DataFrame, future: pd.DataFrame, task: ForecastTask) -> pd.DataFrame:
        """Forecast ``task.target`` over ``future.index`` [unit of the target]."""
        from prophet import Prophet  # heavy import, only when used

        logging.getLogger("cmdstanpy").setLevel(logging.WARNING)
        logging.getLogger("prophet").setLevel(logging.WARNING)
        check_inputs(history, future, task, min_hours=14 * 24)
        hist = history.iloc[-self.history_days * 24 :]
        y = hist[task.target].to_numpy(dtype=float)
        ok = np.isfinite(y)
        scaler = AsinhScaler.fit(y[ok, None])
        train = pd.DataFrame({"ds": pd.DatetimeIndex(hist.index).tz_localize(None), "y": scaler.transform(y[:, None])[:, 0]})
        for col in task.exog:
            train[col] = hist[col].to_numpy(dtype=float)
        train = train[ok & train[list(task.exog)].notna().all(axis=1).to_numpy()]
        model = Prophet(
            daily_seasonality=True,
            weekly_seasonality=True,
            yearly_seasonality=self.yearly,
            uncertainty_samples=self.samples,
        )
        if self.country:
            model.add_country_holidays(country_name=self.country)
        for col in task.exog:
            if train[col].std() > 0:
                model.add_regressor(col)
        model.fit(train)
        fut = pd.DataFrame({"ds": pd.DatetimeIndex(future.index).tz_localize(None)})
        for col in task.exog:
            fut[col] = future[col].to_numpy(dtype=float)
        point = scaler.inverse(model.predict(fut)["yhat"].to_numpy()[:, None])[:, 0]
        draws = model.predictive_samples(fut)["yhat"]
        quants = scaler.inverse(np.quantile(draws, task.quantiles, axis=1).T.reshape(-1, 1)).reshape(
            len(fut), len(task.quantiles)
        )
        return assemble(point, pd.DatetimeIndex(future.index), task, quants - point[:, None])
