"""The planning problem: regions, hardware types, jobs and the objective, in integer slots.

Everything that crosses into or out of the optimizer is a frozen, slotted dataclass. Time is counted in
integer slots of ``slot_minutes`` from ``Problem.start`` (an aware UTC datetime); a job occupies the slots
``[start, end)``. Curves (price, carbon intensity, power budget, base load, per-slot inventory) have one
value per slot.

Energy model: a job running on ``gpus`` GPUs of a hardware type drawing ``power_kw_per_gpu`` in a region
with power usage effectiveness ``pue`` draws ``gpus * power_kw_per_gpu * pue`` [kW] of facility power, and
uses that times ``slot_minutes / 60`` [kWh] in each slot it runs. Cost and carbon are summed per slot with
that slot's price [currency/MWh] and carbon intensity [gCO2eq/kWh].
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from optimizer.tenancy import Fairness, TenantPolicy


class ObjectiveKind(StrEnum):
    """What the planner minimises."""

    COST = "cost"
    CARBON = "carbon"
    WEIGHTED = "weighted"  # cost + carbon_price_per_tonne * carbon
    CARBON_WITH_COST_CAP = "carbon_cost_cap"  # min carbon subject to total cost <= cost_cap

    @property
    def uses_price(self) -> bool:
        """Whether plans need the electricity price of the slots they run in (all but ``carbon``)."""
        return self is not ObjectiveKind.CARBON

    @property
    def uses_carbon(self) -> bool:
        """Whether plans need the carbon intensity of the slots they run in (all but ``cost``)."""
        return self is not ObjectiveKind.COST


@dataclass(frozen=True, slots=True)
class Objective:
    """Objective of a plan.

    Parameters
    ----------
    kind : ObjectiveKind
        What is minimised.
    carbon_price_per_tonne : float
        Carbon price [currency/tCO2eq], used by ``WEIGHTED``.
    cost_cap : float or None
        Cap on total energy cost [currency], used by ``CARBON_WITH_COST_CAP``.
    """

    kind: ObjectiveKind = ObjectiveKind.COST
    carbon_price_per_tonne: float = 0.0
    cost_cap: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", ObjectiveKind(self.kind))
        if self.kind is ObjectiveKind.WEIGHTED and not self.carbon_price_per_tonne >= 0:
            raise ValueError("Objective.carbon_price_per_tonne must be >= 0 for a weighted objective")
        if self.kind is ObjectiveKind.CARBON_WITH_COST_CAP and (
            self.cost_cap is None or not self.cost_cap >= 0
        ):
            raise ValueError("Objective.cost_cap must be set and >= 0 for carbon_cost_cap")


@dataclass(frozen=True, slots=True)
class HardwareType:
    """A GPU/accelerator type.

    Parameters
    ----------
    name : str
        Identifier used in inventories and jobs (e.g. ``"H100"``).
    memory_gb : float
        Memory per device [GB]; jobs needing more per GPU are not eligible.
    power_kw_per_gpu : float
        Default board power while running [kW/GPU] (a job may override it per hardware type).
    relative_throughput : float
        Throughput relative to a reference device [-] (used by :func:`durations_from_throughput`).
    """

    name: str
    memory_gb: float
    power_kw_per_gpu: float
    relative_throughput: float = 1.0


@dataclass(frozen=True, slots=True)
class Region:
    """A data-center region with its market curves, power budget and GPU inventory.

    Parameters
    ----------
    name : str
        Region identifier (e.g. ``"DE"``).
    price_per_mwh : tuple of float
        Electricity price per slot [currency/MWh]; NaN marks a slot with no usable price.
    carbon_g_per_kwh : tuple of float
        Grid carbon intensity per slot [gCO2eq/kWh].
    power_budget_kw : tuple of float
        Facility power budget per slot [kW] (may dip for demand-response windows); covers base load
        plus ``gpus * power * pue`` of every running job.
    inventory : Mapping[str, int]
        GPUs installed per hardware type [GPUs].
    pue : float
        Power usage effectiveness [-] (>= 1).
    base_load_kw : tuple of float or None
        Inflexible load per slot [kW] counted against the budget.
    inventory_per_slot : Mapping[str, tuple of int]
        Per-slot GPU availability overriding ``inventory`` (maintenance) [GPUs].
    currency : str
        Currency of ``price_per_mwh``.
    """

    name: str
    price_per_mwh: tuple[float, ...]
    carbon_g_per_kwh: tuple[float, ...]
    power_budget_kw: tuple[float, ...]
    inventory: Mapping[str, int]
    pue: float = 1.2
    base_load_kw: tuple[float, ...] | None = None
    inventory_per_slot: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    currency: str = "EUR"

    def gpus_at(self, hardware: str, slot: int) -> int:
        """GPUs of ``hardware`` available in ``slot`` [GPUs]."""
        per_slot = self.inventory_per_slot.get(hardware)
        if per_slot is not None:
            return int(per_slot[slot])
        return int(self.inventory.get(hardware, 0))

    def base_kw_at(self, slot: int) -> float:
        """Inflexible base load in ``slot`` [kW]."""
        return 0.0 if self.base_load_kw is None else float(self.base_load_kw[slot])


@dataclass(frozen=True, slots=True)
class Job:
    """A deferrable job.

    Parameters
    ----------
    job_id : str
        Stable identifier.
    gpus : int
        GPUs used while running [GPUs].
    duration_slots : Mapping[str, int]
        Run time per eligible hardware type [slots]; a type missing here is not eligible.
    release_slot : int
        First slot the job may run in [slot].
    deadline_slot : int
        The job must have finished by the start of this slot [slot] (exclusive end).
    power_kw_per_gpu : Mapping[str, float]
        Power per GPU per hardware type [kW]; falls back to ``HardwareType.power_kw_per_gpu``.
    memory_gb_per_gpu : float
        Memory needed per GPU [GB].
    allowed_regions : tuple of str or None
        Residency: regions the job may run in (None = all).
    allowed_hardware : tuple of str or None
        Hardware types the job may use (None = every type in ``duration_slots``).
    home_region, preferred_hardware : str or None
        Where the job would run "now" (run-now baseline).
    priority : int
        Larger = more important to plan when capacity is short.
    interruptible : bool
        Whether the job may run in several chunks.
    min_chunk_slots : int
        Shortest chunk for an interruptible job [slots].
    checkpoint_overhead_slots : int
        Extra run time added for each resume [slots].
    max_chunks : int
        Most chunks an interruptible job may run in (>= 1; ``check_plan`` enforces it). Each chunk is at least
        ``min_chunk_slots`` long (a single run may be shorter) and the run time is ``duration +
        checkpoint_overhead_slots * (chunks - 1)``. The default, 2, is what the planner's model places (one run,
        or two chunks); a larger value lets plans from elsewhere use more, and the planner's bound covers it.
    tenant : str
        The tenant that owns the job (``""``: none). With several tenants, ``priority`` only orders a tenant's own
        jobs and capacity is shared by ``Problem.tenants`` weights (``optimizer.fairness``).
    """

    job_id: str
    gpus: int
    duration_slots: Mapping[str, int]
    release_slot: int
    deadline_slot: int
    power_kw_per_gpu: Mapping[str, float] = field(default_factory=dict)
    memory_gb_per_gpu: float = 0.0
    allowed_regions: tuple[str, ...] | None = None
    allowed_hardware: tuple[str, ...] | None = None
    home_region: str | None = None
    preferred_hardware: str | None = None
    priority: int = 1
    interruptible: bool = False
    min_chunk_slots: int = 1
    checkpoint_overhead_slots: int = 0
    max_chunks: int = 2
    tenant: str = ""


@dataclass(frozen=True, slots=True)
class Problem:
    """A planning problem over ``n_slots`` slots of ``slot_minutes`` from ``start``.

    Parameters
    ----------
    start : datetime
        Start of slot 0 (timezone-aware, UTC).
    slot_minutes : int
        Length of one slot [min].
    n_slots : int
        Horizon length [slots]; every per-slot curve has this length.
    regions, hardware, jobs : tuple
        The regions, hardware types and jobs.
    objective : Objective
        What is minimised.
    currency : str
        Currency in which costs are reported.
    fx_rates : Mapping[str, float]
        Units of ``currency`` per unit of each region currency (missing = 1 for ``currency``).
    cost_scale : int
        Integer units per unit of objective used in the CP-SAT model (e.g. 1000 = milli-currency or grams).
    tenants : tuple of TenantPolicy
        Weights and remaining budgets per tenant (a tenant of a job not listed weighs 1 and has no budget).
    fairness : Fairness
        How capacity is shared between tenants.
    """

    start: datetime
    slot_minutes: int
    n_slots: int
    regions: tuple[Region, ...]
    hardware: tuple[HardwareType, ...]
    jobs: tuple[Job, ...]
    objective: Objective = field(default_factory=Objective)
    currency: str = "EUR"
    fx_rates: Mapping[str, float] = field(default_factory=dict)
    cost_scale: int = 1000
    tenants: tuple[TenantPolicy, ...] = ()
    fairness: Fairness = field(default_factory=Fairness)

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.start.utcoffset() != timedelta(0):
            raise ValueError("Problem.start must be a timezone-aware UTC datetime")
        if self.slot_minutes <= 0 or self.n_slots <= 0:
            raise ValueError("Problem.slot_minutes and Problem.n_slots must be positive")
        names = [r.name for r in self.regions]
        if len(set(names)) != len(names):
            raise ValueError(f"Problem.regions: duplicate region names in {names}")
        hw_names = [h.name for h in self.hardware]
        if len(set(hw_names)) != len(hw_names):
            raise ValueError(f"Problem.hardware: duplicate hardware names in {hw_names}")
        for r in self.regions:
            for attr in ("price_per_mwh", "carbon_g_per_kwh", "power_budget_kw", "base_load_kw"):
                curve = getattr(r, attr)
                if curve is not None and len(curve) != self.n_slots:
                    raise ValueError(
                        f"Region {r.name!r}: {attr} has {len(curve)} values, expected n_slots={self.n_slots}"
                    )
            for hw, curve in r.inventory_per_slot.items():
                if len(curve) != self.n_slots:
                    raise ValueError(
                        f"Region {r.name!r}: inventory_per_slot[{hw!r}] has {len(curve)} values, "
                        f"expected n_slots={self.n_slots}"
                    )
            if not r.pue >= 1.0:
                raise ValueError(f"Region {r.name!r}: pue must be >= 1, got {r.pue}")
            if r.currency != self.currency and r.currency not in self.fx_rates:
                raise ValueError(f"Region {r.name!r}: no fx_rates entry for currency {r.currency!r}")
        ids = [j.job_id for j in self.jobs]
        if len(set(ids)) != len(ids):
            raise ValueError("Problem.jobs: job_id values must be unique")
        if self.cost_scale <= 0:
            raise ValueError("Problem.cost_scale must be a positive integer")
        tenant_names = [t.name for t in self.tenants]
        if len(set(tenant_names)) != len(tenant_names):
            raise ValueError(f"Problem.tenants: duplicate tenant names in {tenant_names}")

    def tenant_policy(self, name: str) -> TenantPolicy:
        """The policy of tenant ``name`` (weight 1, no budget when not listed)."""
        for t in self.tenants:
            if t.name == name:
                return t
        return TenantPolicy(name)

    @property
    def slot_hours(self) -> float:
        """Length of one slot [h]."""
        return self.slot_minutes / 60.0

    def slot_start(self, slot: int) -> datetime:
        """Start of ``slot`` as an aware UTC datetime."""
        return self.start + timedelta(minutes=self.slot_minutes * slot)

    def slot_of(self, when: datetime) -> int:
        """Slot containing ``when`` (aware datetime), floor; may be outside ``[0, n_slots)``."""
        if when.tzinfo is None:
            raise ValueError("slot_of needs a timezone-aware datetime")
        minutes = (when.astimezone(UTC) - self.start).total_seconds() / 60.0
        return math.floor(minutes / self.slot_minutes)

    def fx(self, currency: str) -> float:
        """Units of ``Problem.currency`` per unit of ``currency``."""
        return 1.0 if currency == self.currency else float(self.fx_rates[currency])

    def region(self, name: str) -> Region:
        """Region by name; the error lists the valid names."""
        for r in self.regions:
            if r.name == name:
                return r
        raise KeyError(f"unknown region {name!r}; valid: {[r.name for r in self.regions]}")

    def hardware_type(self, name: str) -> HardwareType:
        """Hardware type by name; the error lists the valid names."""
        for h in self.hardware:
            if h.name == name:
                return h
        raise KeyError(f"unknown hardware {name!r}; valid: {[h.name for h in self.hardware]}")

    def job_power_kw_per_gpu(self, job: Job, hardware: str) -> float:
        """Power per GPU of ``job`` on ``hardware`` [kW]."""
        if hardware in job.power_kw_per_gpu:
            return float(job.power_kw_per_gpu[hardware])
        return float(self.hardware_type(hardware).power_kw_per_gpu)


@dataclass(frozen=True, slots=True)
class SolveParams:
    """Parameters shared by every solver and baseline.

    Parameters
    ----------
    time_limit_s : float
        Wall-clock limit of the whole solve [s] (CP-SAT gets what is left).
    num_workers : int
        CP-SAT search workers.
    random_seed : int
        Seed for CP-SAT and any randomised heuristic.
    log_search : bool
        Print CP-SAT's search log.
    max_cpsat_options : int
        Largest option count handed to CP-SAT (at least 8 per job class); beyond it the plan comes from the
        Lagrangian-priced heuristic with local search only.
    max_lp_jobs : int
        Largest job count for the column-generation LP bound (GLOP); beyond it subgradient ascent.
    max_cpsat_jobs : int
        Largest job count handed to CP-SAT; beyond it (where CP-SAT on 2 cores does not improve the plan
        in seconds) the time goes to local search and the bound.
    recreate_share : float
        Share of the local-search time given to ruin-and-recreate moves (0 turns them off) [-].
    max_master_jobs : int
        Largest job count for which, beyond ``max_lp_jobs``, a master LP over the Lagrangian ascent's options
        is solved once to guide rounding and local search (0 turns it off).
    rins : bool
        On the LP path, solve a MIP over the LP's columns around the best plan (HiGHS, on the second worker
        while the local search goes on; ``optimizer.submip``).
    capacity_blocks : bool
        Price the GPU and power rows of an hour as one in the LP bound and the subgradient ascent where the
        curves are held over the hour (``optimizer.blocks``; False: a row per slot).
    coarse_share : float
        Off the LP path on a grid finer than an hour, share of the time left at the start that the subgradient
        ascent takes on the same jobs on whole hours before the fine ascent goes on from its prices
        (``optimizer.coarse``; 0 turns it off) [-].
    coarse_plan_share : float
        Share of the time left in which the same jobs are planned on whole hours on the second worker, that plan then
        a start of the fine search (0, the default, turns it off: on the loaded 2-core development machine it took
        CPU from the ascent and the search and its plan was not kept) [-].
    coarse_lp_share : float
        On the LP path on a grid finer than an hour, share of the LP's time in which the hourly LP of the same jobs
        runs first, its columns and duals read on the fine slots starting the fine LP (``optimizer.coarse_lp``; 0,
        the default, turns it off: no net gain measured on the development machine) [-].
    """

    time_limit_s: float = 10.0
    num_workers: int = 2
    random_seed: int = 0
    log_search: bool = False
    max_cpsat_options: int = 20_000
    max_lp_jobs: int = 2_000
    max_cpsat_jobs: int = 500
    recreate_share: float = 0.9
    max_master_jobs: int = 20_000
    rins: bool = True
    capacity_blocks: bool = True
    coarse_share: float = 0.15
    coarse_plan_share: float = 0.0
    coarse_lp_share: float = 0.0


def durations_from_throughput(
    reference_hours: float, hardware: tuple[HardwareType, ...], slot_minutes: int
) -> dict[str, int]:
    """Run time per hardware type from the run time on the reference device.

    Parameters
    ----------
    reference_hours : float
        Run time on a device of ``relative_throughput == 1`` [h].
    hardware : tuple of HardwareType
        Candidate types.
    slot_minutes : int
        Slot length [min].

    Returns
    -------
    dict
        ``{hardware name: duration [slots]}``, at least one slot each.
    """
    out: dict[str, int] = {}
    for h in hardware:
        if h.relative_throughput > 0:
            hours = reference_hours / h.relative_throughput
            out[h.name] = max(1, math.ceil(hours * 60.0 / slot_minutes - 1e-9))
    return out
