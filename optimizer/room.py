"""Room for a short tenant's jobs: which jobs of tenants over their fair share to take out of a plan so that the
jobs of tenants below theirs can be planned in the holes left.

Taking out an over-share tenant's jobs anywhere frees capacity that a short tenant's jobs often cannot use: a job of
8 GPUs for 17 hours needs 8 GPUs of one type in one region free for 17 contiguous hours inside its window. So for
each job left out of a short tenant (its best first, while the tenant is still short), every region and hardware
type it may use and every start in its window are tried: the over-share tenants' jobs running there are taken out,
those overlapping it most first, until the window has the job's GPUs free in every slot; the window that takes out
the least work wins, provided no over-share tenant falls below its fair share. The caller then plans the jobs left
out on what remains, the short tenants' jobs first (``optimizer.fairness``).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping

from optimizer.freeslots import options
from optimizer.plan import Assignment, Plan
from optimizer.pools import WANTED
from optimizer.problem import Problem

#: Starts tried per window and option: every ``duration / STARTS``-th slot (at least every slot for short jobs).
STARTS = 6
#: Starts tried per window at most (long windows are sampled evenly).
WINDOW_STARTS = 16


def make_room(
    problem: Problem,
    plan: Plan,
    fair: Mapping[str, float],
    planned: Mapping[str, float],
    work: Mapping[str, float],
    tenant: Mapping[str, str],
    levels: Mapping[str, int],
    *,
    until: float,
) -> set[str]:
    """Jobs of ``plan`` to take out so that jobs left out of tenants below their ``fair`` share [GPU-h] fit, each
    taken out only while its tenant stays at or above its share; the search stops at ``until`` (perf_counter [s])."""
    jobs = {j.job_id: j for j in problem.jobs}
    regions = {r.name: r for r in problem.regions}
    now = dict(planned)
    short = {t for t in fair if fair[t] - now[t] > 1e-6}
    over = {t for t in fair if now[t] - fair[t] > 1e-6}
    if not short or not over:
        return set()
    used: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0] * problem.n_slots)
    holders: dict[tuple[str, str], list[Assignment]] = defaultdict(list)
    for a in plan.assignments:
        key = (a.region, a.hardware)
        for c in a.chunks:
            for k in range(c.start_slot, c.end_slot):
                used[key][k] += jobs[a.job_id].gpus
        if tenant[a.job_id] in over:
            holders[key].append(a)
    spans = {
        key: [(a, min(c.start_slot for c in a.chunks), max(c.end_slot for c in a.chunks)) for a in items if a.chunks]
        for key, items in holders.items()
    }
    taken: set[str] = set()
    waiting = [
        jobs[u.job_id]
        for u in plan.unplanned
        if u.reason in WANTED and u.job_id in jobs and tenant[u.job_id] in short
    ]
    waiting.sort(key=lambda j: (-(fair[j.tenant] - now[j.tenant]), -levels[j.job_id], work[j.job_id]))
    for job in waiting:
        if time.perf_counter() > until:
            break
        t = job.tenant
        if fair[t] - now[t] < 0.5 * work[job.job_id]:
            continue  # the tenant is (nearly) at its share
        best: tuple[float, list[Assignment], tuple[str, str], int, int] | None = None
        for rname, hw, d in options(problem, job, fits_window=False):
            key = (rname, hw)
            spans.setdefault(key, [])
            region = regions[rname]
            lo, hi = max(0, job.release_slot), min(problem.n_slots, job.deadline_slot) - d
            for s in range(lo, hi + 1, max(1, d // STARTS, (hi - lo) // WINDOW_STARTS)):
                span = range(s, s + d)
                lack = [job.gpus - (region.gpus_at(hw, k) - used[key][k]) for k in span]
                if max(lack) <= 0:
                    best = (0.0, [], key, s, d)  # room already (the fill plans it)
                    break
                if any(job.gpus > region.gpus_at(hw, k) for k in span):
                    continue
                cands = [a for a, first, last in spans[key] if first < s + d and last > s and a.job_id not in taken]
                cands.sort(key=lambda a: -sum(min(c.end_slot, s + d) - max(c.start_slot, s) for c in a.chunks
                                              if c.start_slot < s + d and c.end_slot > s))
                out: list[Assignment] = []
                loss: dict[str, float] = defaultdict(float)
                for a in cands:
                    if max(lack) <= 0:
                        break
                    o = tenant[a.job_id]
                    if now[o] - loss[o] - work[a.job_id] < fair[o] - 1e-6:
                        continue
                    g = jobs[a.job_id].gpus
                    helps = False
                    for c in a.chunks:
                        for k in range(max(c.start_slot, s), min(c.end_slot, s + d)):
                            if lack[k - s] > 0:
                                helps = True
                    if not helps:
                        continue
                    for c in a.chunks:
                        for k in range(max(c.start_slot, s), min(c.end_slot, s + d)):
                            lack[k - s] -= g
                    out.append(a)
                    loss[o] += work[a.job_id]
                if max(lack) > 0:
                    continue
                cost = sum(work[a.job_id] for a in out)
                if best is None or cost < best[0]:
                    best = (cost, out, key, s, d)
            if best is not None and best[0] == 0.0:
                break
        if best is None:
            continue
        _, out, key, s, d = best
        for a in out:
            taken.add(a.job_id)
            now[tenant[a.job_id]] -= work[a.job_id]
            for c in a.chunks:
                for k in range(c.start_slot, c.end_slot):
                    used[(a.region, a.hardware)][k] -= jobs[a.job_id].gpus
        for k in range(s, s + d):  # the hole is the waiting job's now
            used[key][k] += job.gpus
        now[t] += work[job.job_id]
    return taken
