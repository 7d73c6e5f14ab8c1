"""Choosing an ensemble's weights on a validation period strictly before the test period.

The epftoolbox protocol (Lago et al. 2021, section 5) fixes every choice of a model on data before the test
period and then recalibrates it daily over the test period. For an ensemble the choice is its weights: each
member is backtested day-ahead (recalibrated daily, as in the test) over the ``days`` days that end the day
before ``test_start``, and the convex weights with the least mean absolute error over those days are kept
(:func:`forecasting.models.ensemble.fit_weights`). The frame is cut at ``test_start`` before anything runs, so
no value of the test period can reach the choice.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd

from forecasting.backtest import BacktestResult, run_backtest, test_days
from forecasting.errors import ForecastInputError
from forecasting.frame import HOUR
from forecasting.models.ensemble import Ensemble, fit_weights
from forecasting.task import ForecastTask

VALIDATION_DAYS = 364  # one year of whole weeks before the test start (every weekday 52 times)


def validation_period(
    test_start: str | pd.Timestamp, days: int = VALIDATION_DAYS
) -> tuple[pd.Timestamp, pd.Timestamp]:
    """First and last day (midnights, UTC) of the ``days`` days ending the day before ``test_start``."""
    if days < 1:
        raise ValueError(f"validation days must be >= 1 (got {days})")
    first_test = test_days(test_start, test_start)[0]
    return first_test - pd.Timedelta(days=days), first_test - pd.Timedelta(days=1)


def validated_ensemble(
    frame: pd.DataFrame,
    task: ForecastTask,
    ensemble: Ensemble,
    test_start: str | pd.Timestamp,
    *,
    days: int = VALIDATION_DAYS,
    day_step: int = 1,
    step: float = 0.05,
    cache_dir: str | Path | None = None,
    workers: int = 1,
    progress: bool = True,
) -> tuple[Ensemble, BacktestResult]:
    """``ensemble`` with weights fitted on the validation period before ``test_start``.

    Parameters
    ----------
    frame : DataFrame
        Hourly data (UTC index) with ``task.target`` and ``task.exog``; only the hours before ``test_start``
        are used.
    task : ForecastTask
        What to forecast.
    ensemble : Ensemble
        Members to weigh (its own weights are ignored); the result is named ``<name>@val``.
    test_start : str or Timestamp
        First test day; the validation period is :func:`validation_period` of it.
    days, day_step : int
        Validation length [days] and every how many of its days are forecast (1 = all).
    step : float
        Weight grid resolution (see :func:`~forecasting.models.ensemble.fit_weights`).
    cache_dir, workers, progress :
        As in :func:`forecasting.backtest.run_backtest`.

    Returns
    -------
    (Ensemble, BacktestResult)
        The weighted ensemble and the members' validation backtest (one column per member name).
    """
    first, last = validation_period(test_start, days)
    before = frame.loc[: first + pd.Timedelta(days=days) - HOUR]  # nothing from the test start on
    members = {m.name: m for m in ensemble.members}
    if len(members) != len(ensemble.members):
        raise ForecastInputError(f"{ensemble.name}: members need distinct names to be weighed")
    result = run_backtest(
        before,
        task,
        members,
        first,
        last,
        cache_dir=cache_dir,
        workers=workers,
        progress=progress,
        day_step=day_step,
    )
    fc = result.forecasts
    weights = fit_weights([fc[name].to_numpy() for name in members], fc["actual"].to_numpy(), step)
    return replace(ensemble, weights=weights, name=f"{ensemble.name}@val"), result
