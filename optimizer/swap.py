"""Direct repair of an unfair plan: a short tenant's left-out job placed in a hole made for it, then every job left
out put back wherever it still fits.

The fair stage's fills hand the jobs taken out to the pipeline and hope that it finds the holes again; under a short
limit it often does not, and the short tenants' big jobs (8 GPUs for 17 hours) stay out while the capacity freed for
them goes back to small jobs, or to nobody. Here the placement is made directly, with the same rules as
``optimizer.check``: for each job left out of a tenant below its fair share (the tenant furthest below first, its
own priority order next), the cheapest hole is made for it (``optimizer.holes``: over-share work taken out, other
jobs moved elsewhere, to another hardware type or region where over-share work gives way if no place is free), and
the job is placed there in one run. Then every job left out (the short tenants' first, then by each tenant's own
priority) goes, in one run, to the start of least objective where GPUs and power are free: the work taken out is put
back where it fits, and no capacity freed is left empty.

Pure arithmetic over per-slot arrays; no solve. The caller measures the fair shares of the result and keeps the
better plan (``optimizer.fairness``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping

from optimizer.budgets import totals_plan
from optimizer.freeslots import (
    Fleet,
    copy_fleet,
    free_fleet,
    options,
    place,
    run_at,
    take,
)
from optimizer.holes import EPS, room_for
from optimizer.plan import Assignment, Plan, PlanStatus, Unplanned, UnplannedReason
from optimizer.pools import WANTED
from optimizer.problem import Job, Problem
from optimizer.repack import repack_pool

#: Share of the repair's time for the holes made by taking jobs out (fast when they exist); the rest packs pools
#: again (``optimizer.repack``), which also finds the holes that need jobs moved.
HOLES_SHARE = 0.5
#: Pools packed again per repair, those where the most short tenants' work waits (the time is shared among them).
POOLS = 4
#: How far below its share a tenant may go to let a short tenant's whole job in, as a share of what that tenant
#: lacks (under 1: the largest difference from a share only shrinks).
BELOW = 0.75


def _repack(
    problem: Problem,
    fleet: Fleet,
    placed: dict[str, Assignment],
    jobs: Mapping[str, Job],
    left: set[str],
    fair: Mapping[str, float],
    now: dict[str, float],
    work: Mapping[str, float],
    *,
    until: float,
    seed: int,
    pools: int,
) -> bool:
    """Each pool where short tenants' jobs wait packed again (``optimizer.repack``), the pools with the most such
    work first, while time is left; ``placed``, ``fleet``, ``left`` and ``now`` updated. True when anything moved."""
    changed = False
    tenant = {j: jobs[j].tenant for j in jobs}

    def waiting_in(key: tuple[str, str]) -> list[Job]:
        short = {t for t in fair if fair[t] - now[t] > EPS}
        return [
            jobs[j]
            for j in left
            if tenant[j] in short and any((r, hw) == key for r, hw, _ in options(problem, jobs[j]))
        ]

    value = {k: sum(work[j.job_id] for j in waiting_in(k)) for k in fleet.gpus}
    keys = [k for k in sorted(value, key=lambda k: -value[k]) if value[k] > 0][:pools]
    for i, key in enumerate(keys):
        remaining = until - time.perf_counter()
        if remaining <= 0.02:
            break
        waiting = waiting_in(key)
        if not waiting:
            continue
        removable = {t: max(0.0, now[t] - fair[t]) for t in fair}
        lacking = {t: max(0.0, fair[t] - now[t]) for t in fair}
        got = repack_pool(
            problem,
            key,
            placed,
            jobs,
            waiting,
            removable,
            lacking,
            work,
            time_limit_s=remaining / max(1, len(keys) - i),
            seed=seed,
        )
        if got is None:
            continue
        moved, taken, brought = got
        trial = copy_fleet(fleet)
        old = [placed[j] for j in (*moved, *taken)]
        new = [
            run_at(problem, jobs[j], key[0], key[1], s, d) for j, (s, d) in (*moved.items(), *brought.items())
        ]
        for a in old:
            take(problem, trial, a, jobs[a.job_id], +1)
        for a in new:
            take(problem, trial, a, jobs[a.job_id], -1)
        if trial.kw[key[0]].min() < -1e-6 or trial.gpus[key].min() < 0:
            continue  # the region's power does not hold the new packing
        fleet.gpus, fleet.kw = trial.gpus, trial.kw
        for j in taken:
            del placed[j]
            now[tenant[j]] -= work[j]
            left.add(j)
        for a in new:
            placed[a.job_id] = a
            if a.job_id in brought:
                now[tenant[a.job_id]] += work[a.job_id]
                left.discard(a.job_id)
        changed = True
    return changed


def repair(
    problem: Problem,
    plan: Plan,
    fair: Mapping[str, float],
    planned: Mapping[str, float],
    work: Mapping[str, float],
    levels: Mapping[str, int],
    *,
    until: float,
    seed: int = 0,
    pools: int = POOLS,
    failed: set[str] | None = None,
) -> Plan | None:
    """``plan`` with jobs of tenants below their ``fair`` share [GPU-h] placed in holes made by taking out jobs of
    tenants above theirs (never below it), then every job left out put back where it fits; None when nothing moved.

    Parameters
    ----------
    problem : Problem
        The problem ``plan`` solves (with tenants).
    plan : Plan
        A checked plan of ``problem``.
    fair, planned : Mapping[str, float]
        Each tenant's fair share and planned work in ``plan`` [GPU-h].
    work : Mapping[str, float]
        Each job's work [GPU-h] (``fairness.job_gpu_hours``).
    levels : Mapping[str, int]
        Each job's rank within its own tenant (higher: more important).
    until : float
        ``time.perf_counter()`` deadline of the search [s].
    seed : int
        Seed of the pools' CP-SAT models.
    pools : int
        Pools packed again at most (those where the most short tenants' work waits).
    failed : set[str], optional
        Jobs for which an earlier repair found no hole: tried after the others, so that one job no hole fits does
        not take every round's time; the jobs that find none here are added.
    """
    jobs = {j.job_id: j for j in problem.jobs}
    tenant = {j.job_id: j.tenant for j in problem.jobs}
    placed = {a.job_id: a for a in plan.assignments}
    fleet = free_fleet(problem, placed, jobs)
    now = dict(planned)
    reasons = {u.job_id: u for u in plan.unplanned}
    left = {u.job_id for u in plan.unplanned if u.reason in WANTED and u.job_id in jobs}
    moved = False
    tried: set[str] = set()
    failed = set() if failed is None else failed
    holes_until = time.perf_counter() + HOLES_SHARE * max(0.0, until - time.perf_counter())
    while time.perf_counter() < holes_until:
        short = sorted((t for t in fair if fair[t] - now[t] > EPS), key=lambda t: now[t] - fair[t])
        job = next(
            (
                jobs[j]
                for t in short
                for j in sorted(
                    (j for j in left if tenant[j] == t and j not in tried),
                    key=lambda j: (j in failed, -levels[j], work[j]),
                )
                if fair[t] - now[t] >= 0.5 * work[j]  # placing it brings the tenant closer to its share
            ),
            None,
        )
        if job is None:
            break
        tried.add(job.job_id)
        # a tenant at or above its share may give up what it has above it, and (jobs are whole) go below it by less
        # than this tenant lacks now: no tenant ends further from its share than the worst is now
        gap = fair[job.tenant] - now[job.tenant]
        below = BELOW * gap
        removable = {t: max(0.0, now[t] - fair[t]) + below if now[t] >= fair[t] - EPS else 0.0 for t in fair}
        found = room_for(problem, fleet, job, placed, jobs, removable, work, tenant, until=holes_until)
        if found is None:
            failed.add(job.job_id)
            continue
        for j in (*found.out, *(m.job_id for m in found.moves)):
            take(problem, fleet, placed[j], jobs[j], +1)
            del placed[j]
        for j in found.out:
            now[tenant[j]] -= work[j]
            left.add(j)
        for a in (found.run, *found.moves):
            take(problem, fleet, a, jobs[a.job_id], -1)
            placed[a.job_id] = a
        now[job.tenant] += work[job.job_id]
        left.discard(job.job_id)
        moved = True
    # pools packed again exactly: jobs moved in time make the room that taking jobs out alone cannot
    moved = (
        _repack(problem, fleet, placed, jobs, left, fair, now, work, until=until, seed=seed, pools=pools)
        or moved
    )
    # every job left out, the short tenants' first (by their own priority), goes where it still fits
    for j in sorted(
        left, key=lambda j: (fair.get(tenant[j], 0.0) - now[tenant[j]] <= EPS, -levels[j], -work[j])
    ):
        spot = place(problem, fleet, jobs[j])
        if spot is None:
            continue
        take(problem, fleet, spot, jobs[j], -1)
        placed[j] = spot
        now[tenant[j]] += work[j]
        left.discard(j)
        moved = True
    if not moved:
        return None
    kept = tuple(placed.values())
    named = set(placed)
    unplanned = tuple(u for u in plan.unplanned if u.job_id not in named)
    missing = left - {u.job_id for u in unplanned}
    unplanned += tuple(
        reasons.get(j)
        or Unplanned(j, UnplannedReason.CAPACITY, "taken out for the other tenants' fair shares")
        for j in sorted(missing)
    )
    cost, carbon, energy, objective = totals_plan(problem, kept)
    return dataclasses.replace(
        plan,
        assignments=kept,
        unplanned=unplanned,
        cost=cost,
        carbon_kg=carbon,
        energy_kwh=energy,
        objective=objective,
        status=PlanStatus.FEASIBLE,
        best_bound=None,
        gap_pct=None,
        penalised_bound=None,
    )
