"""Fixtures for the forecasting tests: small synthetic hourly frames and the recorded samples folder."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

DATA = Path(__file__).resolve().parent / "data"


def shared_data_dir() -> Path:
    env = os.environ.get("GRIDSHIFT_SHARED_DATA")
    return Path(env) if env else Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


def synthetic(days: int = 70, seed: int = 0, start: str = "2022-01-03") -> pd.DataFrame:
    """Price = daily shape + 0.002 * load - 0.003 * wind + noise; negative hours when wind is high."""
    rng = np.random.default_rng(seed)
    index = pd.date_range(start, periods=days * 24, freq="h", tz="UTC")
    hour = index.hour.to_numpy()
    load = 40_000 + 8_000 * np.sin((hour - 6) / 24 * 2 * np.pi) + rng.normal(0, 500, len(index))
    wind = 10_000 + 9_000 * np.sin(np.arange(len(index)) / 53.0) + rng.normal(0, 300, len(index))
    price = 0.002 * load - 0.003 * wind + 5 * np.cos(hour / 24 * 2 * np.pi) + rng.normal(0, 1.0, len(index))
    return pd.DataFrame({"price_eur_mwh": price, "load_forecast_mw": load, "wind_forecast_mw": wind}, index=index)


@pytest.fixture
def frame() -> pd.DataFrame:
    return synthetic()


@pytest.fixture
def data_dir() -> Path:
    return DATA


@pytest.fixture
def shared_dir() -> Path:
    return shared_data_dir()


@pytest.fixture
def make_frame():
    return synthetic
