import numpy as np
import pandas as pd
import pytest

from forecasting.errors import ForecastInputError
from forecasting.sources import read_harmonized, read_series_csv
from forecasting.sources.electricitymaps import _parse_api, read_electricitymaps
from forecasting.sources.energycharts import _parse_price, read_energycharts
from forecasting.sources.entsoe import read_entsoe_csv
from forecasting.sources.watttime import read_watttime


def test_energycharts_price_quarter_hours_become_hourly_means(data_dir):
    frame, meta = read_energycharts(data_dir / "energycharts_price.json", "price")
    assert str(pd.DatetimeIndex(frame.index).tz) == "UTC"
    assert list(frame.index) == list(pd.date_range("2024-01-01", periods=2, freq="h", tz="UTC"))
    assert frame["price_eur_mwh"].tolist() == [63.0, -2.0]  # negative prices kept
    assert meta["unit"] == "EUR/MWh"


def test_energycharts_price_rejects_other_units():
    with pytest.raises(ForecastInputError, match="unit"):
        _parse_price({"unix_seconds": [0], "price": [1.0], "unit": "USD / MWh"})


def test_energycharts_public_power_renewable_share_excludes_load_and_trade(data_dir):
    frame, meta = read_energycharts(data_dir / "energycharts_public_power.json", "public_power")
    # hour 0: renewables 1000 + 4000 + 20000 = 25000 of 36000 produced
    assert frame["renewable_share"].iloc[0] == pytest.approx(25_000 / 36_000)
    assert "Wind onshore" in meta["renewable_types"] and "Load" not in meta["renewable_types"]


def test_electricitymaps_history_and_forecast(data_dir):
    hist, meta = read_electricitymaps(data_dir / "electricitymaps_history.json")
    assert hist["carbon_intensity_g_per_kwh"].tolist() == [302, 310, 295, 288]
    assert hist["estimated"].tolist() == [False, False, False, True]
    assert meta["zone"] == "DE" and meta["emission_factor"] == "lifecycle"
    fc, meta = read_electricitymaps(data_dir / "electricitymaps_forecast.json")
    assert fc.index[0] == pd.Timestamp("2024-01-02", tz="UTC") and meta["zone"] == "FR"


def test_electricitymaps_portal_csv_shares_are_fractions(data_dir):
    frame, _ = read_electricitymaps(data_dir / "electricitymaps_portal.csv", zone="FR")
    assert frame["carbon_intensity_g_per_kwh"].iloc[0] == pytest.approx(58.3)
    assert frame["renewable_share"].iloc[0] == pytest.approx(0.223)
    assert frame["low_carbon_share"].iloc[2] == pytest.approx(0.945)


def test_electricitymaps_empty_history_names_the_zone():
    with pytest.raises(ForecastInputError, match="no points for zone BE"):
        _parse_api({"zone": "BE", "history": []})


def test_watttime_converts_lbs_per_mwh_and_averages_five_minutes(data_dir):
    frame, meta = read_watttime(data_dir / "watttime_forecast.json")
    assert len(frame) == 2 and meta["region"] == "CAISO_NORTH"
    expected = np.mean([900.0 + m / 5 for m in range(0, 60, 5)]) * 0.45359237
    assert frame["moer_g_per_kwh"].iloc[0] == pytest.approx(expected)


def test_entsoe_csv_across_spring_dst_change(data_dir):
    frame, _ = read_entsoe_csv(data_dir / "entsoe_de_lu.csv", zone="DE_LU")
    # 01:00+01:00 and 03:00+02:00 are consecutive UTC hours 00:00 and 01:00
    assert list(frame.index) == list(pd.date_range("2024-03-31 00:00", periods=2, freq="h", tz="UTC"))
    assert frame["price_eur_mwh"].tolist() == [51.5, 55.5]
    assert frame["wind_onshore_forecast_mw"].tolist() == [15_000, 16_000]


def test_epftoolbox_format_loads_without_flags(data_dir):
    frame, meta = read_series_csv(data_dir / "epftoolbox_small.csv")
    assert meta["format"] == "epftoolbox" and meta["wall_clock"]
    assert meta["target"] == "price_eur_mwh"
    assert meta["exog"] == ["load_forecast_mw", "wind_forecast_mw"]
    # 2018-03-25 is a DST day in Europe but the file keeps 24 wall-clock hours
    assert len(frame.loc["2018-03-25"]) == 24


def test_generic_csv_with_flags(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("when,co2,temp\n2024-01-01T00:00:00+01:00,100,3\n2024-01-01T01:00:00+01:00,110,4\n")
    frame, meta = read_series_csv(path, time_col="when", target_col="co2", exog_cols=["temp"])
    assert frame.index[0] == pd.Timestamp("2023-12-31 23:00", tz="UTC")
    assert list(frame.columns) == ["co2", "temp"] and meta["exog"] == ["temp"]


def test_generic_csv_errors_name_the_column_and_line(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("time,price\n2024-01-01 00:00,1\nnot a time,2\n")
    with pytest.raises(ForecastInputError, match="line 3"):
        read_series_csv(path)
    path.write_text("time,price\n2024-01-01 00:00,1\n2024-01-01 01:00,2\n")
    with pytest.raises(ForecastInputError, match="'load'"):
        read_series_csv(path, exog_cols=["load"])


def test_generic_csv_offsets_that_change_at_dst_are_instants(tmp_path):
    """The autumn change written with offsets: 02:00+02:00 then 02:00+01:00 are two hours, not a repeat; a file
    that drops the offset on one row is refused at that line."""
    path = tmp_path / "dst.csv"
    path.write_text("time,price\n2023-10-29T01:00:00+02:00,1\n2023-10-29T02:00:00+02:00,2\n"
                    "2023-10-29T02:00:00+01:00,3\n2023-10-29T03:00:00+01:00,4\n")
    frame, meta = read_series_csv(path)
    assert list(frame.index) == list(pd.date_range("2023-10-28 23:00", periods=4, freq="h", tz="UTC"))
    assert frame["price"].tolist() == [1.0, 2.0, 3.0, 4.0] and "offsets" in meta["timezone"]
    path.write_text("time,price\n2023-10-29T01:00:00+02:00,1\n2023-10-29T02:00:00+02:00,2\n"
                    "2023-10-29 02:00,3\n2023-10-29T03:00:00+01:00,4\n")
    with pytest.raises(ForecastInputError, match="'2023-10-29 02:00' at line 4 has no UTC offset"):
        read_series_csv(path)

def test_naive_duplicates_are_refused(tmp_path):
    path = tmp_path / "dst.csv"
    path.write_text("time,price\n2023-10-29 02:00,1\n2023-10-29 02:00,2\n2023-10-29 03:00,3\n")
    with pytest.raises(ForecastInputError, match="duplicated"):
        read_series_csv(path)


def test_harmonized_zero_load_is_missing(data_dir):
    frame, meta = read_harmonized(data_dir / "harmonized_small.csv", zone="XX")
    assert frame["load_forecast_mw"].isna()["2022-01-01 05:00"]
    assert meta["zero_load_set_missing"] == 2  # load_mw and load_forecast_mw of that hour
    assert pd.Timestamp("2022-01-02 06:00", tz="UTC") not in frame.index  # the dropped row stays a gap


@pytest.mark.shared_data
@pytest.mark.parametrize("market", ["NP", "DE"])
def test_shared_epftoolbox_files_load_without_flags(market, shared_dir):
    path = shared_dir / "epftoolbox" / f"{market}.csv.gz"
    if not path.exists():
        pytest.skip(f"shared data not found at {path} (set GRIDSHIFT_SHARED_DATA)")
    frame, meta = read_series_csv(path)
    assert meta["format"] == "epftoolbox" and len(frame) == 52_416 and len(meta["exog"]) == 2
