"""Errors raised on bad input; each names the series and, where it applies, the time range."""

from __future__ import annotations


class ForecastInputError(ValueError):
    """Input that cannot be forecast as given (gap, missing regressor, too little history, ...)."""
