"""WattTime API v3: marginal operating emissions rate (MOER).

``/v3/historical`` and ``/v3/forecast`` answer ``{"data": [{"point_time", "value"}], "meta": {"region",
"signal_type", "units", "data_point_period_seconds", "generated_at", ...}}``; values are in
``lbs_co2_per_mwh`` (converted here: 1 lb/MWh = 0.45359237 g/kWh). Note MOER is a marginal signal, not
the average intensity Electricity Maps reports.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from forecasting.errors import ForecastInputError
from forecasting.sources._common import require_keys, to_hourly_utc

BASE_URL = "https://api.watttime.org"
G_PER_KWH_PER_LB_PER_MWH = 0.45359237  # 453.59237 g per lb / 1000 kWh per MWh
_UNITS = {"lbs_co2_per_mwh": G_PER_KWH_PER_LB_PER_MWH, "g_co2_per_kwh": 1.0, "kg_co2_per_mwh": 1.0}


def _parse_signal(payload: Any) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Parse a v3 ``historical``/``forecast`` response into hourly ``moer_g_per_kwh`` [gCO2/kWh]."""
    data = require_keys(payload, ("data", "meta"), "watttime")
    meta = data["meta"]
    units = str(meta.get("units", "lbs_co2_per_mwh"))
    if units not in _UNITS:
        raise ForecastInputError(f"watttime: unknown units {units!r}; known: {sorted(_UNITS)}")
    if not data["data"]:
        raise ForecastInputError(f"watttime: no points for region {meta.get('region')}")
    try:
        index = pd.to_datetime([p["point_time"] for p in data["data"]], utc=True, format="ISO8601")
        values = pd.to_numeric([p["value"] for p in data["data"]], errors="coerce") * _UNITS[units]
    except KeyError as exc:
        raise ForecastInputError(f"watttime: point lacks {exc}") from exc
    frame = to_hourly_utc(pd.DataFrame({"moer_g_per_kwh": values}, index=pd.DatetimeIndex(index)), "watttime")
    return frame, {"source": "watttime", "region": meta.get("region"), "signal_type": meta.get("signal_type"),
                   "unit": "gCO2/kWh", "generated_at": meta.get("generated_at")}


def read_watttime(path: str | Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Read a saved v3 JSON response."""
    return _parse_signal(json.loads(Path(path).read_text()))


def get_watttime(
    region: str, username: str, password: str, kind: str = "forecast", timeout_s: float = 30.0
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Log in and download the MOER ``forecast`` (or ``historical``) of ``region`` (e.g. ``CAISO_NORTH``)."""
    import requests

    login = requests.get(f"{BASE_URL}/login", auth=(username, password), timeout=timeout_s)
    login.raise_for_status()
    token = login.json()["token"]
    resp = requests.get(f"{BASE_URL}/v3/{kind}", params={"region": region, "signal_type": "co2_moer"},
                        headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s)
    resp.raise_for_status()
    return _parse_signal(resp.json())
