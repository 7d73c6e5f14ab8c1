"""What a plan leaves of the fleet, slot by slot, and single runs placed in it by the checker's rules.

``Fleet`` holds the GPUs free per (region, hardware type) and the facility power free per region [kW], per slot, as
numpy arrays; ``take`` moves a run in or out; ``place`` finds the run of least objective that fits; ``run_at`` builds
an assignment with its energy, cost and carbon computed as ``optimizer.check`` recomputes them. Used by the fair
stage's repair (``optimizer.swap``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from optimizer.plan import Assignment, Chunk
from optimizer.problem import Job, ObjectiveKind, Problem


@dataclasses.dataclass(slots=True)
class Fleet:
    """What a plan leaves free, per slot: GPUs per (region, hardware) and facility power per region [kW]."""

    gpus: dict[tuple[str, str], np.ndarray]
    kw: dict[str, np.ndarray]


def free_fleet(problem: Problem, assignments: Mapping[str, Assignment], jobs: Mapping[str, Job]) -> Fleet:
    n = problem.n_slots
    gpus: dict[tuple[str, str], np.ndarray] = {}
    kw: dict[str, np.ndarray] = {}
    for r in problem.regions:
        limit = np.array([r.power_budget_kw[k] - r.base_kw_at(k) for k in range(n)], dtype=float)
        kw[r.name] = np.where(np.isnan(limit), -np.inf, limit)
        for h in {*r.inventory, *r.inventory_per_slot}:
            gpus[(r.name, h)] = np.array([r.gpus_at(h, k) for k in range(n)], dtype=np.int64)
    fleet = Fleet(gpus, kw)
    for a in assignments.values():
        take(problem, fleet, a, jobs[a.job_id], -1)
    return fleet


def run_kw(problem: Problem, job: Job, region: str, hardware: str) -> float:
    """Facility power of ``job`` running on ``hardware`` in ``region`` [kW]."""
    return job.gpus * problem.job_power_kw_per_gpu(job, hardware) * problem.region(region).pue


def take(problem: Problem, fleet: Fleet, a: Assignment, job: Job, sign: int) -> None:
    """Give back (``sign`` +1) or take (-1) the GPUs and power of ``a``."""
    key = (a.region, a.hardware)
    if key not in fleet.gpus:
        fleet.gpus[key] = np.zeros(problem.n_slots, dtype=np.int64)
    kw = run_kw(problem, job, a.region, a.hardware)
    for c in a.chunks:
        fleet.gpus[key][c.start_slot : c.end_slot] += sign * job.gpus
        fleet.kw[a.region][c.start_slot : c.end_slot] += sign * kw


def options(problem: Problem, job: Job, *, fits_window: bool = True) -> list[tuple[str, str, int]]:
    """(region, hardware, run slots) where ``job`` may run: allowed, with a duration and enough memory, and (with
    ``fits_window``) a run that fits between its release and its deadline inside the horizon."""
    memory = {h.name: h.memory_gb for h in problem.hardware}
    out = []
    for r in problem.regions:
        if job.allowed_regions is not None and r.name not in job.allowed_regions:
            continue
        for hw, d in job.duration_slots.items():
            if d <= 0 or memory.get(hw, -1.0) < job.memory_gb_per_gpu:
                continue
            if job.allowed_hardware is not None and hw not in job.allowed_hardware:
                continue
            if not fits_window or d <= min(problem.n_slots, job.deadline_slot) - max(0, job.release_slot):
                out.append((r.name, hw, d))
    return out


def run_objective(problem: Problem, job: Job, region: str, hardware: str, d: int) -> np.ndarray:
    """Objective of a run of ``d`` slots starting at each slot ``0..n_slots - d`` (inf where a curve is unknown)."""
    reg = problem.region(region)
    e = run_kw(problem, job, region, hardware) * problem.slot_hours  # per slot [kWh]
    price = np.asarray(reg.price_per_mwh, dtype=float) * problem.fx(reg.currency)
    carbon = np.asarray(reg.carbon_g_per_kwh, dtype=float)
    kind = problem.objective.kind
    if kind is ObjectiveKind.COST:
        per_slot = e * price / 1000.0
    elif kind is ObjectiveKind.WEIGHTED:
        per_slot = e * price / 1000.0 + problem.objective.carbon_price_per_tonne * e * carbon / 1e6
    else:
        per_slot = e * carbon / 1000.0
    # a run must not touch a slot whose price or carbon is unknown (the checker would flag the objective's curve)
    bad = ~(np.isfinite(price) & np.isfinite(carbon) & (carbon >= 0))
    per_slot = np.where(bad, np.inf, per_slot)
    window = np.lib.stride_tricks.sliding_window_view(per_slot, d)
    return window.sum(axis=1)


def run_at(problem: Problem, job: Job, region: str, hardware: str, start: int, d: int) -> Assignment:
    """``job`` in one run of ``d`` slots from ``start``, its figures computed slot by slot as the checker does."""
    reg = problem.region(region)
    e = run_kw(problem, job, region, hardware) * problem.slot_hours
    fx = problem.fx(reg.currency)
    cost = sum(e * reg.price_per_mwh[k] * fx / 1000.0 for k in range(start, start + d))
    carbon = sum(e * reg.carbon_g_per_kwh[k] / 1000.0 for k in range(start, start + d))
    return Assignment(job.job_id, region, hardware, (Chunk(start, start + d),), e * d, cost, carbon)


def place(problem: Problem, fleet: Fleet, job: Job) -> Assignment | None:
    """The run of least objective where ``job``'s GPUs and power are free for its whole run (None: nowhere)."""
    best: tuple[float, str, str, int, int] | None = None
    for rname, hw, d in options(problem, job):
        free = fleet.gpus.get((rname, hw))
        if free is None:
            continue
        lo, hi = max(0, job.release_slot), min(problem.n_slots, job.deadline_slot) - d
        if hi < lo:
            continue
        kw = run_kw(problem, job, rname, hw)
        g_ok = np.lib.stride_tricks.sliding_window_view(free, d).min(axis=1) >= job.gpus
        p_ok = np.lib.stride_tricks.sliding_window_view(fleet.kw[rname], d).min(axis=1) >= kw - 1e-9
        cost = run_objective(problem, job, rname, hw, d)
        ok = np.flatnonzero(g_ok[lo : hi + 1] & p_ok[lo : hi + 1] & np.isfinite(cost[lo : hi + 1]))
        if ok.size == 0:
            continue
        s = lo + int(ok[np.argmin(cost[lo + ok])])
        if best is None or cost[s] < best[0]:
            best = (float(cost[s]), rname, hw, s, d)
    if best is None:
        return None
    _, rname, hw, s, d = best
    return run_at(problem, job, rname, hw, s, d)


def copy_fleet(fleet: Fleet) -> Fleet:
    return Fleet({k: v.copy() for k, v in fleet.gpus.items()}, {k: v.copy() for k, v in fleet.kw.items()})
