"""Rolling day-ahead backtests with the epftoolbox protocol.

For every day D of the test period each model is recalibrated on the history strictly before D
(00:00 of D in the data's clock) and forecasts the 24 hours of D, seeing the regressors of D (day-ahead
forecasts are published before the auction). Results can be cached per model and day so that a rerun
only computes what is missing; days run in up to ``workers`` processes.
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from forecasting.errors import ForecastInputError
from forecasting.frame import HOUR, FillReport, regularize_hourly
from forecasting.metrics import mae, mape, rmae, rmse, smape
from forecasting.models import Ensemble, Model, SeasonalNaive
from forecasting.task import ForecastTask

REFERENCE = "naive_weekly"  # rMAE denominator (Lago et al. 2021)


@dataclass(frozen=True, slots=True)
class BacktestResult:
    """Outcome of :func:`run_backtest`.

    Attributes
    ----------
    forecasts : DataFrame
        Index: forecast hour (UTC); columns ``actual`` and one point-forecast column per model, plus
        ``<model>:<quantile column>`` for the quantiles.
    metrics : DataFrame
        One row per (model, period) with ``mae``, ``rmse``, ``smape`` [%], ``mape`` [%], ``rmae`` and
        ``hours``; period ``all`` covers the whole test range, the others are calendar years.
    best : str
        Model with the lowest MAE over the whole period.
    fills : list of FillReport
        Gaps repaired in the input before the run.
    """

    forecasts: pd.DataFrame
    metrics: pd.DataFrame
    best: str
    fills: list[FillReport]


_STATE: dict[str, object] = {}


def _key(model: Model) -> str:
    return hashlib.sha1(repr(model).encode()).hexdigest()[:12]


def _fingerprint(frame: pd.DataFrame, task: ForecastTask) -> str:
    digest = hashlib.sha1(repr(task).encode())
    digest.update(pd.util.hash_pandas_object(frame, index=True).to_numpy().tobytes())
    return digest.hexdigest()[:16]


def _forecast_day(day: pd.Timestamp) -> dict[str, pd.DataFrame]:
    frame: pd.DataFrame = _STATE["frame"]  # type: ignore[assignment]
    task: ForecastTask = _STATE["task"]  # type: ignore[assignment]
    models: Mapping[str, Model] = _STATE["models"]  # type: ignore[assignment]
    cache: Path | None = _STATE.get("cache")  # type: ignore[assignment]
    history = frame.loc[: day - HOUR]
    future = frame.loc[day : day + 23 * HOUR, list(task.exog)]
    memo: dict[str, pd.DataFrame] = {}

    def run(model: Model) -> pd.DataFrame:
        key = _key(model)
        if key in memo:
            return memo[key]
        path = cache / key / f"{day.date().isoformat()}.csv" if cache else None
        if path is not None and path.exists():
            out = pd.read_csv(path, index_col=0)
            out.index = pd.DatetimeIndex(pd.to_datetime(out.index, utc=True))
        else:
            if isinstance(model, Ensemble):
                out = model.predict(history, future, task, member_predict=run)
            else:
                out = model.predict(history, future, task)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(".tmp")
                out.to_csv(tmp)
                tmp.replace(path)  # atomic: a killed run leaves no half-written day
        memo[key] = out
        return out

    return {name: run(model) for name, model in models.items()}


def _init_worker(state: dict[str, object]) -> None:
    _STATE.clear()
    _STATE.update(state)


def compute_metrics(
    actual: pd.Series, forecasts: Mapping[str, pd.Series], reference: pd.Series
) -> pd.DataFrame:
    """Error measures per model over the whole range (period ``all``) and per calendar year."""
    rows = []
    index = pd.DatetimeIndex(actual.index)
    periods: list[tuple[str, pd.Index]] = [("all", index)]
    years = sorted(set(index.year))
    if len(years) > 1:
        periods += [(str(y), index[index.year == y]) for y in years]
    for name, fc in forecasts.items():
        for period, idx in periods:
            a, f, r = actual.loc[idx].to_numpy(), fc.loc[idx].to_numpy(), reference.loc[idx].to_numpy()
            rows.append(
                {
                    "model": name, "period": period, "mae": mae(a, f), "rmse": rmse(a, f),
                    "smape": smape(a, f), "mape": mape(a, f), "rmae": rmae(a, f, r), "hours": len(idx),
                }
            )
    return pd.DataFrame(rows)


def test_days(start: str | pd.Timestamp, end: str | pd.Timestamp) -> pd.DatetimeIndex:
    """Midnights (UTC) of the test days, ``start`` and ``end`` included."""
    first = pd.Timestamp(start)
    last = pd.Timestamp(end)
    first = first.tz_localize("UTC") if first.tz is None else first.tz_convert("UTC")
    last = last.tz_localize("UTC") if last.tz is None else last.tz_convert("UTC")
    if last < first:
        raise ForecastInputError(f"test end {last.date()} is before test start {first.date()}")
    return pd.date_range(first.normalize(), last.normalize(), freq="D")


def run_backtest(
    frame: pd.DataFrame,
    task: ForecastTask,
    models: Mapping[str, Model],
    test_start: str | pd.Timestamp,
    test_end: str | pd.Timestamp,
    *,
    cache_dir: str | Path | None = None,
    workers: int = 1,
    progress: bool = True,
    max_fill_hours: int = 3,
    day_step: int = 1,
) -> BacktestResult:
    """Backtest ``models`` day-ahead over ``test_start``..``test_end`` (whole days, inclusive).

    Parameters
    ----------
    frame : DataFrame
        Hourly data on a UTC index with ``task.target`` and ``task.exog``. Where some of these columns begin
        later than the frame (carbon intensity recorded from 2021 in a table of prices from 2015), the history
        starts at the first midnight from which all of them are recorded; later gaps are filled or refused as
        :func:`forecasting.frame.regularize_hourly` says.
    task : ForecastTask
        What to forecast.
    models : mapping of str to Model
        Models by display name; the weekly naive is always run too, as the rMAE reference.
    test_start, test_end : str or Timestamp
        First and last test day (dates in the data's clock).
    cache_dir : str or Path, optional
        Per-model, per-day forecast cache; keyed by the data, the task and each model's parameters.
    workers : int
        Processes used (1 = in this process).
    progress : bool
        Show a tqdm progress bar on stderr.
    max_fill_hours : int
        Longest gap [h] filled by interpolation (see :func:`forecasting.frame.regularize_hourly`).
    day_step : int
        Forecast every ``day_step``-th test day only (1 = all days); a step prime to 7 cycles weekdays.

    Returns
    -------
    BacktestResult
    """
    if not models:
        raise ValueError("no models to backtest")
    days = test_days(test_start, test_end)
    end = days[-1] + 23 * HOUR
    days = days[:: max(1, day_step)]
    data = frame.loc[:end]
    if len(data) == 0 or data.index[-1] < end:
        last = data.index[-1].isoformat() if len(data) else "-"
        raise ForecastInputError(f"{task.target}: data end at {last}, before the test end {end.isoformat()}")
    observed = data[[task.target, *task.exog]].notna().all(axis=1).to_numpy()
    if observed.any() and not observed[0]:  # a series recorded later than the others: start where all are
        data = data.loc[data.index[int(observed.argmax())].ceil("D") :]
    if len(data) == 0 or data.index[0] >= days[0]:
        raise ForecastInputError(f"{task.target}: no history before the test start {days[0].date()}")
    data, fills = regularize_hourly(data, [task.target, *task.exog], max_fill_hours=max_fill_hours, name=task.target,
                                    seasonal_columns=task.exog)
    all_models = dict(models)
    all_models.setdefault(REFERENCE, SeasonalNaive(168, name=REFERENCE))
    # keyed by the whole input, not the test range, so that extending the range reuses computed days
    cache = Path(cache_dir) / _fingerprint(frame[[task.target, *task.exog]], task) if cache_dir else None
    state = {"frame": data, "task": task, "models": all_models, "cache": cache}
    bar = tqdm(total=len(days), desc=f"backtest {task.target}", disable=not progress, file=sys.stderr)
    results: dict[pd.Timestamp, dict[str, pd.DataFrame]] = {}
    try:
        if workers > 1:
            with mp.get_context("fork").Pool(workers, initializer=_init_worker, initargs=(state,)) as pool:
                for day, res in zip(days, pool.imap(_forecast_day, days, chunksize=4), strict=True):
                    results[day] = res
                    bar.update()
        else:
            _init_worker(state)
            for day in days:
                results[day] = _forecast_day(day)
                bar.update()
    finally:
        bar.close()
    return _collect(data, task, all_models, results, fills)


def _collect(
    data: pd.DataFrame,
    task: ForecastTask,
    models: Mapping[str, Model],
    results: Mapping[pd.Timestamp, Mapping[str, pd.DataFrame]],
    fills: list[FillReport],
) -> BacktestResult:
    parts: dict[str, pd.DataFrame] = {
        name: pd.concat([results[d][name] for d in sorted(results)]) for name in models
    }
    index = parts[REFERENCE].index
    out = pd.DataFrame({"actual": data[task.target].reindex(index)}, index=index)
    for name, df in parts.items():
        out[name] = df["forecast"].to_numpy()
    for name, df in parts.items():
        for col in df.columns.drop("forecast"):
            out[f"{name}:{col}"] = df[col].to_numpy()
    point = {name: out[name] for name in models}
    metrics = compute_metrics(out["actual"], point, out[REFERENCE])
    overall = metrics[metrics["period"] == "all"].set_index("model")["mae"]
    return BacktestResult(out, metrics, str(overall.idxmin()), fills)


def metrics_table(metrics: pd.DataFrame, columns: Iterable[str] = ("mae", "smape", "rmae")) -> str:
    """Plain-text table: one row per model and period."""
    cols = list(columns)
    view = metrics.set_index(["model", "period"])[cols]
    return view.to_string(float_format=lambda v: f"{v:.3f}" if np.isfinite(v) else "-")
