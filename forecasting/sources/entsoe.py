"""ENTSO-E Transparency Platform through ``entsoe-py`` (optional extra ``sources``; imported lazily).

``EntsoePandasClient.query_day_ahead_prices`` returns a Series [EUR/MWh] on a local-time index (15-min
steps since the SDAC 15-minute MTU), ``query_load_forecast`` a frame with ``Forecasted Load`` [MW] and
``query_wind_and_solar_forecast`` a frame with ``Solar``, ``Wind Onshore`` (and ``Wind Offshore``) [MW].
:func:`_parse_entsoe` turns these into one hourly UTC frame with our column names; sub-hourly values are
averaged to hourly means.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from forecasting.errors import ForecastInputError
from forecasting.sources._common import to_hourly_utc

_RENAME = {
    "Forecasted Load": "load_forecast_mw",
    "Solar": "solar_forecast_mw",
    "Wind Onshore": "wind_onshore_forecast_mw",
    "Wind Offshore": "wind_offshore_forecast_mw",
}


def _parse_entsoe(
    prices: pd.Series | None = None,
    load_forecast: pd.DataFrame | pd.Series | None = None,
    wind_solar_forecast: pd.DataFrame | None = None,
    zone: str = "",
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Combine entsoe-py results into an hourly UTC frame.

    Returns
    -------
    (DataFrame, dict)
        Columns among ``price_eur_mwh`` [EUR/MWh], ``load_forecast_mw``, ``solar_forecast_mw``,
        ``wind_onshore_forecast_mw``, ``wind_offshore_forecast_mw`` [MW]; metadata.
    """
    parts = []
    if prices is not None:
        parts.append(to_hourly_utc(pd.DataFrame({"price_eur_mwh": pd.to_numeric(prices)}), f"ENTSO-E {zone} prices"))
    if load_forecast is not None:
        lf = load_forecast.to_frame("Forecasted Load") if isinstance(load_forecast, pd.Series) else load_forecast
        if "Forecasted Load" not in lf.columns:
            raise ForecastInputError(f"ENTSO-E {zone} load forecast: no 'Forecasted Load' column in {list(lf.columns)}")
        parts.append(to_hourly_utc(lf[["Forecasted Load"]].rename(columns=_RENAME), f"ENTSO-E {zone} load"))
    if wind_solar_forecast is not None:
        known = [c for c in wind_solar_forecast.columns if c in _RENAME]
        if not known:
            raise ForecastInputError(f"ENTSO-E {zone} wind/solar forecast: none of {sorted(_RENAME)[1:]} in "
                                     f"{list(wind_solar_forecast.columns)}")
        parts.append(to_hourly_utc(wind_solar_forecast[known].rename(columns=_RENAME), f"ENTSO-E {zone} wind/solar"))
    if not parts:
        raise ValueError("give at least one of prices, load_forecast, wind_solar_forecast")
    frame = pd.concat(parts, axis=1).sort_index()
    return frame, {"source": "entsoe", "zone": zone, "units": {"price_eur_mwh": "EUR/MWh", "*_mw": "MW"}}


def read_entsoe_csv(path: str | Path, zone: str = "") -> tuple[pd.DataFrame, dict[str, Any]]:
    """Read a CSV saved from entsoe-py results (``Series.to_csv``/``DataFrame.to_csv``: first column the
    timestamp with its UTC offset, then ``price``/``0`` or the entsoe-py column names)."""
    raw = pd.read_csv(path, index_col=0)
    raw.index = pd.to_datetime(raw.index, utc=True, format="ISO8601")
    prices = None
    for col in ("price", "0", "Price"):
        if col in raw.columns:
            prices = raw.pop(col)
    load = raw[["Forecasted Load"]] if "Forecasted Load" in raw.columns else None
    ws = raw[[c for c in raw.columns if c in _RENAME and c != "Forecasted Load"]]
    return _parse_entsoe(prices, load, ws if len(ws.columns) else None, zone)


def get_entsoe(
    zone: str, start: pd.Timestamp, end: pd.Timestamp, api_key: str
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Download day-ahead prices, load forecast and wind/solar forecast of bidding zone ``zone``
    (entsoe-py area code, e.g. ``DE_LU``) between two tz-aware timestamps."""
    try:
        from entsoe import EntsoePandasClient
    except ImportError as exc:  # optional dependency
        raise ImportError("ENTSO-E needs entsoe-py: pip install 'gridshift[sources]'") from exc
    client = EntsoePandasClient(api_key=api_key)
    prices = client.query_day_ahead_prices(zone, start=start, end=end)
    load = client.query_load_forecast(zone, start=start, end=end)
    wind_solar = client.query_wind_and_solar_forecast(zone, start=start, end=end, psr_type=None)
    return _parse_entsoe(prices, load, wind_solar, zone)
