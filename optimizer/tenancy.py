"""Tenants in a planning problem: the operator's weight and the remaining budgets of each tenant, and how capacity
is shared between tenants (``optimizer.fairness`` plans by them, ``optimizer.check`` verifies them)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class BudgetWindow:
    """What a tenant may still use over part of the horizon, slots ``start_slot`` to ``end_slot`` (excluded): the rest
    of this budget period or of today, or the whole of the next one that the horizon reaches.

    GPU-hours count the GPU-slots a plan's runs hold inside the window; cost, energy and carbon count a run's whole
    footprint in every window it touches (a run across a period end is charged to both periods: never past either).

    Parameters
    ----------
    start_slot, end_slot : int
        The window [slot].
    cost, energy_kwh, carbon_kg, gpu_hours : float or None
        What may still be used in it [problem currency], [kWh], [kgCO2eq], [GPU-h] (None: no limit).
    """

    start_slot: int
    end_slot: int
    cost: float | None = None
    energy_kwh: float | None = None
    carbon_kg: float | None = None
    gpu_hours: float | None = None

    def __post_init__(self) -> None:
        if self.end_slot <= self.start_slot:
            raise ValueError(f"BudgetWindow: end_slot {self.end_slot} must be after start_slot {self.start_slot}")
        for attr in ("cost", "energy_kwh", "carbon_kg", "gpu_hours"):
            value = getattr(self, attr)
            if value is not None and not value >= 0:
                raise ValueError(f"BudgetWindow: {attr} must be >= 0 or None, got {value}")

    def budgets(self) -> dict[str, float]:
        """The limits set, ``{"cost" | "energy_kwh" | "carbon_kg" | "gpu_hours": remaining}``."""
        pairs = (("cost", self.cost), ("energy_kwh", self.energy_kwh), ("carbon_kg", self.carbon_kg),
                 ("gpu_hours", self.gpu_hours))
        return {k: float(v) for k, v in pairs if v is not None}


@dataclass(frozen=True, slots=True)
class TenantPolicy:
    """What the operator set for one tenant: its weight and what is left of its budgets for this horizon.

    Parameters
    ----------
    name : str
        The tenant (``Job.tenant``).
    weight : float
        Share of scarce capacity relative to the other tenants' weights [-] (> 0; a tenant not listed weighs 1).
    cost_budget : float or None
        Electricity cost the plan may still spend for this tenant [problem currency] (None: no budget).
    energy_budget_kwh : float or None
        Facility energy the plan may still use for this tenant [kWh].
    carbon_budget_kg : float or None
        Location-based emissions the plan may still cause for this tenant [kgCO2eq].
    gpu_hours_budget : float or None
        GPU-hours the plan may still give this tenant (a quota) [GPU-h].
    max_gpus : Mapping[str, int]
        Most GPUs of a hardware type the tenant's planned jobs may hold at once (a quota) [GPUs].
    windows : tuple of BudgetWindow
        Budgets and quotas over parts of the horizon (a period's rest and the next period, each day's GPU-hours),
        on top of the whole-horizon ones above.
    """

    name: str
    weight: float = 1.0
    cost_budget: float | None = None
    energy_budget_kwh: float | None = None
    carbon_budget_kg: float | None = None
    gpu_hours_budget: float | None = None
    max_gpus: Mapping[str, int] = field(default_factory=dict)
    windows: tuple[BudgetWindow, ...] = ()

    def __post_init__(self) -> None:
        if not (math.isfinite(self.weight) and self.weight > 0):
            raise ValueError(f"TenantPolicy {self.name!r}: weight must be a positive number, got {self.weight}")
        for hw, n in self.max_gpus.items():
            if not (isinstance(n, int) and n >= 0):
                raise ValueError(f"TenantPolicy {self.name!r}: max_gpus[{hw!r}] must be an integer >= 0, got {n!r}")
        for attr in ("cost_budget", "energy_budget_kwh", "carbon_budget_kg", "gpu_hours_budget"):
            value = getattr(self, attr)
            if value is not None and not value >= 0:
                raise ValueError(f"TenantPolicy {self.name!r}: {attr} must be >= 0 or None, got {value}")

    def budgets(self) -> dict[str, float]:
        """The budgets set, ``{"cost" | "energy_kwh" | "carbon_kg" | "gpu_hours": remaining}``."""
        pairs = (
            ("cost", self.cost_budget),
            ("energy_kwh", self.energy_budget_kwh),
            ("carbon_kg", self.carbon_budget_kg),
            ("gpu_hours", self.gpu_hours_budget),
        )
        return {k: float(v) for k, v in pairs if v is not None}


@dataclass(frozen=True, slots=True)
class Fairness:
    """How capacity is shared between tenants (``optimizer.fairness``).

    Parameters
    ----------
    enabled : bool
        Share scarce capacity between tenants by weight (weighted max-min fairness of requested GPU-hours planned);
        off, priorities compare across tenants as they are.
    blind_share : float
        Share of the time limit given to the tenant-blind plan that measures the capacity to share (and is the plan
        when it is fair already) [-].
    pool_hours : float or None
        Length of the time blocks over which capacity is shared (``optimizer.pools``): a job may use a block its
        window overlaps [h]; None: the whole horizon is one block (capacity is still split by region and hardware).
    """

    enabled: bool = True
    blind_share: float = 0.4
    pool_hours: float | None = None

    def __post_init__(self) -> None:
        if not 0.0 < self.blind_share < 1.0:
            raise ValueError(f"Fairness.blind_share must be in (0, 1), got {self.blind_share}")
        if self.pool_hours is not None and not (math.isfinite(self.pool_hours) and self.pool_hours > 0):
            raise ValueError(f"Fairness.pool_hours must be a positive number of hours or None, got {self.pool_hours}")
