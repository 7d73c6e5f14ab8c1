"""Forecasting models, all with one signature (see :mod:`forecasting.models.base`), and their registry."""

from __future__ import annotations

from collections.abc import Callable

from forecasting.models.base import Model
from forecasting.models.boost import Boosted
from forecasting.models.carbon import CARBON_MODELS
from forecasting.models.ensemble import Ensemble
from forecasting.models.forest import Forest
from forecasting.models.lear import Lear
from forecasting.models.ml import NeuralNet
from forecasting.models.naive import Persistence, SeasonalNaive
from forecasting.models.prophet_model import ProphetModel
from forecasting.models.transformed import Transformed

MODELS: dict[str, Callable[[], Model]] = {}


def register(name: str, factory: Callable[[], Model]) -> None:
    """Make ``factory()`` available as model ``name``."""
    MODELS[name] = factory


def get_model(name: str) -> Model:
    """A fresh model by registry name; unknown names raise with the list of valid ones."""
    try:
        return MODELS[name]()
    except KeyError:
        raise KeyError(f"unknown model {name!r}; valid: {', '.join(sorted(MODELS))}") from None


def _prophet_enabled() -> bool:
    try:
        import prophet  # noqa: F401
    except ImportError:
        return False
    return True


register("naive_daily", lambda: SeasonalNaive(24, name="naive_daily"))
register("naive_weekly", lambda: SeasonalNaive(168, name="naive_weekly"))
register("persistence", Persistence)
register("lear", Lear)
register("nn", NeuralNet)
# Carbon intensity and renewable share: only ~2 years of history exist, so shorter windows.
register("lear_short", lambda: Lear(windows_days=(56, 84, 364), name="lear_short"))


# Carbon intensity (the production lear_hgbra_log, its members and the candidates measured against them):
# forecasting.models.carbon.
MODELS.update(CARBON_MODELS)
# Production price model: LEAR and the network averaged (their errors are weakly correlated).
register("lear_nn", lambda: Ensemble((Lear(), NeuralNet()), name="lear_nn"))
# A third, different learner on the LEAR inputs for price ensembles: boosted trees over the hours of two years,
# with the day-to-day changes and the last value's position as features (raw scale: prices can be negative).
register("hgb_price", lambda: Boosted(window_days=728, differences=True, recent=True, name="hgb_price"))
# Price ensemble of LEAR, the network and the trees. Registered with equal weights (what a zone gets before any
# validation); the benchmark fits its weights on the year before each test period (forecasting.validation).
register("price_ens", lambda: Ensemble((Lear(), NeuralNet(), MODELS["hgb_price"]()), name="price_ens"))
if _prophet_enabled():
    register("prophet", ProphetModel)

__all__ = ["MODELS", "Boosted", "Ensemble", "Forest", "Lear", "Model", "NeuralNet", "Persistence", "ProphetModel", "SeasonalNaive", "Transformed", "get_model", "register"]
