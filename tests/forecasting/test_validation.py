"""The price ensemble's weights: fitted on the validation year before the test period, never on the test period."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from forecasting.models import Ensemble, SeasonalNaive, get_model
from forecasting.models.ensemble import fit_weights, simplex_grid
from forecasting.task import ForecastTask
from forecasting.validation import validated_ensemble, validation_period

TASK = ForecastTask("price_eur_mwh", ("load_forecast_mw",))
SWITCH = pd.Timestamp("2022-03-07", tz="UTC")  # a Monday: the regime changes here
MEMBERS = Ensemble((SeasonalNaive(24, name="daily"), SeasonalNaive(168, name="weekly")), name="pair")


def regimes(rng_seed: int = 0, after: str = "daily") -> pd.DataFrame:
    """Before SWITCH a weekly pattern (the weekly naive is exact); after it, ``after``: a daily pattern with a
    level that steps each week (the daily naive is nearly exact, the weekly one off by the step) or noise."""
    index = pd.date_range("2022-01-03", "2022-05-01 23:00", freq="h", tz="UTC")
    rng = np.random.default_rng(rng_seed)
    weekday = index.day_of_week.to_numpy()
    price = 50 + 10 * weekday + 3 * index.hour.to_numpy()
    late = index >= SWITCH
    if after == "daily":
        weeks = ((index[late] - SWITCH) // pd.Timedelta(days=7)).to_numpy()
        price[late] = 50 + 3 * index.hour.to_numpy()[late] + 20 * weeks
    else:
        price[late] = rng.normal(0, 100, late.sum())
    return pd.DataFrame({"price_eur_mwh": price.astype(float), "load_forecast_mw": 1.0}, index=index)


def test_fit_weights_recovers_a_known_combination():
    rng = np.random.default_rng(3)
    a, b, c = rng.normal(size=(3, 500))
    w = fit_weights([a, b, c], 0.3 * a + 0.7 * b)
    assert w == pytest.approx((0.3, 0.7, 0.0))
    assert len(simplex_grid(4, 0.05)) == 1771 and np.allclose(simplex_grid(4, 0.05).sum(axis=1), 1)


def test_validation_period_is_the_year_before_the_test_start():
    first, last = validation_period("2016-12-27")
    assert (first.date().isoformat(), last.date().isoformat()) == ("2015-12-29", "2016-12-26")
    assert first.day_of_week == pd.Timestamp("2016-12-27").day_of_week  # whole weeks


def test_weights_come_from_before_the_test_start_only():
    days = 21
    test_start = SWITCH  # validation: the 3 weeks of the weekly regime; test: the daily regime
    fitted, val = validated_ensemble(regimes(), TASK, MEMBERS, test_start, days=days, progress=False)
    assert fitted.weights == (0.0, 1.0) and fitted.name == "pair@val"
    assert val.forecasts.index[-1] < test_start
    # whatever the test period holds, the choice is the same
    noisy, _ = validated_ensemble(
        regimes(after="noise"), TASK, MEMBERS, test_start, days=days, progress=False
    )
    assert noisy.weights == fitted.weights
    # a validation period inside the daily regime picks the daily naive: the fit does follow its own period
    later, _ = validated_ensemble(
        regimes(), TASK, MEMBERS, SWITCH + pd.Timedelta(days=28), days=days, progress=False
    )
    assert later.weights[0] > 0.5


def test_price_ensemble_is_registered_with_three_distinct_members():
    ens = get_model("price_ens")
    assert isinstance(ens, Ensemble) and ens.weights is None
    assert [m.name for m in ens.members] == ["lear", "nn", "hgb_price"]
    assert repr(ens.members[0]) == repr(
        get_model("lear")
    )  # shares the members' per-day cache with lear, lear_nn
