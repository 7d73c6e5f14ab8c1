import json

import numpy as np
import pytest
from click.testing import CliRunner

from app.commands.forecast import command
from forecasting.backtest import compute_metrics, run_backtest
from forecasting.errors import ForecastInputError
from forecasting.models import Lear, Model, SeasonalNaive
from forecasting.task import ForecastTask

TASK = ForecastTask("price_eur_mwh", ("load_forecast_mw", "wind_forecast_mw"))


class CountingNaive(SeasonalNaive):
    calls = 0

    def predict(self, history, future, task):
        type(self).calls += 1
        return SeasonalNaive.predict(self, history, future, task)


def test_backtest_uses_only_past_data(frame):
    result = run_backtest(frame, TASK, {"naive_daily": SeasonalNaive(24)}, "2022-03-01", "2022-03-03", progress=False)
    fc = result.forecasts
    assert len(fc) == 72
    # the daily naive forecast of each hour is the actual value 24 h earlier
    np.testing.assert_allclose(fc["naive_daily"].to_numpy(), frame["price_eur_mwh"].shift(24).loc[fc.index].to_numpy())
    assert set(result.metrics["model"]) == {"naive_daily", "naive_weekly"}


def test_backtest_picks_the_better_model_and_rmae(frame):
    models: dict[str, Model] = {"lear": Lear(), "naive_daily": SeasonalNaive(24)}
    result = run_backtest(frame, TASK, models, "2022-03-01", "2022-03-02", progress=False)
    overall = result.metrics[result.metrics["period"] == "all"].set_index("model")
    assert result.best == "lear"
    assert overall.loc["naive_weekly", "rmae"] == pytest.approx(1.0)
    assert overall["rmae"]["lear"] < 1.0


def test_backtest_cache_skips_computed_days(frame, tmp_path):
    CountingNaive.calls = 0
    model = CountingNaive(24, name="counting")
    run_backtest(frame, TASK, {"c": model}, "2022-03-01", "2022-03-02", cache_dir=tmp_path, progress=False)
    assert CountingNaive.calls == 2
    again = run_backtest(frame, TASK, {"c": model}, "2022-03-01", "2022-03-03", cache_dir=tmp_path, progress=False)
    assert CountingNaive.calls == 3  # only the new day was computed
    assert len(again.forecasts) == 72


def test_backtest_in_two_processes_matches_one(frame):
    models = {"naive_daily": SeasonalNaive(24)}
    one = run_backtest(frame, TASK, models, "2022-03-01", "2022-03-04", progress=False)
    two = run_backtest(frame, TASK, models, "2022-03-01", "2022-03-04", workers=2, progress=False)
    np.testing.assert_allclose(one.forecasts["naive_daily"], two.forecasts["naive_daily"])


def test_backtest_refuses_a_test_period_beyond_the_data(frame):
    with pytest.raises(ForecastInputError, match="before the test end"):
        run_backtest(frame, TASK, {"n": SeasonalNaive(24)}, "2022-03-10", "2022-04-30", progress=False)


def test_backtest_starts_where_a_later_recorded_series_begins(frame):
    """A target recorded from 10:00 on 2022-01-20 in a frame from 2022-01-03: the history starts at the next
    midnight and the forecasts are those of the frame cut there; a target that begins after the test start has
    no history and is refused."""
    late = frame.copy()
    late.loc[: "2022-01-20 09:00", "price_eur_mwh"] = np.nan
    models = {"lear": Lear(windows_days=(28,))}
    result = run_backtest(late, TASK, models, "2022-03-01", "2022-03-01", progress=False)
    cut = run_backtest(frame.loc["2022-01-21":], TASK, models, "2022-03-01", "2022-03-01", progress=False)
    np.testing.assert_allclose(result.forecasts["lear"], cut.forecasts["lear"])
    late.loc[: "2022-02-28 12:00", "price_eur_mwh"] = np.nan
    with pytest.raises(ForecastInputError, match="no history before the test start"):
        run_backtest(late, TASK, models, "2022-03-01", "2022-03-01", progress=False)

def test_metrics_per_year(frame):
    idx = frame.index[:48]
    actual = frame["price_eur_mwh"].iloc[:48]
    m = compute_metrics(actual, {"same": actual, "off": actual + 2.0}, actual + 4.0)
    off = m[(m["model"] == "off") & (m["period"] == "all")].iloc[0]
    assert off["mae"] == pytest.approx(2.0) and off["rmae"] == pytest.approx(0.5)
    assert len(idx) == off["hours"]


def test_cli_backtest_json_last_line(frame, tmp_path):
    path = tmp_path / "market.csv"
    out = frame.copy()
    out.index = out.index.tz_localize(None)  # epftoolbox-like: naive local timestamps, 24 a day
    out.to_csv(path, index_label="timestamp_local")
    result = CliRunner().invoke(command, [
        "backtest", "--data", str(path), "--test-start", "2022-03-01", "--test-end", "2022-03-01",
        "--models", "naive_daily,lear", "--out", str(tmp_path / "out"), "--json", "--no-progress",
    ])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output.strip().splitlines()[-1])
    assert payload["best"] == "lear"
    assert set(payload["models"]) == {"naive_daily", "lear", "naive_weekly"}
    assert set(payload["models"]["lear"]) == {"mae", "smape", "rmae"}
    assert (tmp_path / "out" / "forecasts.csv").exists()


def test_cli_unknown_model_is_a_usage_error(frame, tmp_path):
    path = tmp_path / "m.csv"
    frame.to_csv(path, index_label="time")
    result = CliRunner().invoke(command, ["backtest", "--data", str(path), "--test-start", "2022-03-01",
                                          "--test-end", "2022-03-01", "--models", "arima"])
    assert result.exit_code == 2 and "valid:" in result.output
