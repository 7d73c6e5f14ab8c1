"""What a model is asked to forecast: the target, its regressors and the quantiles wanted."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_QUANTILES: tuple[float, ...] = (0.1, 0.5, 0.9)


def quantile_column(q: float) -> str:
    """Name of the forecast column holding quantile ``q`` (``0.1`` -> ``"q10"``)."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile must lie strictly between 0 and 1, got {q}")
    return f"q{round(q * 100):02d}"


@dataclass(frozen=True, slots=True)
class ForecastTask:
    """One forecasting problem.

    Parameters
    ----------
    target : str
        Column of the history to forecast (e.g. ``price_eur_mwh``).
    exog : tuple of str
        Regressor columns; their values for the forecast hours must be known at issue time
        (day-ahead load or wind/solar forecasts, the day-ahead price for carbon models).
    quantiles : tuple of float
        Quantile levels of the predictive distribution, each in (0, 1).
    """

    target: str
    exog: tuple[str, ...] = ()
    quantiles: tuple[float, ...] = DEFAULT_QUANTILES

    def __post_init__(self) -> None:
        if not self.target:
            raise ValueError("ForecastTask.target must name a column")
        if self.target in self.exog:
            raise ValueError(f"target {self.target!r} cannot also be a regressor")
        for q in self.quantiles:
            quantile_column(q)

    @property
    def columns(self) -> list[str]:
        """Output columns: ``forecast`` (point) then one per quantile."""
        return ["forecast", *(quantile_column(q) for q in self.quantiles)]
