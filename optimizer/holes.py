"""Holes for a short tenant's left-out job: the place where taking out the least over-share work (and moving the
fewest other jobs elsewhere) lets it run, used by the fair stage's repair (``optimizer.swap``).

For each region, hardware type and a sample of starts in the job's window, the jobs running there go until its GPUs
and power are free for its whole run: a job of a tenant above its share is taken out (within what that tenant may
give up), any other is moved. The holes are ranked by the work they take out and move; the first whose moves all
find a place wins. A job to move goes to its cheapest free place (any region, hardware type and start it may use);
where none is free, to a hole of its own made by taking out more over-share work there (a cascade of one step: an
8-GPU job that needs a whole H200 pool moves a job of another tenant to MI300X, whose flood jobs give way); a smaller
job of the short tenant itself that finds no place is left out while its tenant still gains at least half the job
placed.

Pure arithmetic over per-slot arrays; no solve.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import defaultdict
from collections.abc import Mapping

import numpy as np

from optimizer.freeslots import Fleet, copy_fleet, options, place, run_at, run_kw, run_objective, take
from optimizer.plan import Assignment
from optimizer.problem import Job, Problem

#: Starts tried per option of a short tenant's job: every ``duration / STARTS``-th slot at least.
STARTS = 8
#: Starts tried per option at most (long windows are sampled evenly).
WINDOW_STARTS = 24
#: Shortfall [GPU-h] below which a tenant counts as served (rounding).
EPS = 1e-6


def _overlap(a: Assignment, s: int, e: int) -> int:
    return sum(max(0, min(c.end_slot, e) - max(c.start_slot, s)) for c in a.chunks)


#: Holes whose moves are tried at most, cheapest first, per short tenant's job while ``until`` allows (each a copy of
#: the fleet and a placement per job moved, or a hole of its own for a job that finds no free place).
VERIFY = 40
#: A GPU-hour moved elsewhere counts this much against a hole (a move may fail; the work taken out is only lost if
#: no place is found for it later).
MOVE_WEIGHT = 0.25


@dataclasses.dataclass(frozen=True, slots=True)
class Hole:
    """A place for a short tenant's job: the jobs taken out (within what their tenants may give up), the jobs moved
    elsewhere (their new runs), and the job's run; ``lost``: the work taken out [GPU-h]."""

    lost: float
    out: tuple[str, ...]
    moves: tuple[Assignment, ...]
    run: Assignment


def room_for(
    problem: Problem,
    fleet: Fleet,
    job: Job,
    placed: Mapping[str, Assignment],
    jobs: Mapping[str, Job],
    removable: Mapping[str, float],
    work: Mapping[str, float],
    tenant: Mapping[str, str],
    *,
    moves: bool = True,
    until: float = math.inf,
) -> Hole | None:
    """The cheapest hole for ``job`` (None when none can be made). In a region, hardware type and start, the jobs
    running there are taken out, those overlapping the run most first, until the job's GPUs and power are free for
    its whole run: a job of a tenant that may give up its work (``removable`` [GPU-h] per tenant: what it has above
    its share) is taken out, any other is moved (only with ``moves``; without, the hole is not made). The holes are
    ranked by the work taken out plus ``MOVE_WEIGHT`` times the work moved, then by the objective; the first whose
    moves all find a place wins (``_move_all``: a free place, else a hole of their own made by taking out over-share
    work, else, for the short tenant's own smaller jobs, left out). ``until``: ``time.perf_counter()`` after which
    no further hole is verified."""
    holes: list[tuple[float, float, list[str], list[str], str, str, int, int]] = []
    by_region: dict[str, list[Assignment]] = defaultdict(list)
    for a in placed.values():
        by_region[a.region].append(a)
    # per region: each run's first and last slot, and whether it is one chunk (its overlap is then arithmetic)
    spans = {
        r: (
            np.array([min(c.start_slot for c in a.chunks) for a in al]),
            np.array([max(c.end_slot for c in a.chunks) for a in al]),
            np.array([len(a.chunks) == 1 for a in al]),
        )
        for r, al in by_region.items()
    }
    none = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool))
    for rname, hw, d in options(problem, job):
        reg = problem.region(rname)
        free = fleet.gpus.get((rname, hw))
        if free is None:
            continue
        kw = run_kw(problem, job, rname, hw)
        lo, hi = max(0, job.release_slot), min(problem.n_slots, job.deadline_slot) - d
        cost = run_objective(problem, job, rname, hw, d)
        held = np.array([reg.gpus_at(hw, k) for k in range(problem.n_slots)])
        for s in range(lo, hi + 1, max(1, d // STARTS, (hi - lo) // WINDOW_STARTS)):
            if not math.isfinite(cost[s]):
                continue
            if held[s : s + d].min() < job.gpus:
                continue
            lack_g = job.gpus - free[s : s + d]
            lack_kw = kw - fleet.kw[rname][s : s + d]
            out: list[str] = []
            move: list[str] = []
            given: dict[str, float] = defaultdict(float)
            if lack_g.max() > 0 or lack_kw.max() > 1e-9:
                first, last, single = spans.get(rname, none)
                near = np.flatnonzero((first < s + d) & (last > s))
                over = np.minimum(last[near], s + d) - np.maximum(first[near], s)
                ranked = []
                for i, o in zip(near.tolist(), over.tolist(), strict=True):
                    a = by_region[rname][i]
                    if not single[i]:
                        o = _overlap(a, s, s + d)
                    if o > 0:
                        keep = removable.get(tenant[a.job_id], 0.0) < work[a.job_id] - EPS
                        ranked.append(((a.hardware != hw, keep, -o), a))
                ranked.sort(key=lambda r: r[0])
                cands = [a for _, a in ranked]
                lack_g = lack_g.copy()
                lack_kw = lack_kw.copy()
                for a in cands:
                    short_g = lack_g.max() > 0
                    if not short_g and lack_kw.max() <= 1e-9:
                        break
                    same = a.hardware == hw
                    if short_g and not same:
                        break  # the jobs of this type come first: the others free power, never GPUs of this type
                    mask = np.zeros(d, dtype=bool)
                    for c in a.chunks:
                        mask[max(c.start_slot, s) - s : max(0, min(c.end_slot, s + d) - s)] = True
                    if not ((same and (mask & (lack_g > 0)).any()) or (mask & (lack_kw > 1e-9)).any()):
                        continue
                    other = jobs[a.job_id]
                    o = tenant[a.job_id]
                    if given[o] + work[a.job_id] <= removable.get(o, 0.0) + EPS:
                        out.append(a.job_id)
                        given[o] += work[a.job_id]
                    elif moves:
                        move.append(a.job_id)
                    else:
                        continue
                    if same:
                        lack_g[mask] -= other.gpus
                    lack_kw[mask] -= run_kw(problem, other, a.region, a.hardware)
                if lack_g.max() > 0 or lack_kw.max() > 1e-9:
                    continue
            score = sum(given.values()) + MOVE_WEIGHT * sum(work[j] for j in move)
            holes.append((score, float(cost[s]), out, move, rname, hw, s, d))
    holes.sort(key=lambda h: (h[0], h[1]))
    for i, (_score, _, out, move, rname, hw, s, d) in enumerate(holes[: VERIFY if moves else 1]):
        if i > 0 and time.perf_counter() > until:
            break
        run = run_at(problem, job, rname, hw, s, d)
        if not move:
            return Hole(sum(work[j] for j in out), tuple(out), (), run)
        got = _move_all(problem, fleet, job, run, out, move, placed, jobs, removable, work, tenant, until)
        if got is not None:
            return got
    return None


def _move_all(
    problem: Problem,
    fleet: Fleet,
    job: Job,
    run: Assignment,
    out: list[str],
    move: list[str],
    placed: Mapping[str, Assignment],
    jobs: Mapping[str, Job],
    removable: Mapping[str, float],
    work: Mapping[str, float],
    tenant: Mapping[str, str],
    until: float,
) -> Hole | None:
    """The hole ``run`` of ``job`` made by taking ``out`` out and moving ``move`` elsewhere, or None when one of
    them finds no place. A job to move goes, biggest first, to its cheapest free place; failing that, to a hole of
    its own made by taking out more over-share work (within what is left of ``removable``; its own hole moves
    nothing); failing that, a job of ``job``'s own tenant is left out while the tenant still gains at least half of
    ``job`` (its small job gives way to its big one); any other job that finds no place refuses the hole, and so
    does ``time.perf_counter()`` past ``until`` before a job's own hole is searched."""
    trial = copy_fleet(fleet)
    for j in (*out, *move):
        take(problem, trial, placed[j], jobs[j], +1)
    take(problem, trial, run, job, -1)
    gone = {*out, *move}
    left = dict(removable)
    for j in out:
        left[tenant[j]] = left.get(tenant[j], 0.0) - work[j]
    taken = list(out)
    moved: dict[str, Assignment] = {}
    own = 0.0
    for j in sorted(move, key=lambda j: -work[j]):
        there = place(problem, trial, jobs[j])
        if there is None:
            if time.perf_counter() > until:
                return None
            rest = {k: a for k, a in placed.items() if k not in gone}
            rest.update(moved)
            sub = room_for(problem, trial, jobs[j], rest, jobs, left, work, tenant, moves=False)
            if sub is not None:
                for o in sub.out:
                    take(problem, trial, rest[o], jobs[o], +1)
                    moved.pop(o, None)
                    gone.add(o)
                    left[tenant[o]] = left.get(tenant[o], 0.0) - work[o]
                    taken.append(o)
                there = sub.run
        if there is None:
            if tenant[j] == job.tenant and own + work[j] <= 0.5 * work[job.job_id] + EPS:
                own += work[j]
                taken.append(j)
                continue
            return None
        take(problem, trial, there, jobs[j], -1)
        moved[j] = there
    return Hole(sum(work[j] for j in taken), tuple(taken), tuple(moved.values()), run)
