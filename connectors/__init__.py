"""Cluster connectors: one small protocol (:mod:`connectors.base`), one module per runtime, a registry."""

from connectors.base import (
    Capacity,
    ClusterConnector,
    ConfigError,
    ConnectorError,
    EnergyReading,
    EnergySource,
    JobSpec,
    RunStatus,
    RuntimeState,
)
from connectors.registry import accepts_tenant, available_kinds, get_connector, known_kinds, register

__all__ = [
    "Capacity",
    "ClusterConnector",
    "ConfigError",
    "ConnectorError",
    "EnergyReading",
    "EnergySource",
    "JobSpec",
    "RunStatus",
    "RuntimeState",
    "accepts_tenant",
    "available_kinds",
    "get_connector",
    "known_kinds",
    "register",
]
