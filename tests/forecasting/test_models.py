import numpy as np
import pandas as pd
import pytest

from forecasting.errors import ForecastInputError
from forecasting.frame import regularize_hourly
from forecasting.metrics import mae, smape
from forecasting.models import Ensemble, Lear, Persistence, SeasonalNaive, get_model
from forecasting.task import ForecastTask
from forecasting.transforms import AsinhScaler

TASK = ForecastTask("price_eur_mwh", ("load_forecast_mw", "wind_forecast_mw"))


def split(frame: pd.DataFrame, day: str, days: int = 1):
    start = pd.Timestamp(day, tz="UTC")
    history = frame.loc[: start - pd.Timedelta(hours=1)]
    future = frame.loc[start : start + pd.Timedelta(hours=24 * days - 1)]
    return history, future


def test_seasonal_naive_repeats_last_day_and_week(frame):
    history, future = split(frame, "2022-03-01")
    daily = SeasonalNaive(24).predict(history, future[list(TASK.exog)], TASK)
    weekly = SeasonalNaive(168).predict(history, future[list(TASK.exog)], TASK)
    np.testing.assert_allclose(daily["forecast"], history["price_eur_mwh"].iloc[-24:].to_numpy())
    np.testing.assert_allclose(weekly["forecast"], history["price_eur_mwh"].iloc[-168:-144].to_numpy())
    assert list(daily.columns) == ["forecast", "q10", "q50", "q90"]
    assert (daily["q10"] <= daily["q90"]).all()


def test_persistence_holds_the_last_value(frame):
    history, future = split(frame, "2022-03-01")
    out = Persistence().predict(history, future[list(TASK.exog)], TASK)
    assert (out["forecast"] == history["price_eur_mwh"].iloc[-1]).all()


def test_lear_learns_the_regressors_and_beats_naive(frame):
    history, future = split(frame, "2022-03-10")
    out = Lear().predict(history, future[list(TASK.exog)], TASK)
    actual = future["price_eur_mwh"].to_numpy()
    naive = SeasonalNaive(24).predict(history, future[list(TASK.exog)], TASK)
    assert mae(actual, out["forecast"].to_numpy()) < 0.75 * mae(actual, naive["forecast"].to_numpy())
    assert ((out["q10"] <= out["forecast"]) & (out["forecast"] <= out["q90"])).mean() > 0.9


def test_lear_two_day_horizon_is_recursive(frame):
    history, future = split(frame, "2022-03-10", days=2)
    out = Lear().predict(history, future[list(TASK.exog)], TASK)
    assert len(out) == 48 and np.isfinite(out.to_numpy()).all()


def test_lear_handles_negative_prices(frame):
    shifted = frame.assign(price_eur_mwh=frame["price_eur_mwh"] - 60.0)  # mostly negative
    assert (shifted["price_eur_mwh"] < 0).mean() > 0.5
    history, future = split(shifted, "2022-03-10")
    out = Lear().predict(history, future[list(TASK.exog)], TASK)
    assert smape(future["price_eur_mwh"].to_numpy(), out["forecast"].to_numpy()) < 20


def test_lear_constant_series_forecasts_the_constant(frame):
    const = frame.assign(price_eur_mwh=42.0)
    history, future = split(const, "2022-03-10")
    out = Lear().predict(history, future[list(TASK.exog)], TASK)
    np.testing.assert_allclose(out["forecast"], 42.0)


def test_missing_regressor_is_named(frame):
    history, future = split(frame, "2022-03-10")
    fut = future[list(TASK.exog)].copy()
    fut.iloc[5, 1] = np.nan
    with pytest.raises(ForecastInputError, match=r"wind_forecast_mw.*2022-03-10T05:00"):
        Lear().predict(history, fut, TASK)
    with pytest.raises(ForecastInputError, match="load_forecast_mw"):
        Lear().predict(history, future[["wind_forecast_mw"]], TASK)


def test_too_little_history_is_refused(frame):
    history, future = split(frame.loc[:"2022-01-20"], "2022-01-20")
    with pytest.raises(ForecastInputError, match="too little history"):
        Lear().predict(history, future[list(TASK.exog)], TASK)


def test_whole_day_models_need_midnight_start(frame):
    start = pd.Timestamp("2022-03-10 05:00", tz="UTC")
    history = frame.loc[: start - pd.Timedelta(hours=1)]
    future = frame.loc[start : start + pd.Timedelta(hours=23), list(TASK.exog)]
    with pytest.raises(ForecastInputError, match="00:00"):
        Lear().predict(history, future, TASK)


def test_ensemble_averages_members(frame):
    history, future = split(frame, "2022-03-01")
    a, b = SeasonalNaive(24), SeasonalNaive(168, name="w")
    out = Ensemble((a, b)).predict(history, future[list(TASK.exog)], TASK)
    expected = (a.predict(history, future, TASK)["forecast"] + b.predict(history, future, TASK)["forecast"]) / 2
    np.testing.assert_allclose(out["forecast"], expected)


def test_unknown_model_lists_valid_names():
    with pytest.raises(KeyError, match=r"valid: .*lear"):
        get_model("arima")


def test_asinh_scaler_round_trips_spikes_and_negatives():
    values = np.array([[-500.0], [-10.0], [0.0], [35.0], [40.0], [3000.0]])
    scaler = AsinhScaler.fit(values)
    np.testing.assert_allclose(scaler.inverse(scaler.transform(values)), values)
    assert np.ptp(scaler.transform(values)) < 0.05 * np.ptp(values)


def test_regularize_fills_short_gaps_and_names_long_ones(frame):
    holed = frame.drop(frame.index[100:102])
    out, fills = regularize_hourly(holed, ["price_eur_mwh"], max_fill_hours=3, name="NP")
    assert len(out) == len(frame) and fills[0].hours == 2
    assert np.isfinite(out["price_eur_mwh"]).all()
    with pytest.raises(ForecastInputError, match=r"NP: column 'price_eur_mwh' is missing 5 h from 2022-01-07T04:00"):
        regularize_hourly(frame.drop(frame.index[100:105]), ["price_eur_mwh"], max_fill_hours=3, name="NP")


def test_regularize_fills_regressor_gaps_from_last_week(frame):
    holed = frame.copy()
    holed.iloc[500:524, 1] = np.nan  # a day of load forecast never published
    out, fills = regularize_hourly(holed, list(frame.columns), seasonal_columns=["load_forecast_mw"])
    np.testing.assert_allclose(out["load_forecast_mw"].iloc[500:524], frame["load_forecast_mw"].iloc[332:356])
    assert fills[0].column == "load_forecast_mw" and fills[0].hours == 24


def test_naive_timestamps_are_refused(frame):
    naive = frame.tz_localize(None)
    with pytest.raises(ForecastInputError, match="timezone-aware"):
        regularize_hourly(naive, ["price_eur_mwh"])


def test_prophet_uses_regressors_and_returns_ordered_quantiles(frame):
    pytest.importorskip("prophet")
    history, future = split(frame.loc["2022-01-20":], "2022-03-01")
    out = get_model("prophet").predict(history, future[list(TASK.exog)], TASK)
    actual = future["price_eur_mwh"].to_numpy()
    naive = SeasonalNaive(168).predict(history, future[list(TASK.exog)], TASK)
    assert mae(actual, out["forecast"].to_numpy()) < mae(actual, naive["forecast"].to_numpy())
    assert (out["q10"] <= out["q50"]).all() and (out["q50"] <= out["q90"]).all()
