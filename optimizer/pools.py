"""Fair shares over the capacity each tenant's jobs can actually use (weighted max-min with placement constraints).

Capacity is not interchangeable: a GPU-hour of L4 cannot serve a job that needs 80 GB, one in France cannot serve a
job resident in Germany, and (with ``Fairness.pool_hours``) one on day 3 cannot serve a job due on day 1. So the
work a plan places is split into **pools**, ``(region, hardware type, time block)``: a pool's *capacity* is the work
the plan places in it [GPU-h] (a job's work shared over the blocks its runs touch, by run slots). A job *may use*
every pool of a region it may run in, a hardware type it may run on (allowed, with a duration and enough memory,
held by that region) and a block its window overlaps.

A tenant's **fair share** is its share in the weighted max-min fair allocation of those pools (progressive
filling): every tenant's allocation grows with its weight, each only from pools its own jobs (planned or left out
for capacity) may use and up to their work, until it is stopped by its demand or by pools that are all taken by
tenants at the same level or below. Pooled over one pool (one hardware type, one region, one block) this is the
plain water-filling of ``layers.water_fill``; the shares always add up to the work placed.

Here it is computed by bisection on the water level with OR-Tools' max-flow (tenant -> job class -> pool -> sink);
``optimizer.check_tenants`` computes it again on its own, by linear programs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from ortools.graph.python import max_flow

from optimizer.plan import Plan, UnplannedReason
from optimizer.problem import Job, Problem

#: Jobs left out for these reasons still count in their tenant's demand: no room beside the others, or the solver
#: stopped before it reached them.
WANTED = frozenset({UnplannedReason.CAPACITY, UnplannedReason.NOT_SOLVED})
#: A pool of capacity: ``(region, hardware type, time block)``.
Pool = tuple[str, str, int]
#: Integer units of the max-flow per GPU-hour (the flow works in integers).
SCALE = 1000
#: Bisection steps on the water level (relative precision 2 ** -STEPS).
STEPS = 40


def block_slots(problem: Problem) -> int:
    """Slots per time block of the pools (the whole horizon unless ``Fairness.pool_hours`` is set)."""
    hours = problem.fairness.pool_hours
    if hours is None:
        return max(1, problem.n_slots)
    return max(1, round(hours / problem.slot_hours))


def job_pools(problem: Problem, job: Job, block: int) -> frozenset[Pool]:
    """The pools ``job`` may use: its regions x its hardware types held there x the blocks its window overlaps."""
    hw_mem = {h.name: h.memory_gb for h in problem.hardware}
    hws = [
        hw
        for hw, d in job.duration_slots.items()
        if d > 0
        and (job.allowed_hardware is None or hw in job.allowed_hardware)
        and hw_mem.get(hw, -1.0) >= job.memory_gb_per_gpu
    ]
    first = max(0, job.release_slot) // block
    last = (min(problem.n_slots, job.deadline_slot) - 1) // block
    out: set[Pool] = set()
    for r in problem.regions:
        if job.allowed_regions is not None and r.name not in job.allowed_regions:
            continue
        for hw in hws:
            if r.inventory.get(hw, 0) > 0 or any(n > 0 for n in r.inventory_per_slot.get(hw, ())):
                out.update((r.name, hw, b) for b in range(first, last + 1))
    return frozenset(out)


def plan_pools(
    problem: Problem, plan: Plan, work: Mapping[str, float], tenant: Mapping[str, str]
) -> tuple[dict[Pool, float], dict[tuple[str, frozenset[Pool]], float]]:
    """Capacity per pool (work ``plan`` places there [GPU-h]) and demand per job class (tenant, pools it may use)
    [GPU-h] of the jobs planned or left out for capacity. A planned job's class holds the pools it was placed in."""
    block = block_slots(problem)
    jobs = {j.job_id: j for j in problem.jobs}
    capacity: dict[Pool, float] = defaultdict(float)
    classes: dict[tuple[str, frozenset[Pool]], float] = defaultdict(float)
    for a in plan.assignments:
        job = jobs[a.job_id]
        slots: dict[int, int] = defaultdict(int)
        for c in a.chunks:
            for k in range(c.start_slot, c.end_slot):
                slots[k // block] += 1
        total = sum(slots.values())
        placed = {(a.region, a.hardware, b) for b in slots}
        for b, n in slots.items():
            capacity[(a.region, a.hardware, b)] += work[a.job_id] * n / total
        classes[(tenant[a.job_id], job_pools(problem, job, block) | placed)] += work[a.job_id]
    for u in plan.unplanned:
        if u.reason in WANTED and u.job_id in jobs:
            classes[(tenant[u.job_id], job_pools(problem, jobs[u.job_id], block))] += work[u.job_id]
    return dict(capacity), dict(classes)


def constrained_fill(
    weights: Mapping[str, float],
    classes: Mapping[tuple[str, frozenset[Pool]], float],
    capacity: Mapping[Pool, float],
) -> dict[str, float]:
    """Weighted max-min fair shares [GPU-h] of the pools' ``capacity`` among tenants whose demand comes in job
    ``classes`` (each usable only in its pools); every tenant of ``weights`` gets a share (0 without demand)."""
    pools = sorted(capacity)
    pool_node = {p: k for k, p in enumerate(pools, start=2)}
    names = sorted(weights)
    tenant_node = {t: len(pools) + 2 + k for k, t in enumerate(names)}
    smf = max_flow.SimpleMaxFlow()
    source_arc: dict[str, int] = {}
    demand: dict[str, int] = defaultdict(int)
    for t in names:
        source_arc[t] = smf.add_arc_with_capacity(0, tenant_node[t], 0)
    node = len(pools) + 2 + len(names)
    for (t, usable), d in classes.items():
        units = round(d * SCALE)
        if units <= 0 or t not in tenant_node:
            continue
        reach = [p for p in usable if p in pool_node]
        if not reach:
            continue
        demand[t] += units
        smf.add_arc_with_capacity(tenant_node[t], node, units)
        for p in reach:
            smf.add_arc_with_capacity(node, pool_node[p], units)
        node += 1
    for p in pools:
        smf.add_arc_with_capacity(pool_node[p], 1, round(capacity[p] * SCALE))

    def flow(caps: Mapping[str, int]) -> int:
        for t in names:
            smf.set_arc_capacity(source_arc[t], caps.get(t, 0))
        smf.solve(0, 1)
        return smf.optimal_flow()

    fixed: dict[str, int] = {t: 0 for t in names if demand[t] <= 0}
    active = [t for t in names if demand[t] > 0]
    while active:

        def caps_at(lam: float, active: list[str] = active) -> dict[str, int]:
            return {**fixed, **{t: min(demand[t], round(lam * weights[t])) for t in active}}

        hi = max(demand[t] / weights[t] for t in active)
        top = caps_at(hi)
        if flow(top) >= sum(top.values()):
            fixed.update({t: demand[t] for t in active})
            break
        lo = 0.0
        for _ in range(STEPS):
            mid = 0.5 * (lo + hi)
            caps = caps_at(mid)
            if flow(caps) >= sum(caps.values()):
                lo = mid
            else:
                hi = mid
        base_caps = caps_at(lo)
        base = flow(base_caps)
        step = max(2 * len(names), SCALE // 100)
        frozen = []
        for t in active:
            if base_caps[t] >= demand[t] or flow({**base_caps, t: base_caps[t] + step}) < base + step // 2:
                frozen.append(t)
        for t in frozen or active:  # none stopped: rounding; stop them all at this level
            fixed[t] = base_caps[t]
        active = [t for t in active if t not in fixed]
    return {t: fixed.get(t, 0) / SCALE for t in names}
