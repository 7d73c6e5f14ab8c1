"""Electricity Maps: carbon intensity of consumed electricity [gCO2eq/kWh].

* API v3 (``https://api.electricitymap.org/v3``, header ``auth-token``): ``/carbon-intensity/history``
  answers ``{"zone", "history": [{"datetime", "carbonIntensity", "isEstimated", ...}]}`` and
  ``/carbon-intensity/forecast`` answers ``{"zone", "forecast": [{"datetime", "carbonIntensity"}],
  "updatedAt"}``.
* Data-portal hourly CSV files (``Datetime (UTC)``, ``Carbon Intensity gCO₂eq/kWh (LCA)``,
  ``Renewable Percentage``...) and the renamed copies in ``shared/data/electricitymaps``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from forecasting.errors import ForecastInputError
from forecasting.sources._common import require_keys, to_hourly_utc

BASE_URL = "https://api.electricitymap.org/v3"

_CSV_COLUMNS = {
    # data-portal header -> ours
    "Datetime (UTC)": "time",
    "Carbon Intensity gCO₂eq/kWh (direct)": "carbon_intensity_direct_g_per_kwh",
    "Carbon Intensity gCO₂eq/kWh (LCA)": "carbon_intensity_g_per_kwh",
    "Low Carbon Percentage": "low_carbon_pct",
    "Renewable Percentage": "renewable_pct",
    # shared/data copies
    "datetime_utc": "time",
    "carbon_intensity_lca_g_per_kwh": "carbon_intensity_g_per_kwh",
}


def _parse_api(payload: Any, key: str = "history") -> tuple[pd.DataFrame, dict[str, Any]]:
    """Parse an API v3 ``history`` or ``forecast`` response into hourly ``carbon_intensity_g_per_kwh``."""
    data = require_keys(payload, ("zone", key), f"electricitymaps {key}")
    rows = data[key]
    if not isinstance(rows, list) or not rows:
        raise ForecastInputError(f"electricitymaps {key}: no points for zone {data['zone']}")
    try:
        index = pd.to_datetime([r["datetime"] for r in rows], utc=True, format="ISO8601")
        values = pd.to_numeric([r.get("carbonIntensity") for r in rows], errors="coerce")
    except (KeyError, TypeError) as exc:
        raise ForecastInputError(f"electricitymaps {key}: malformed point ({exc})") from exc
    frame = pd.DataFrame({"carbon_intensity_g_per_kwh": values}, index=pd.DatetimeIndex(index))
    if key == "history":
        frame["estimated"] = [bool(r.get("isEstimated", False)) for r in rows]
    factor = {r.get("emissionFactorType") for r in rows} - {None}
    meta = {"source": "electricitymaps", "zone": data["zone"], "unit": "gCO2eq/kWh",
            "emission_factor": sorted(factor)[0] if factor else "lifecycle", "updated_at": data.get("updatedAt")}
    return to_hourly_utc(frame, f"electricitymaps {key}"), meta


def _parse_csv(raw: pd.DataFrame, zone: str = "") -> tuple[pd.DataFrame, dict[str, Any]]:
    """Parse a data-portal hourly CSV (or a renamed copy): carbon intensities [gCO2eq/kWh] and
    ``renewable_share``/``low_carbon_share`` [fraction]."""
    frame = raw.rename(columns=_CSV_COLUMNS)
    if "time" not in frame.columns or "carbon_intensity_g_per_kwh" not in frame.columns:
        raise ForecastInputError(f"electricitymaps CSV {zone}: need a UTC time and an LCA carbon intensity "
                                 f"column; got {list(raw.columns)}")
    index = pd.to_datetime(frame.pop("time"), utc=True, format="mixed")
    out = pd.DataFrame(index=pd.DatetimeIndex(index))
    for col in ("carbon_intensity_g_per_kwh", "carbon_intensity_direct_g_per_kwh"):
        if col in frame.columns:
            out[col] = pd.to_numeric(frame[col], errors="coerce").to_numpy()
    for pct, share in (("renewable_pct", "renewable_share"), ("low_carbon_pct", "low_carbon_share")):
        if pct in frame.columns:
            out[share] = pd.to_numeric(frame[pct], errors="coerce").to_numpy() / 100.0
    return to_hourly_utc(out, f"electricitymaps CSV {zone}"), {"source": "electricitymaps", "zone": zone,
                                                              "unit": "gCO2eq/kWh"}


def read_electricitymaps(path: str | Path, zone: str | None = None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Read a saved API response (``.json``) or an hourly CSV export (``.csv``/``.csv.gz``)."""
    path = Path(path)
    zone = zone or path.name.split("_")[0]
    if path.suffix == ".json":
        payload = json.loads(path.read_text())
        return _parse_api(payload, "forecast" if isinstance(payload, dict) and "forecast" in payload else "history")
    return _parse_csv(pd.read_csv(path), zone)


def get_electricitymaps(
    zone: str, token: str, kind: str = "history", timeout_s: float = 30.0
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Download the last 24 h (``history``) or the next hours (``forecast``) of carbon intensity."""
    import requests

    if kind not in ("history", "forecast"):
        raise ValueError("kind must be 'history' or 'forecast'")
    resp = requests.get(f"{BASE_URL}/carbon-intensity/{kind}", params={"zone": zone},
                        headers={"auth-token": token}, timeout=timeout_s)
    resp.raise_for_status()
    return _parse_api(resp.json(), kind)
