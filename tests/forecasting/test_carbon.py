"""Carbon-intensity pieces: the log/logit target transform and the Deepforkit generation-forecast reader."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest

from forecasting.errors import ForecastInputError
from forecasting.metrics import mape
from forecasting.models import Boosted, Ensemble, Forest, Lear, SeasonalNaive, Transformed, get_model
from forecasting.models.boost import (
    anchor_level,
    apply_edges,
    fit_last_value_pull,
    hourly_features,
    quantile_edges,
    recency_weights,
)
from forecasting.sources.deepforkit import _parse_deepforkit
from forecasting.sources.harmonized import CARBON_NEIGHBOURS, NEIGHBOURS
from forecasting.task import ForecastTask

TASK = ForecastTask("carbon_g_per_kwh", ("load_forecast_mw", "wind_forecast_mw"))


def carbon_frame(make_frame) -> pd.DataFrame:
    """A multiplicative series: intensity = exp(linear in load and wind), spanning a factor of ~10."""
    frame = make_frame(days=80)
    z = 2e-4 * (frame["load_forecast_mw"] - 40_000) - 1.2e-4 * (frame["wind_forecast_mw"] - 10_000)
    frame["carbon_g_per_kwh"] = 200.0 * np.exp(z)
    return frame


def split(frame: pd.DataFrame, day: str):
    start = pd.Timestamp(day, tz="UTC")
    return frame.loc[: start - pd.Timedelta(hours=1)], frame.loc[start : start + pd.Timedelta(hours=23)]


def test_log_lear_learns_a_multiplicative_relation_better_than_plain(make_frame):
    frame = carbon_frame(make_frame)
    history, future = split(frame, "2022-03-20")
    lear = Lear(windows_days=(56,), name="lear")
    plain = lear.predict(history, future[list(TASK.exog)], TASK)
    logged = Transformed(lear, "log").predict(history, future[list(TASK.exog)], TASK)
    actual = future["carbon_g_per_kwh"].to_numpy()
    naive = SeasonalNaive(24).predict(history, future[list(TASK.exog)], TASK)
    assert mape(actual, logged["forecast"].to_numpy()) < 0.2 * mape(actual, naive["forecast"].to_numpy())
    assert mape(actual, logged["forecast"].to_numpy()) < mape(actual, plain["forecast"].to_numpy())
    assert (logged["q10"] <= logged["q90"]).all() and (logged.to_numpy() > 0).all()


def test_log_transform_refuses_non_positive_history_naming_the_hour(make_frame):
    frame = carbon_frame(make_frame)
    frame.loc["2022-02-01 05:00":"2022-02-01 06:00", "carbon_g_per_kwh"] = 0.0
    history, future = split(frame, "2022-03-20")
    with pytest.raises(ForecastInputError, match=r"carbon_g_per_kwh must be > 0; 2 hour\(s\).*2022-02-01T05:00"):
        Transformed(SeasonalNaive(24), "log").predict(history, future[list(TASK.exog)], TASK)


def test_logit_round_trips_fractions():
    index = pd.date_range("2022-01-03", periods=24 * 10, freq="h", tz="UTC")
    share = pd.DataFrame({"share": 0.2 + 0.6 * (index.hour.to_numpy() / 23)}, index=index)
    task = ForecastTask("share")
    history, future = share.iloc[:-24], share.iloc[-24:, :0]
    out = Transformed(SeasonalNaive(24), "logit").predict(history, future, task)
    np.testing.assert_allclose(out["forecast"], share["share"].iloc[-48:-24].to_numpy(), rtol=1e-9)
    with pytest.raises(ValueError, match="log"):
        Transformed(SeasonalNaive(24), "sqrt")


def test_carbon_model_is_registered():
    model = get_model("lear_log")
    assert model.name == "lear_log" and isinstance(model, Transformed) and model.kind == "log"
    ens = get_model("lear_hgb_log")
    assert isinstance(ens, Ensemble) and ens.geometric
    assert [m.name for m in ens.members] == ["lear_log", "hgb_log"]
    production = get_model("lear_hgbra_log")
    assert isinstance(production, Ensemble) and production.geometric
    assert [m.name for m in production.members] == ["lear_log", "hgbr_log", "hgba_log"]
    trees = [m.model for m in production.members[1:] if isinstance(m, Transformed) and isinstance(m.model, Boosted)]
    assert len(trees) == 2 and all(t.recent for t in trees) and [t.anchored for t in trees] == [False, True]


def test_boosted_learns_an_interaction_lear_cannot(make_frame):
    """Intensity jumps when load exceeds a threshold while wind is low (an import regime): trees find the
    switch, the per-hour linear models only a slope."""
    frame = make_frame(days=120, seed=3)
    regime = (frame["load_forecast_mw"] > 42_000) & (frame["wind_forecast_mw"] < 10_000)
    frame["carbon_g_per_kwh"] = 150.0 * np.where(regime, 2.0, 1.0) * np.exp(
        np.random.default_rng(3).normal(0, 0.02, len(frame)))
    errors = {}
    for model in (get_model("hgb_log"), get_model("lear_log")):
        fc, actual = [], []
        for day in ("2022-04-10", "2022-04-17", "2022-04-24"):
            history, future = split(frame, day)
            out = model.predict(history, future[list(TASK.exog)], TASK)
            assert list(out.columns) == list(TASK.columns) and (out["q10"] <= out["q90"]).all()
            fc.append(out["forecast"].to_numpy())
            actual.append(future["carbon_g_per_kwh"].to_numpy())
        errors[model.name] = mape(np.concatenate(actual), np.concatenate(fc))
    assert errors["hgb_log"] < 5.0 and errors["hgb_log"] < 0.5 * errors["lear_log"]


def test_forest_beats_the_daily_naive_and_depends_only_on_its_seed(make_frame):
    """On the import-regime series the extremely randomised trees beat yesterday's profile by half; a fit is
    fixed by its data and seed."""
    frame = make_frame(days=120, seed=3)
    regime = (frame["load_forecast_mw"] > 42_000) & (frame["wind_forecast_mw"] < 10_000)
    frame["carbon_g_per_kwh"] = 150.0 * np.where(regime, 2.0, 1.0) * np.exp(
        np.random.default_rng(3).normal(0, 0.02, len(frame)))
    model, naive = Transformed(Forest(trees=30), "log"), get_model("naive_daily")
    fc, naive_fc, actual = [], [], []
    for day in ("2022-04-10", "2022-04-17"):
        history, future = split(frame, day)
        out = model.predict(history, future[list(TASK.exog)], TASK)
        assert list(out.columns) == list(TASK.columns) and (out["q10"] <= out["q90"]).all()
        fc.append(out["forecast"].to_numpy())
        naive_fc.append(naive.predict(history, future[list(TASK.exog)], TASK)["forecast"].to_numpy())
        actual.append(future["carbon_g_per_kwh"].to_numpy())
    errors = [mape(np.concatenate(actual), np.concatenate(f)) for f in (fc, naive_fc)]
    assert errors[0] < 10.0 and errors[0] < 0.5 * errors[1], errors
    history, future = split(frame, "2022-04-17")
    again = model.predict(history, future[list(TASK.exog)], TASK)["forecast"].to_numpy()
    other = Transformed(Forest(trees=30, seed=1), "log").predict(history, future[list(TASK.exog)], TASK)
    np.testing.assert_array_equal(again, fc[-1])
    assert not np.array_equal(other["forecast"].to_numpy(), fc[-1])


def test_boosted_is_deterministic_and_forecasts_two_days(make_frame):
    frame = carbon_frame(make_frame)
    start = pd.Timestamp("2022-03-15", tz="UTC")
    history, future = frame.loc[: start - pd.Timedelta(hours=1)], frame.loc[start : start + pd.Timedelta(hours=47)]
    model = Transformed(Boosted(window_days=56, iterations=50), "log")
    a = model.predict(history, future[list(TASK.exog)], TASK)
    b = model.predict(history, future[list(TASK.exog)], TASK)
    assert len(a) == 48 and np.isfinite(a.to_numpy()).all() and (a["forecast"] > 0).all()
    pd.testing.assert_frame_equal(a, b)


def test_absolute_error_trees_forecast_the_median_through_one_sided_spikes(make_frame):
    """15 % of the hours are tripled at random (no regressor explains them): squared-error trees forecast the
    mean of log and so sit above every ordinary hour, absolute-error trees forecast the median, the ordinary level."""
    frame = make_frame(days=100, seed=5)
    z = 2e-4 * (frame["load_forecast_mw"] - 40_000) - 1.2e-4 * (frame["wind_forecast_mw"] - 10_000)
    ordinary = 200.0 * np.exp(z)
    frame["carbon_g_per_kwh"] = ordinary * np.where(np.random.default_rng(5).random(len(frame)) < 0.15, 3.0, 1.0)
    errors = {}
    for loss in ("squared_error", "absolute_error"):
        model = Transformed(Boosted(window_days=56, iterations=100, differences=True, loss=loss), "log")
        fc, actual = [], []
        for day in ("2022-04-01", "2022-04-08"):
            history, future = split(frame, day)
            fc.append(model.predict(history, future[list(TASK.exog)], TASK)["forecast"].to_numpy())
            actual.append(ordinary.loc[future.index].to_numpy())
        errors[loss] = mape(np.concatenate(actual), np.concatenate(fc))
    assert errors["absolute_error"] < 10.0 and errors["absolute_error"] < 0.6 * errors["squared_error"]


def test_recency_weights_halve_per_half_life():
    np.testing.assert_allclose(recency_weights(np.array([10, 40, 70]), 70, 30.0), [0.25, 0.5, 1.0])
    with pytest.raises(ValueError, match="half_life_days"):
        recency_weights(np.array([1, 2]), 2, 0.0)


def test_recency_weighted_trees_follow_a_regime_change(make_frame):
    """The intensity's response to a regressor reverses 23 days before the first forecast day (an import pattern
    that turned): trees that weigh all 110 days alike still forecast mostly the old response, with a 7-day
    half-life the new one."""
    frame = make_frame(days=120, seed=4)
    z = np.random.default_rng(4).normal(size=len(frame))
    frame["wind_forecast_mw"] = 10_000 + 3_000 * z
    response = np.where(frame.index < pd.Timestamp("2022-04-01", tz="UTC"), 0.3, -0.3)
    frame["carbon_g_per_kwh"] = 200.0 * np.exp(response * z)
    errors = {}
    for half_life in (None, 7.0):
        model = Transformed(Boosted(window_days=364, iterations=100, differences=True, half_life_days=half_life), "log")
        fc, actual = [], []
        for day in ("2022-04-24", "2022-04-28", "2022-05-01"):
            history, future = split(frame, day)
            out = model.predict(history, future[list(TASK.exog)], TASK)
            assert (out["q10"] <= out["q90"]).all()
            fc.append(out["forecast"].to_numpy())
            actual.append(future["carbon_g_per_kwh"].to_numpy())
        errors[half_life] = mape(np.concatenate(actual), np.concatenate(fc))
    assert errors[7.0] < 8.0 and errors[7.0] < 0.5 * errors[None], errors


def test_last_value_pull_recovers_a_decaying_deviation():
    """Hour h keeps rho ** (h + 1) of yesterday's last deviation from yesterday's mean: the fitted pull is that
    share per hour, and the anchor level is the mean plus that share of the deviation; a flat history has none."""
    rng = np.random.default_rng(1)
    yesterday = rng.normal(size=(50, 24))
    level = yesterday.mean(axis=1, keepdims=True)
    share = 0.8 ** np.arange(1, 25)
    y = level + (yesterday[:, -1:] - level) * share
    np.testing.assert_allclose(fit_last_value_pull(yesterday, y), share, atol=1e-12)
    np.testing.assert_allclose(anchor_level(yesterday, share), y)
    np.testing.assert_allclose(anchor_level(yesterday, None), np.repeat(level, 24, axis=1))
    np.testing.assert_array_equal(fit_last_value_pull(np.ones((10, 24)), rng.normal(size=(10, 24))), np.zeros(24))


def test_anchored_trees_carry_a_level_that_yesterday_evening_announced(make_frame):
    """Each day's level (random, 30 % spread in log) starts at 20:00 UTC the day before and no regressor
    explains it: through 19:00 the last observed value tells it. Trees forecasting the deviation from
    yesterday's mean rebuild that near-identity from constant leaves; anchored at the fitted pull they need not."""
    frame = make_frame(days=120, seed=3)
    rng = np.random.default_rng(3)
    day_of_level = (frame.index + pd.Timedelta(hours=4)).floor("D")
    levels = pd.Series(rng.normal(0, 0.3, len(day_of_level.unique())), index=day_of_level.unique())
    shape = 0.1 * np.sin(2 * np.pi * frame.index.hour.to_numpy() / 24)
    frame["carbon_g_per_kwh"] = 200.0 * np.exp(levels.reindex(day_of_level).to_numpy() + shape
                                               + rng.normal(0, 0.01, len(frame)))
    errors = {}
    for anchored in (False, True):
        model = Transformed(Boosted(iterations=100, differences=True, recent=True, anchored=anchored), "log")
        fc, actual = [], []
        for day in pd.date_range("2022-04-10", periods=6, freq="3D").strftime("%Y-%m-%d"):
            history, future = split(frame, day)
            out = model.predict(history, future[list(TASK.exog)], TASK)
            assert (out["q10"] <= out["q90"]).all() and (out["forecast"] > 0).all()
            fc.append(out["forecast"].to_numpy()[:20])  # 20:00-23:00 belong to the next, unannounced level
            actual.append(future["carbon_g_per_kwh"].to_numpy()[:20])
        errors[anchored] = mape(np.concatenate(actual), np.concatenate(fc))
    assert errors[True] < 1.5 and errors[True] < 0.6 * errors[False], errors


def test_quantile_edges_bin_in_order_with_at_most_255_values():
    values = np.column_stack([np.random.default_rng(0).normal(size=5000), np.repeat([1.0, 2.0, 3.0], [2000, 2000, 1000])])
    edges = quantile_edges(values)
    binned = apply_edges(values, edges)
    assert len(np.unique(binned[:, 0])) == 255 and len(np.unique(binned[:, 1])) == 3
    order = np.argsort(values[:, 0])
    assert (np.diff(binned[order, 0]) >= 0).all()  # monotone: a split on bins is a split on values
    np.testing.assert_array_equal(apply_edges(np.array([[-99.0, 0.0], [99.0, 9.0]]), edges), [[0, 0], [254, len(edges[1])]])


def test_hourly_features_unfold_a_day_and_its_changes():
    """Two target lags, one regressor on days d and d-1: hour h of the unfolded row holds that hour's values,
    and with ``differences`` the target's deviations from yesterday's mean and the regressor's day-to-day change,
    with ``recent`` where yesterday's last value stands against yesterday's mean, its last hour but one and hour h."""
    rng = np.random.default_rng(0)
    target1, target2, exog0, exog1 = (rng.normal(size=24) for _ in range(4))
    dow = np.eye(7)[2]
    x = np.concatenate([target1, target2, exog0, exog1, dow])[None, :]
    plain = hourly_features(x, 2, 1, 2)
    rows = hourly_features(x, 2, 1, 2, differences=True)
    assert plain.shape == (24, 2 + 4 + 3) and rows.shape == (24, 9 + 2 + 2)
    h = 5
    np.testing.assert_allclose(rows[h, :6], [h, 2, target1[h], target2[h], exog0[h], exog1[h]])
    np.testing.assert_allclose(rows[h, 6:9], [target1.mean(), target1[-1], exog0.mean()])
    np.testing.assert_allclose(rows[h, 9:], [target1[h] - target1.mean(), target2[h] - target1.mean(),
                                             exog0[h] - exog1[h], exog0.mean() - exog1.mean()])
    recent = hourly_features(x, 2, 1, 2, differences=True, recent=True)
    np.testing.assert_array_equal(recent[:, :13], rows)
    np.testing.assert_allclose(recent[h, 13:], [target1[-1] - target1.mean(), target1[-1] - target1[-2],
                                                target1[-1] - target1[h]])


def test_geometric_ensemble_is_the_mean_of_logs(make_frame):
    frame = carbon_frame(make_frame)
    history, future = split(frame, "2022-03-20")
    a, b = Transformed(SeasonalNaive(24), "log"), Transformed(SeasonalNaive(168, name="w"), "log", name="w")
    ens = Ensemble((a, b), geometric=True)
    out = ens.predict(history, future[list(TASK.exog)], TASK)
    fa, fb = (m.predict(history, future[list(TASK.exog)], TASK) for m in (a, b))
    np.testing.assert_allclose(out.to_numpy(), np.sqrt(fa.to_numpy() * fb.to_numpy()))
    assert (out["q10"] <= out["forecast"]).all() and (out["forecast"] <= out["q90"]).all()
    with pytest.raises(ForecastInputError, match="positive"):
        ens.combine([fa, -fb])


RAW = """timestamp_cet_local,price_eur_mwh,load_forecast_mw,generation_forecast_mw
2022-03-27 00:00:00,10,100,90
2022-03-27 01:00:00,11,101,91
2022-03-27 02:00:00,11,101,91
2022-03-27 03:00:00,12,102,0
2022-10-30 01:00:00,20,200,190
2022-10-30 02:00:00,21,201,191
2022-10-30 03:00:00,22,202,192
"""


def test_deepforkit_wall_clock_becomes_utc_across_both_dst_changes():
    frame, meta = _parse_deepforkit(pd.read_csv(io.StringIO(RAW)), "CH")
    spring = frame.loc["2022-03-26 23:00":"2022-03-27 01:00", "generation_forecast_mw"]
    # 00:00 and 01:00 CET are 23:00 and 00:00 UTC; the synthetic 02:00 row is dropped; 03:00 CEST = 01:00 UTC
    assert list(pd.DatetimeIndex(spring.index).strftime("%H")) == ["23", "00", "01"]
    assert spring.iloc[:2].tolist() == [90.0, 91.0] and np.isnan(spring.iloc[2])  # a zero is missing data
    autumn = frame.loc["2022-10-29 23:00":"2022-10-30 02:00", "price_eur_mwh"]
    # 01:00 CEST = 23:00 UTC; the one 02:00 row goes to 00:00 UTC (CEST) and fills 01:00 UTC (CET); 03:00 CET = 02:00
    assert autumn.tolist() == [20.0, 21.0, 21.0, 22.0]
    assert meta["zone"] == "CH" and meta["zero_set_missing"] == 1


def test_deepforkit_without_time_column_is_refused():
    with pytest.raises(ForecastInputError, match="timestamp_cet_local"):
        _parse_deepforkit(pd.DataFrame({"price_eur_mwh": [1.0]}), "CH")


def test_neighbours_are_symmetric_and_carbon_ones_are_neighbours():
    for zone, others in NEIGHBOURS.items():
        for other in others:
            assert zone in NEIGHBOURS[other], (zone, other)
    assert set(CARBON_NEIGHBOURS) == set(NEIGHBOURS)
    assert all(set(CARBON_NEIGHBOURS[z]) <= set(NEIGHBOURS[z]) for z in NEIGHBOURS)
