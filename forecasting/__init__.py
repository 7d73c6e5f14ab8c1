"""Day-ahead forecasts of prices, carbon intensity and renewable share.

A pure library: hourly history in a :class:`pandas.DataFrame` with a UTC index goes in, a forecast
frame with quantiles comes out. It never touches a database; network I/O lives only in
``forecasting.sources.*.get_*`` functions.
"""

from forecasting.errors import ForecastInputError
from forecasting.task import ForecastTask, quantile_column

__all__ = ["ForecastInputError", "ForecastTask", "quantile_column"]
