"""Data feeds. Each feed has ``get_*`` (network), ``read_*`` (file) and ``_parse_*`` (pure) functions,
each returning ``(DataFrame, metadata)`` with an hourly UTC index."""

from forecasting.sources.csvfile import read_series_csv
from forecasting.sources.harmonized import read_harmonized

__all__ = ["read_harmonized", "read_series_csv"]
