"""Coarse to fine: on a grid finer than an hour, the same jobs planned on hourly slots give a start for the fine search.

At 15-minute slots the planner has four times the starts to search; at 10,000 jobs in 60 s its plan cost more than
the hourly plan of the same jobs (9,475 against 9,233 EUR, docs/time-grid.md), although every hourly plan, read on
the quarter-hours, is a 15-minute plan, and its ascent, pricing four times the starts a step, ended far below the
hourly bound. Here (off the LP path) the ascent first runs on the same jobs on whole hours (:func:`coarse_problem`,
:func:`coarse_ascent`) and the fine ascent goes on from those prices spread over the quarter-hours
(:func:`lift_prices`). Optionally (``SolveParams.coarse_plan_share``, off by default) the hourly problem is also
planned in a forked child and its plan read back onto the fine slots (:func:`lift`), completed greedily and offered
to the fine run as a start, so that the fine plan costs no more than it.

The hourly problem is a restriction of the fine one: each hour's capacity is the least of its slots', its prices the
mean of its slots', a job's window the whole hours inside its own and its run times, chunk lengths and overheads
rounded up to whole hours. A run at hour ``c`` is read as the run starting at the hour's first slot, with the job's
own (fine) run time, so it runs inside the hourly run's slots, within the window and the capacity of every slot.
Nothing of the hourly bound itself is claimed: it bounds the hourly restriction, not the fine problem; only the fine
Lagrangian value at the spread prices is (a valid bound at any prices).
"""

from __future__ import annotations

import dataclasses
import math
import time
from datetime import timedelta

import numpy as np

from optimizer.bound import Choice, Multipliers, Option, evaluate, subgradient
from optimizer.candidates import Candidates, fits_option
from optimizer.heuristic import Residual, Scanner
from optimizer.parallel import Child, fork_call
from optimizer.pipeline import SolveRun
from optimizer.plan import Plan
from optimizer.problem import Job, ObjectiveKind, Problem, Region
from optimizer.tables import Tables, build_tables

#: The hourly solve is not started with less time than this [s].
COARSE_MIN_S = 1.0


@dataclasses.dataclass(frozen=True, slots=True)
class Coarse:
    """An hourly restriction of a fine problem: ``problem``, and where its hours lie on the fine grid.

    Hour ``c`` of ``problem`` covers the fine slots ``[first + c * per_hour, first + (c + 1) * per_hour)``.
    """

    problem: Problem
    per_hour: int  # fine slots per hour
    first: int  # the first fine slot that starts an hour


@dataclasses.dataclass(frozen=True, slots=True)
class Pending:
    """The hourly solve running on the second worker: its child, its problem and when it should end (perf_counter)."""

    child: Child
    coarse: Coarse
    until: float


def coarse_problem(problem: Problem) -> Coarse | None:
    """The same jobs on whole hours (see the module docstring), or None where the grid is an hour or coarser, its
    slots do not divide the hour, or less than one whole hour lies in the horizon."""
    sm = problem.slot_minutes
    if sm >= 60 or 60 % sm or problem.start.second or problem.start.microsecond or problem.start.minute % sm:
        return None
    k = 60 // sm
    first = (k - problem.start.minute // sm) % k
    n = (problem.n_slots - first) // k
    if n < 1:
        return None
    span = slice(first, first + n * k)

    def per_hour(curve, how) -> tuple:
        return tuple(how(np.asarray(curve, dtype=float)[span].reshape(n, k), axis=1).tolist())

    regions = []
    for r in problem.regions:
        base = (
            np.zeros(problem.n_slots) if r.base_load_kw is None else np.asarray(r.base_load_kw, dtype=float)
        )
        regions.append(
            Region(
                r.name,
                per_hour(r.price_per_mwh, np.mean),  # NaN in any slot: the hour has no usable price
                per_hour(r.carbon_g_per_kwh, np.mean),
                per_hour(np.asarray(r.power_budget_kw, dtype=float) - base, np.min),  # the tightest slot
                r.inventory,
                r.pue,
                None,
                {hw: tuple(int(v) for v in per_hour(c, np.min)) for hw, c in r.inventory_per_slot.items()},
                r.currency,
            )
        )
    jobs = [j for j in (_coarse_job(job, first, k, n) for job in problem.jobs) if j is not None]
    if not jobs:
        return None
    start = problem.start + timedelta(minutes=first * sm)
    hourly = dataclasses.replace(
        problem, start=start, slot_minutes=60, n_slots=n, regions=tuple(regions), jobs=tuple(jobs)
    )
    return Coarse(hourly, k, first)


def _coarse_job(job: Job, first: int, k: int, n: int) -> Job | None:
    """``job`` on whole hours: its window the hours inside its own, lengths rounded up; None when no hour fits."""
    release = max(0, -((first - job.release_slot) // k))  # ceil((release - first) / k)
    deadline = min(n, (job.deadline_slot - first) // k)
    durations = {hw: math.ceil(d / k) for hw, d in job.duration_slots.items() if d > 0}
    if not durations or deadline - release < min(durations.values()):
        return None
    return dataclasses.replace(
        job,
        duration_slots=durations,
        release_slot=release,
        deadline_slot=deadline,
        min_chunk_slots=math.ceil(job.min_chunk_slots / k),
        checkpoint_overhead_slots=math.ceil(job.checkpoint_overhead_slots / k),
    )


def lift(tb: Tables, coarse: Coarse, plan: Plan) -> Choice:
    """The hourly ``plan`` read on the fine slots of ``tb``: each run starts at its hour's first slot with the job's
    fine run time (two chunks: the first as long as its hours allow, the rest in the second). A run that would not be
    inside the job's window, on valid slots and within the capacity left is left out (none should be)."""
    k, first = coarse.per_hour, coarse.first
    ch = Choice.empty(tb.J)
    res = Residual(tb)
    row_of = {tb.problem.jobs[int(i)].job_id: row for row, i in enumerate(tb.rows)}
    reg = {r.name: i for i, r in enumerate(tb.problem.regions)}
    hwi = {h.name: i for i, h in enumerate(tb.problem.hardware)}
    for a in plan.assignments:
        row = row_of.get(a.job_id)
        if row is None or a.region not in reg or a.hardware not in hwi:
            continue
        r, h = reg[a.region], hwi[a.hardware]
        if not tb.elig[row, r, h]:
            continue
        dur, ovh, min_chunk = int(tb.dur[row, h]), int(tb.ovh[row]), int(tb.min_chunk[row])
        c = a.chunks
        s1 = first + k * c[0].start_slot
        opt: Option | None = None
        if len(c) == 1 or k * c[0].length_slots >= dur:
            opt = Option(r, h, s1, dur, 0, 0)  # one run fits in the first chunk's hours
        elif len(c) == 2 and tb.intr[row]:
            l1 = min(k * c[0].length_slots, dur + ovh - min_chunk)
            if l1 >= min_chunk:
                opt = Option(r, h, s1, l1, first + k * c[1].start_slot, dur + ovh - l1)
        if opt is not None and inside(tb, row, opt) and fits_option(tb, res, row, opt):
            ch.set(row, opt)
            res.apply(tb, ch, row, -1)
    return ch


def inside(tb: Tables, row: int, opt: Option) -> bool:
    """Whether ``opt`` runs inside ``row``'s window, on slots where it may run, its chunks in order."""
    r, _, s1, l1, s2, l2 = opt
    end = s2 + l2 if l2 else s1 + l1
    if s1 < tb.rel[row] or end > tb.dl[row] or (l2 and s2 < s1 + l1):
        return False
    return bool(tb.valid[r, s1 : s1 + l1].all() and (not l2 or tb.valid[r, s2 : s2 + l2].all()))


def complete(tb: Tables, ch: Choice, order: np.ndarray, cand: Candidates) -> Choice:
    """``ch`` with the jobs it leaves out placed greedily in ``order``: the cheapest candidate start that fits, else
    the cheapest feasible option (the first plan's rule, :func:`optimizer.candidates.place_fast`)."""
    out = ch.copy()
    res = Residual(tb)
    for placed_row in np.flatnonzero(out.r >= 0).tolist():
        res.apply(tb, out, placed_row, -1)
    scan = Scanner(tb)
    for row_ in order:
        row = int(row_)
        if out.r[row] >= 0:
            continue
        placed = False
        for kk in range(cand.offsets[row], cand.offsets[row + 1]):
            opt = cand.option(kk)
            if fits_option(tb, res, row, opt):
                out.set(row, opt)
                placed = True
                break
        if not placed:
            found = scan.best(row, res, cand.pairs(row))
            if found is None:
                continue
            out.set(row, found[2])
        res.apply(tb, out, row, -1)
    return out


def lift_prices(tb: Tables, coarse: Coarse, m: Multipliers) -> Multipliers:
    """Hourly capacity prices as prices of the fine slots: an hour's price per GPU-hour (kW-hour) spread evenly over
    its slots, so that a run over the whole hour pays what it paid on the hourly grid; slots outside whole hours 0."""
    k, first = coarse.per_hour, coarse.first
    n = m.lam.shape[-1]
    lam, mu = np.zeros((tb.R, tb.H, tb.T)), np.zeros((tb.R, tb.T))
    lam[:, :, first : first + n * k] = np.repeat(m.lam, k, axis=-1) / k
    mu[:, first : first + n * k] = np.repeat(m.mu, k, axis=-1) / k
    return Multipliers(lam, mu, m.nu)


def coarse_ascent(run: SolveRun) -> None:
    """Off the LP path on a grid finer than an hour: the subgradient ascent first on the hourly problem (a quarter
    of the starts to price per step at 15 minutes), its prices spread over the fine slots as the fine ascent's start.
    Any prices give a valid bound of the fine problem (the Lagrangian value at them); they are kept only when that
    value is higher than the bound so far."""
    params = run.params
    if params.coarse_share <= 0 or run.capped or run.lp_path:
        return
    t = time.perf_counter()
    budget = params.coarse_share * run.left()
    coarse = coarse_problem(run.tb.problem)
    if coarse is None:
        return
    ctb = build_tables(coarse.problem)
    if ctb.J == 0 or run.left() <= 0:
        return
    spent = time.perf_counter() - t
    value, m, history = subgradient(
        ctb, run.upper, max_iter=100_000, time_limit_s=max(0.05, budget - spent - run.eval_s)
    )
    fine = lift_prices(run.tb, coarse, m)
    fine_value = float(evaluate(run.tb, fine)[0])
    run.notes.append(
        f"coarse ascent: {len(history)} hourly iterations, hourly bound {value:.6g}, fine bound at its prices "
        f"{fine_value:.6g} (before {run.lower:.6g})"
    )
    if fine_value > run.lower:
        run.lower, run.m = fine_value, fine
    run.lap("coarse_ascent")


def coarse_start(run: SolveRun) -> None:
    """On a grid finer than an hour, start the hourly solve of the same jobs on the second worker."""
    from optimizer.solve import solve_gridshift  # the pipeline that runs this phase

    params = run.params
    # on the LP path (up to ``max_lp_jobs``) the fine plans already cost less than the hourly ones (1,000 jobs, seeds
    # 0/1/2: 744.4 / 603.3 / 780.0 against 784.9 / 648.8 / 830.2 EUR) and the hourly solve would take CPU from the LP
    if params.coarse_plan_share <= 0 or params.num_workers < 2 or run.capped or run.lp_path:
        return
    if run.tb.problem.objective.kind is ObjectiveKind.CARBON_WITH_COST_CAP:
        return
    budget = params.coarse_plan_share * run.left()
    if budget < COARSE_MIN_S:
        return
    coarse = coarse_problem(run.tb.problem)
    if coarse is None:
        return
    # the hourly solve may take its limit + 10 % + 0.5 s (``solve.allowed_s``): it is given what ends in ``budget``
    sub = dataclasses.replace(
        params, time_limit_s=max(0.1, (budget - 0.5) / 1.1), num_workers=1, coarse_plan_share=0.0
    )
    child = fork_call(lambda: solve_gridshift(coarse.problem, sub))
    if child is not None:
        run.coarse = Pending(child, coarse, time.perf_counter() + budget)
    run.lap("coarse_start")


def coarse_collect(run: SolveRun) -> None:
    """The hourly plan, read on the fine slots and completed, offered as a start (the fine plan is never worse)."""
    pending = run.coarse
    if pending is None:
        return
    run.coarse = None
    wait = max(0.0, min(pending.until - time.perf_counter() + 0.5, run.left() - 0.1))
    got = pending.child.result(timeout_s=wait)
    if got is None:
        run.notes.append("coarse: no hourly plan in time")
        return
    lifted = lift(run.tb, pending.coarse, got)
    n_lifted = int((lifted.r >= 0).sum())
    filled = complete(run.tb, lifted, run.order, run.cand0)
    run.best.offer(
        filled,
        start=True,
        label="coarse plan",
        extra=f" (hourly {got.objective:.6g}, {n_lifted} of {run.tb.J} lifted, gap {got.gap_pct})",
    )
    run.lap("coarse_collect")
