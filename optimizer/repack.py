"""One pool packed again, exactly: room for the short tenants' big jobs made by moving every job of a region and
hardware type in time, not only by taking jobs out.

A short tenant's job of 4 GPUs for 40 hours rarely finds a hole by taking out jobs of the over-share tenants alone:
its window is shared with the short tenants' own jobs, which stay. Here one pool (a region and a hardware type) is a
small CP-SAT model: every job planned there keeps its place or moves within its window (one run), a job of a tenant
above its share may be taken out (no more of its work than it has above its share), and the jobs left out of the
short tenants that may run there may come in (no more of a tenant's work than it lacks, plus half of its biggest
job). Objective: most short tenants' work brought in (twice), least work taken out, fewest jobs moved. The GPUs per
slot hold as a cumulative constraint; the region's power is checked on the result (a move that passes it is
refused). ``optimizer.swap`` runs it pool by pool on the plan it repairs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from ortools.sat.python import cp_model

from optimizer.plan import Assignment
from optimizer.problem import Job, Problem

#: Integer units of the model per GPU-hour of work.
SCALE = 10


def repack_pool(
    problem: Problem,
    key: tuple[str, str],
    placed: Mapping[str, Assignment],
    jobs: Mapping[str, Job],
    waiting: Sequence[Job],
    removable: Mapping[str, float],
    lacking: Mapping[str, float],
    work: Mapping[str, float],
    *,
    time_limit_s: float,
    seed: int = 0,
) -> tuple[dict[str, tuple[int, int]], set[str], dict[str, tuple[int, int]]] | None:
    """The pool ``key`` = (region, hardware) of ``placed`` packed again with the ``waiting`` jobs of short tenants.

    Parameters
    ----------
    removable : Mapping[str, float]
        Work each tenant may give up [GPU-h] (what it has above its fair share).
    lacking : Mapping[str, float]
        Work each short tenant lacks of its fair share [GPU-h].
    time_limit_s : float
        CP-SAT time limit [s].

    Returns
    -------
    (moved, taken_out, brought_in) or None
        ``moved``: job -> (start, run slots) of the pool's jobs whose run changed; ``taken_out``: jobs removed;
        ``brought_in``: waiting job -> (start, run slots). None when no solution brings any job in.
    """
    rname, hw = key
    reg = problem.region(rname)
    n = problem.n_slots
    caps = [reg.gpus_at(hw, k) for k in range(n)]
    cap = max(caps, default=0)
    if cap <= 0:
        return None
    pool = [a for a in placed.values() if (a.region, a.hardware) == key]
    # only the jobs running where a waiting job could run are free to move; the others hold their GPUs
    spans = [
        (max(0, j.release_slot), min(n, j.deadline_slot)) for j in waiting if j.duration_slots.get(hw, 0) > 0
    ]
    if not spans:
        return None
    lo_w, hi_w = min(a for a, _ in spans), max(b for _, b in spans)
    free_to_move = []
    for a in pool:
        if any(c.start_slot < hi_w and c.end_slot > lo_w for c in a.chunks):
            free_to_move.append(a)
        else:
            for c in a.chunks:
                for k in range(c.start_slot, c.end_slot):
                    caps[k] -= jobs[a.job_id].gpus
    pool = free_to_move
    m = cp_model.CpModel()
    intervals, demands = [], []
    # slots with fewer GPUs than the most (maintenance, or jobs that stay): the difference held by fixed intervals
    for k, have in enumerate(caps):
        if have < cap:
            intervals.append(m.new_fixed_size_interval_var(k, 1, f"held[region={rname},hw={hw},t={k}]"))
            demands.append(cap - max(0, have))
    starts: dict[str, cp_model.IntVar] = {}
    present: dict[str, cp_model.IntVar] = {}
    moved_vars = []
    out_terms: dict[str, list] = {}
    for a in pool:
        job = jobs[a.job_id]
        d = job.duration_slots[hw]
        lo, hi = max(0, job.release_slot), min(n, job.deadline_slot) - d
        if hi < lo:
            return None
        tag = f"job={a.job_id},region={rname},hw={hw}"
        s = m.new_int_var(lo, hi, f"start[{tag}]")
        single = len(a.chunks) == 1 and a.chunks[0].length_slots == d
        if single:
            m.add_hint(s, a.chunks[0].start_slot)
        mv = m.new_bool_var(f"moved[{tag}]")
        m.add_hint(mv, 0 if single else 1)
        if single and lo <= a.chunks[0].start_slot <= hi:
            m.add(s == a.chunks[0].start_slot).only_enforce_if(mv.Not())
        else:
            m.add(mv == 1)
        moved_vars.append(mv)
        if removable.get(job.tenant, 0.0) >= work[a.job_id] - 1e-6:
            p = m.new_bool_var(f"kept[{tag}]")
            m.add_hint(p, 1)
            intervals.append(m.new_optional_fixed_size_interval_var(s, d, p, f"run[{tag}]"))
            out_terms.setdefault(job.tenant, []).append((round(SCALE * work[a.job_id]), p))
            present[a.job_id] = p
        else:
            intervals.append(m.new_fixed_size_interval_var(s, d, f"run[{tag}]"))
        demands.append(job.gpus)
        starts[a.job_id] = s
    # the short tenants' jobs that may come in
    incoming: dict[str, tuple[cp_model.IntVar, cp_model.IntVar, int]] = {}
    by_tenant: dict[str, list] = {}
    for job in waiting:
        d = job.duration_slots.get(hw, 0)
        lo, hi = max(0, job.release_slot), min(n, job.deadline_slot) - d
        if d <= 0 or hi < lo or job.gpus > cap or lacking.get(job.tenant, 0.0) <= 0:
            continue
        tag = f"job={job.job_id},region={rname},hw={hw}"
        s = m.new_int_var(lo, hi, f"start[{tag}]")
        q = m.new_bool_var(f"in[{tag}]")
        m.add_hint(q, 0)  # the plan as it is: a solution to start from
        m.add_hint(s, lo)
        intervals.append(m.new_optional_fixed_size_interval_var(s, d, q, f"run[{tag}]"))
        demands.append(job.gpus)
        incoming[job.job_id] = (s, q, d)
        by_tenant.setdefault(job.tenant, []).append((round(SCALE * work[job.job_id]), q))
    if not incoming:
        return None
    m.add_cumulative(intervals, demands, cap)
    # a tenant above its share gives up no more than it has above it
    removed = []
    for t, terms in out_terms.items():
        lost = sum(w * (1 - p) for w, p in terms)
        m.add(lost <= math.floor(SCALE * removable[t]))
        removed.append(lost)
    # a short tenant gets no more than it lacks, plus half of its biggest job (jobs are whole)
    gained = []
    for t, terms in by_tenant.items():
        got = sum(w * q for w, q in terms)
        m.add(got <= math.floor(SCALE * lacking[t]) + max(w for w, _ in terms) // 2)
        gained.append(got)
    m.maximize(2 * len(moved_vars) * sum(gained) - len(moved_vars) * sum(removed) - sum(moved_vars))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, time_limit_s)
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = seed
    status = solver.solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    brought = {j: (solver.value(sv), d) for j, (sv, q, d) in incoming.items() if solver.value(q)}
    if not brought:
        return None
    taken = {j for j, p in present.items() if not solver.value(p)}
    moved: dict[str, tuple[int, int]] = {}
    for a in pool:
        if a.job_id in taken:
            continue
        first = solver.value(starts[a.job_id])
        d = jobs[a.job_id].duration_slots[hw]
        if not (len(a.chunks) == 1 and a.chunks[0].start_slot == first and a.chunks[0].length_slots == d):
            moved[a.job_id] = (first, d)
    return moved, taken, brought
