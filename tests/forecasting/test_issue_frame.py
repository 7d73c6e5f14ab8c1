"""What a forecast issued at a given time is given (forecasting.frame.issue_frame), shared by the service's refresh
and the closed-loop replay."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from forecasting.errors import ForecastInputError
from forecasting.frame import issue_frame, regularize_hourly

NOW = pd.Timestamp("2022-03-10 13:00", tz="UTC")


def _series(start: str, end: str, seed: int = 0) -> pd.Series:
    idx = pd.date_range(start, end, freq="h", tz="UTC", inclusive="left")
    return pd.Series(np.random.default_rng(seed).uniform(10, 20, len(idx)), index=idx)


def test_history_stops_at_the_last_complete_day_and_unpublished_regressors_come_from_the_week_before():
    target = _series("2022-01-01", "2022-03-10 12:00")  # measured up to noon of the issue day
    load = _series("2022-01-01", "2022-03-12", seed=1)  # day-ahead: published through tomorrow
    hist, future, filled = issue_frame({"y": target, "load": load}, NOW, 48, name="t")
    assert hist.index[-1] == pd.Timestamp("2022-03-09 23:00", tz="UTC")
    assert future.index[0] == pd.Timestamp("2022-03-10 00:00", tz="UTC")
    assert future.index[-1] >= NOW + pd.Timedelta(hours=47)
    assert len(future) % 24 == 0
    late = future.index >= pd.Timestamp("2022-03-12", tz="UTC")
    assert filled == int(late.sum())
    week_before = load.reindex(future.index[late] - pd.Timedelta(days=7)).to_numpy()
    assert np.allclose(future.loc[late, "load"].to_numpy(), week_before)


def test_an_old_gap_too_long_to_repair_shortens_the_history_instead_of_failing():
    target = _series("2021-01-01", "2022-03-10")
    load = _series("2021-01-01", "2022-03-12", seed=1)
    load = load.drop(load.loc["2021-06-01":"2021-06-14"].index)  # two weeks: the week before is missing too
    with pytest.raises(ForecastInputError, match="'load' is missing"):
        regularize_hourly(pd.DataFrame({"y": target, "load": load}).loc[:"2022-03-09 23:00"], ["y", "load"],
                          seasonal_columns=["load"])
    hist, _, _ = issue_frame({"y": target, "load": load}, NOW, 24, name="t")
    assert hist.index[0] == pd.Timestamp("2021-06-15", tz="UTC")
    assert np.isfinite(hist.to_numpy()).all()
    recent = load.drop(load.loc["2022-03-01":"2022-03-09 23:00"].index)  # a hole up to the issue still fails
    with pytest.raises(ForecastInputError, match="'load' is missing"):
        issue_frame({"y": target, "load": recent}, NOW, 24, name="t")


def test_a_regressor_hour_missing_at_the_end_of_the_history_comes_from_the_week_before():
    """A single missing (or 0, read as missing) hour of a day-ahead regressor at the last hour of the history
    cannot be interpolated; it used to fail the whole refresh (DE's load forecast on 2022-02-21 and 2022-03-23 23:00
    UTC). It is filled like an unpublished hour, from the same hour a week before, and reported; the target is not."""
    target = _series("2022-01-01", "2022-03-10 12:00")
    load = _series("2022-01-01", "2022-03-12", seed=1)
    hole = pd.Timestamp("2022-03-09 23:00", tz="UTC")
    hist, _, _ = issue_frame({"y": target, "load": load.drop(hole)}, NOW, 24, name="t")
    assert hist.loc[hole, "load"] == load[hole - pd.Timedelta(days=7)]
    frame = pd.DataFrame({"y": target, "load": load}).loc[:hole]
    _, reports = regularize_hourly(frame.assign(load=frame["load"].where(frame.index != hole)), ["y", "load"],
                                   seasonal_columns=["load"])
    assert [(r.column, r.hours) for r in reports] == [("load", 1)]
    with pytest.raises(ForecastInputError, match="'y' is missing 1 h"):  # a missing target hour still fails
        regularize_hourly(frame.assign(y=frame["y"].where(frame.index != hole)), ["y", "load"],
                          seasonal_columns=["load"])
