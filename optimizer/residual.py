"""Plans in two passes: what a first plan leaves of the fleet, and the two plans as one.

``optimizer.fairness`` plans each tenant's admitted work first (its share of the capacity, by layers) and then the
rest of the work on the capacity the first plan leaves, so the second pass can only fill what the first left free:
the shares of the first pass hold, and no capacity is wasted.
"""

from __future__ import annotations

import dataclasses

from optimizer.budgets import totals_plan
from optimizer.plan import Plan, PlanStatus, SolveStats, Unplanned, UnplannedReason
from optimizer.problem import Problem


def residual_problem(problem: Problem, plan: Plan, planned: Problem) -> Problem:
    """``problem`` with the GPUs and facility power of ``plan``'s assignments (jobs of ``planned``) taken off its
    regions, slot by slot."""
    jobs = {j.job_id: j for j in planned.jobs}
    regions = []
    for r in problem.regions:
        gpus = {h: [r.gpus_at(h, k) for k in range(problem.n_slots)] for h in {*r.inventory, *r.inventory_per_slot}}
        base = [r.base_kw_at(k) for k in range(problem.n_slots)]
        used = False
        for a in plan.assignments:
            if a.region != r.name:
                continue
            used = True
            job = jobs[a.job_id]
            kw = job.gpus * problem.job_power_kw_per_gpu(job, a.hardware) * r.pue
            per_slot = gpus.setdefault(a.hardware, [0] * problem.n_slots)
            for c in a.chunks:
                for k in range(c.start_slot, c.end_slot):
                    per_slot[k] = max(0, per_slot[k] - job.gpus)
                    base[k] += kw
        if used:
            r = dataclasses.replace(
                r, inventory_per_slot={h: tuple(v) for h, v in gpus.items()}, base_load_kw=tuple(base)
            )
        regions.append(r)
    return dataclasses.replace(problem, regions=tuple(regions))


def merge_plans(problem: Problem, first: Plan, second: Plan, whole: Plan, *, wall_s: float) -> Plan:
    """One plan of ``first``'s assignments and ``second``'s, made on what ``first`` left (``second`` covers every job
    ``first`` did not plan). A job left out takes its reason from ``whole``, a plan of the whole problem, unless that
    one planned it or left it out for capacity: then the reason is capacity (on what the first pass left, a job may
    look too big for a region or its window, which it is not)."""
    assignments = (*first.assignments, *second.assignments)
    why = {u.job_id: u for u in whole.unplanned}
    unplanned = tuple(
        why[u.job_id]
        if u.job_id in why and why[u.job_id].reason is not UnplannedReason.CAPACITY
        else Unplanned(u.job_id, UnplannedReason.CAPACITY, "no room left beside the other jobs")
        for u in second.unplanned
    )
    cost, carbon, energy, objective = totals_plan(problem, assignments)
    stats = SolveStats(
        wall_s=wall_s,
        num_jobs=len(problem.jobs),
        num_classes=first.stats.num_classes + second.stats.num_classes,
        num_options=first.stats.num_options + second.stats.num_options,
        cp_status=second.stats.cp_status,
        phases={**{f"first.{k}": v for k, v in first.stats.phases.items()}, **second.stats.phases},
        notes=("two passes: the admitted work, then the rest on what it left", *second.stats.notes),
    )
    return Plan(
        solver=second.solver,
        status=PlanStatus.FEASIBLE,
        assignments=assignments,
        unplanned=unplanned,
        objective=objective,
        best_bound=None,
        gap_pct=None,
        cost=cost,
        carbon_kg=carbon,
        energy_kwh=energy,
        stats=stats,
    )
