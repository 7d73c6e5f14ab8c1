"""Independent plan checker: verifies every constraint from the Problem's dataclasses and recomputes totals.

It deliberately shares no code with the model builders or heuristics (plain loops over slots), so a bug
in the vectorised solver code cannot hide itself.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from dataclasses import dataclass, field

from optimizer.check_tenants import TenantShare, check_tenants
from optimizer.plan import Assignment, Chunk, Plan
from optimizer.problem import HardwareType, Job, ObjectiveKind, Problem, Region


@dataclass(frozen=True, slots=True)
class CheckReport:
    """Outcome of :func:`check_plan`.

    Parameters
    ----------
    violations : tuple of str
        One line per broken constraint or wrong figure (empty when the plan is valid).
    late_jobs : tuple of str
        Jobs that end after their deadline (a violation unless ``allow_late``).
    cost, carbon_kg, energy_kwh, objective : float
        Recomputed totals [currency], [kgCO2eq], [kWh], [objective units].
    estimates : tuple of str
        Totals that count 0 for slots without a price or carbon intensity the objective does not need.
    tenants : tuple of TenantShare
        Per tenant: work requested, planned and its fair share [GPU-h], and what it spends (``optimizer.check_tenants``).
    unfair : tuple of str
        Tenants below their fair share beyond one job (violations only with ``strict_fairness``).
    """

    violations: tuple[str, ...]
    late_jobs: tuple[str, ...]
    cost: float
    carbon_kg: float
    energy_kwh: float
    objective: float
    estimates: tuple[str, ...] = ()
    tenants: tuple[TenantShare, ...] = ()
    unfair: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.violations


def objective_value(problem: Problem, cost: float, carbon_kg: float) -> float:
    """Objective of a plan with these totals [currency, kgCO2eq or currency-equivalent]."""
    kind = problem.objective.kind
    if kind is ObjectiveKind.COST:
        return cost
    if kind is ObjectiveKind.WEIGHTED:
        return cost + problem.objective.carbon_price_per_tonne * carbon_kg / 1000.0
    return carbon_kg


def _close(a: float, b: float, rel: float = 1e-6, abs_: float = 1e-6) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


@dataclass(slots=True)
class _Tally:
    """The problem by name, and what the checked assignments add up to: totals and use per (region, hardware,
    slot) and (region, slot)."""

    problem: Problem
    jobs: dict[str, Job] = field(init=False)
    regions: dict[str, Region] = field(init=False)
    hardware: dict[str, HardwareType] = field(init=False)
    gpu_use: defaultdict[tuple[str, str, int], int] = field(default_factory=lambda: defaultdict(int))
    kw_use: defaultdict[tuple[str, int], float] = field(default_factory=lambda: defaultdict(float))
    cost: float = 0.0
    carbon_kg: float = 0.0
    energy_kwh: float = 0.0
    no_price: int = 0  # job-slots run without a price (counted 0)
    no_carbon: int = 0  # job-slots run without a carbon intensity (counted 0)

    def __post_init__(self) -> None:
        self.jobs = {j.job_id: j for j in self.problem.jobs}
        self.regions = {r.name: r for r in self.problem.regions}
        self.hardware = {h.name: h for h in self.problem.hardware}


def check_plan(
    problem: Problem, plan: Plan, *, allow_late: bool = False, tol: float = 1e-6, strict_fairness: bool = False
) -> CheckReport:
    """Verify ``plan`` against ``problem``.

    Parameters
    ----------
    problem : Problem
        The problem the plan claims to solve.
    plan : Plan
        The plan.
    allow_late : bool
        Accept runs that end after the deadline (baselines such as run-now queue jobs); they are listed in
        ``late_jobs``.
    tol : float
        Absolute tolerance on power [kW] and relative tolerance on recomputed figures.
    strict_fairness : bool
        Count a tenant below its fair share (beyond one of its jobs) as a violation; tenant budgets always are.

    Returns
    -------
    CheckReport
        Violations (empty when valid) and recomputed totals.
    """
    bad: list[str] = []
    late: list[str] = []
    tally = _Tally(problem)
    for a in plan.assignments:
        _check_assignment(problem, a, tally, bad, late, allow_late=allow_late, tol=tol)
    _check_coverage(problem, plan, bad)
    _check_capacity(problem, tally, bad, tol)
    objective = objective_value(problem, tally.cost, tally.carbon_kg)
    cap = problem.objective.cost_cap
    if problem.objective.kind is ObjectiveKind.CARBON_WITH_COST_CAP and cap is not None and (
        tally.cost > cap * (1 + tol) + tol
    ):
        bad.append(f"plan cost {tally.cost:.4f} exceeds cost_cap {cap}")
    for name, mine, theirs in (
        ("cost", tally.cost, plan.cost),
        ("carbon_kg", tally.carbon_kg, plan.carbon_kg),
        ("energy_kwh", tally.energy_kwh, plan.energy_kwh),
        ("objective", objective, plan.objective),
    ):
        if not _close(mine, theirs, 1e-6, 1e-4):
            bad.append(f"plan {name} {theirs} differs from recomputed {mine}")
    estimates = tuple(
        f"{figure} counts 0 for {n} job-slot(s) without {what}"
        for figure, n, what in (
            ("cost", tally.no_price, "a price"),
            ("carbon_kg", tally.no_carbon, "a carbon intensity"),
        )
        if n
    )
    shares, unfair = check_tenants(problem, plan, bad, tol)
    if strict_fairness:
        bad.extend(unfair)
    return CheckReport(
        tuple(bad), tuple(late), tally.cost, tally.carbon_kg, tally.energy_kwh, objective, estimates, shares, unfair
    )


def _check_coverage(problem: Problem, plan: Plan, bad: list[str]) -> None:
    """Every job of the problem once in assignments + unplanned, and no other job."""
    seen: dict[str, int] = defaultdict(int)
    for u in plan.unplanned:
        seen[u.job_id] += 1
    for a in plan.assignments:
        seen[a.job_id] += 1
    jobs = {j.job_id for j in problem.jobs}
    for job_id in jobs:
        if seen.get(job_id, 0) != 1:
            bad.append(f"job {job_id!r}: appears {seen.get(job_id, 0)} times in assignments + unplanned")
    for job_id in seen:
        if job_id not in jobs:
            bad.append(f"job {job_id!r}: unknown job in the plan")


def _check_chunks(job: Job, chunks: list[Chunk], duration: int, n_slots: int, where: str, bad: list[str]) -> bool:
    """Chunks in order, inside the horizon, of the right total length; False when they cannot be costed."""
    if not chunks:
        bad.append(f"{where}: no chunks")
        return False
    for c0, c1 in itertools.pairwise(chunks):
        if c1.start_slot < c0.end_slot:
            bad.append(f"{where}: chunks overlap or are out of order")
    if any(c.length_slots <= 0 or c.start_slot < 0 or c.end_slot > n_slots for c in chunks):
        bad.append(f"{where}: chunk empty or outside slots 0..{n_slots}")
        return False
    run = sum(c.length_slots for c in chunks)
    if not job.interruptible:
        if len(chunks) != 1 or run != duration:
            bad.append(
                f"{where}: needs one run of {duration} slots, got {[(c.start_slot, c.end_slot) for c in chunks]}"
            )
    else:
        need = duration + job.checkpoint_overhead_slots * (len(chunks) - 1)
        if run != need:
            bad.append(f"{where}: runs {run} slots, needs {need} with {len(chunks)} chunks")
        if len(chunks) > job.max_chunks:
            bad.append(f"{where}: runs in {len(chunks)} chunks, more than max_chunks={job.max_chunks}")
        if len(chunks) > 1 and any(c.length_slots < job.min_chunk_slots for c in chunks):
            bad.append(f"{where}: a chunk is shorter than min_chunk_slots={job.min_chunk_slots}")
    return True


def _check_assignment(
    problem: Problem,
    a: Assignment,
    tally: _Tally,
    bad: list[str],
    late: list[str],
    *,
    allow_late: bool,
    tol: float,
) -> None:
    """One assignment: eligibility, chunks, window, and its figures recomputed slot by slot into ``tally``."""
    where = f"job {a.job_id!r}"
    job = tally.jobs.get(a.job_id)
    if job is None:
        bad.append(f"{where}: not in the problem")
        return
    region, hw = tally.regions.get(a.region), tally.hardware.get(a.hardware)
    if region is None or hw is None:
        bad.append(f"{where}: unknown region {a.region!r} or hardware {a.hardware!r}")
        return
    if job.allowed_regions is not None and a.region not in job.allowed_regions:
        bad.append(f"{where}: region {a.region} not in allowed_regions")
    if job.allowed_hardware is not None and a.hardware not in job.allowed_hardware:
        bad.append(f"{where}: hardware {a.hardware} not in allowed_hardware")
    if hw.memory_gb < job.memory_gb_per_gpu:
        bad.append(f"{where}: {a.hardware} has {hw.memory_gb} GB < {job.memory_gb_per_gpu} GB needed")
    if job.gpus <= 0:
        bad.append(f"{where}: planned with {job.gpus} GPUs (a job needs at least 1)")
    duration = job.duration_slots.get(a.hardware)
    if duration is None:
        bad.append(f"{where}: no duration for {a.hardware}")
        return
    chunks = list(a.chunks)
    if not _check_chunks(job, chunks, duration, problem.n_slots, where, bad):
        return
    if chunks[0].start_slot < job.release_slot:
        bad.append(f"{where}: starts at slot {chunks[0].start_slot} before release {job.release_slot}")
    if chunks[-1].end_slot > job.deadline_slot:
        late.append(a.job_id)
        if not allow_late:
            bad.append(f"{where}: ends at slot {chunks[-1].end_slot} after deadline {job.deadline_slot}")
    power_kw = job.gpus * problem.job_power_kw_per_gpu(job, a.hardware) * region.pue
    kind = problem.objective.kind
    energy = cost = carbon = 0.0
    fx = problem.fx(region.currency)
    for c in chunks:
        for t in range(c.start_slot, c.end_slot):
            price, ci = region.price_per_mwh[t], region.carbon_g_per_kwh[t]
            # a curve the objective needs must be known; another one counts 0 (an estimate, reported)
            if not math.isfinite(price):
                if kind.uses_price:
                    bad.append(f"{where}: runs in slot {t} of {a.region} which has no price")
                price, tally.no_price = 0.0, tally.no_price + 1
            if not (math.isfinite(ci) and ci >= 0):
                if kind.uses_carbon:
                    bad.append(f"{where}: runs in slot {t} of {a.region} which has no carbon intensity")
                ci, tally.no_carbon = 0.0, tally.no_carbon + 1
            e = power_kw * problem.slot_hours
            energy += e
            cost += e * price * fx / 1000.0
            carbon += e * ci / 1000.0
            tally.gpu_use[(a.region, a.hardware, t)] += job.gpus
            tally.kw_use[(a.region, t)] += power_kw
    for name, mine, theirs in (
        ("energy_kwh", energy, a.energy_kwh),
        ("cost", cost, a.cost),
        ("carbon_kg", carbon, a.carbon_kg),
    ):
        if not _close(mine, theirs, tol):
            bad.append(f"{where}: {name} {theirs} differs from recomputed {mine}")
    tally.energy_kwh += energy
    tally.cost += cost
    tally.carbon_kg += carbon


def _check_capacity(problem: Problem, tally: _Tally, bad: list[str], tol: float) -> None:
    """GPUs per (region, hardware, slot) and power per (region, slot) within what is there."""
    regions = tally.regions
    for (rname, hname, t), used in tally.gpu_use.items():
        have = regions[rname].gpus_at(hname, t)
        if used > have:
            bad.append(f"region {rname} slot {t}: {used} {hname} GPUs used, {have} available")
    for (rname, t), used_kw in tally.kw_use.items():
        reg = regions[rname]
        limit = reg.power_budget_kw[t] - reg.base_kw_at(t)
        if math.isnan(limit):
            bad.append(f"region {rname} slot {t}: runs jobs where the power budget or base load is unknown (NaN)")
        elif used_kw > limit + tol * max(1.0, abs(limit)):
            bad.append(f"region {rname} slot {t}: {used_kw:.3f} kW for jobs, budget leaves {limit:.3f} kW")
