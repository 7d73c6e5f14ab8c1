"""Energy-Charts public API (Fraunhofer ISE, https://api.energy-charts.info, no key).

Endpoints used: ``/price?bzn=DE-LU&start=..&end=..`` (``unix_seconds``, ``price``, ``unit``) and
``/public_power?country=de&start=..&end=..`` (``unix_seconds`` and ``production_types``, a list of
``{"name": ..., "data": [...]}`` in MW).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from forecasting.errors import ForecastInputError
from forecasting.sources._common import require_keys, to_hourly_utc

BASE_URL = "https://api.energy-charts.info"
RENEWABLE_TYPES = (
    "hydro", "wind", "solar", "biomass", "geothermal", "renewable",
)


def _index(payload: dict, name: str) -> pd.DatetimeIndex:
    return pd.DatetimeIndex(pd.to_datetime(payload["unix_seconds"], unit="s", utc=True), name="time")


def _parse_price(payload: Any) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Parse a ``/price`` response into hourly ``price_eur_mwh`` [EUR/MWh]."""
    data = require_keys(payload, ("unix_seconds", "price"), "energy-charts price")
    if len(data["unix_seconds"]) != len(data["price"]):
        raise ForecastInputError("energy-charts price: unix_seconds and price differ in length")
    unit = str(data.get("unit", "EUR / MWh")).replace(" ", "")
    if unit.upper() != "EUR/MWH":
        raise ForecastInputError(f"energy-charts price: unit {data.get('unit')!r}, expected EUR / MWh")
    frame = pd.DataFrame({"price_eur_mwh": pd.to_numeric(data["price"], errors="coerce")},
                         index=_index(data, "price"))
    meta = {"source": "energy-charts", "unit": "EUR/MWh", "deprecated": bool(data.get("deprecated", False))}
    return to_hourly_utc(frame, "energy-charts price"), meta


def _parse_public_power(payload: Any) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Parse a ``/public_power`` response: one column per production type [MW] (hourly means) plus
    ``renewable_share`` [fraction] of renewable production in total production (``Load`` and
    cross-border columns excluded)."""
    data = require_keys(payload, ("unix_seconds", "production_types"), "energy-charts public_power")
    index = _index(data, "public_power")
    cols = {}
    for item in data["production_types"]:
        name = str(item.get("name", ""))
        values = item.get("data") or []
        if len(values) != len(index):
            raise ForecastInputError(f"energy-charts public_power: series {name!r} has {len(values)} values, "
                                     f"expected {len(index)}")
        cols[name] = pd.to_numeric(pd.Series(values, index=index), errors="coerce")
    frame = to_hourly_utc(pd.DataFrame(cols, index=index), "energy-charts public_power")
    skip = ("load", "residual", "cross border", "import", "export", "renewable share", "pumped storage consumption")
    producing = [c for c in frame.columns if not any(s in c.lower() for s in skip)]
    renewable = [c for c in producing if any(r in c.lower() for r in RENEWABLE_TYPES)]
    total = frame[producing].clip(lower=0).sum(axis=1, min_count=1)
    frame["renewable_share"] = frame[renewable].clip(lower=0).sum(axis=1) / total.where(total > 0)
    return frame, {"source": "energy-charts", "unit": "MW", "renewable_types": renewable}


def read_energycharts(path: str | Path, kind: str) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Read a saved JSON response; ``kind`` is ``"price"`` or ``"public_power"``."""
    payload = json.loads(Path(path).read_text())
    parsers = {"price": _parse_price, "public_power": _parse_public_power}
    if kind not in parsers:
        raise ValueError(f"kind must be one of {sorted(parsers)}, got {kind!r}")
    return parsers[kind](payload)


def get_energycharts_price(
    bidding_zone: str, start: pd.Timestamp, end: pd.Timestamp, timeout_s: float = 30.0
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Download day-ahead prices [EUR/MWh] of ``bidding_zone`` (e.g. ``DE-LU``) between two UTC times."""
    import requests

    resp = requests.get(f"{BASE_URL}/price", params={"bzn": bidding_zone, "start": start.isoformat(),
                                                     "end": end.isoformat()}, timeout=timeout_s)
    resp.raise_for_status()
    return _parse_price(resp.json())


def get_energycharts_public_power(
    country: str, start: pd.Timestamp, end: pd.Timestamp, timeout_s: float = 30.0
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Download public net generation per production type [MW] of ``country`` (e.g. ``de``)."""
    import requests

    resp = requests.get(f"{BASE_URL}/public_power", params={"country": country, "start": start.isoformat(),
                                                            "end": end.isoformat()}, timeout=timeout_s)
    resp.raise_for_status()
    return _parse_public_power(resp.json())
