"""Baselines with the solver signature ``solve(problem, params) -> Plan``.

- ``run_now``: each job starts at release in its home region on its preferred hardware; when that is full
  it waits for the first start that fits (it may then finish after its deadline: a deadline miss).
- ``best_window``: each job alone picks the cheapest start in its home region on its preferred hardware
  (what a carbon-aware SDK does); conflicts are repaired greedily in start order (cheapest start that still
  fits, else the first start that fits, possibly late).
- ``greedy``: least slack first, each job takes the cheapest option that still fits anywhere.
- ``oracle``: the Gridshift planner; the oracle is the planner run on realised curves (the caller passes
  the problem built from realised prices and carbon intensity).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from optimizer.assemble import assemble_plan
from optimizer.bound import Choice, Option, cumulative
from optimizer.heuristic import Residual, greedy_order, place
from optimizer.plan import Plan, PlanStatus, SolveStats, UnplannedReason
from optimizer.problem import ObjectiveKind, Problem, SolveParams
from optimizer.solve import solve_gridshift
from optimizer.tables import Tables, build_tables, power_mw


def _home(tb: Tables, row: int) -> tuple[int, int]:
    """(region, hardware) a job runs on "now": home region and preferred hardware where eligible."""
    job = tb.problem.jobs[int(tb.rows[row])]
    names_r = [r.name for r in tb.problem.regions]
    names_h = [h.name for h in tb.problem.hardware]
    elig = tb.elig[row]
    r = names_r.index(job.home_region) if job.home_region in names_r else -1
    if r < 0 or not elig[r].any():
        r = int(np.flatnonzero(elig.any(axis=1))[0])
    h = names_h.index(job.preferred_hardware) if job.preferred_hardware in names_h else -1
    if h < 0 or not elig[r, h]:
        cands = np.flatnonzero(elig[r])
        h = int(cands[np.argmin(tb.dur[row, cands])])
    return r, h


def _fits(tb: Tables, res: Residual, row: int, r: int, h: int, first: int, last: int) -> np.ndarray:
    """Which starts ``first..last`` of a contiguous run fit the residual capacity and valid curves."""
    length = int(tb.dur[row, h])
    if last < first:
        return np.zeros(0, dtype=bool)
    span = slice(first, last + length)
    gpu = np.lib.stride_tricks.sliding_window_view(res.gpu[r, h, span], length).min(axis=-1)
    kw = np.lib.stride_tricks.sliding_window_view(res.kw[r, span], length).min(axis=-1)
    ok = np.lib.stride_tricks.sliding_window_view(tb.valid[r, span], length).all(axis=-1)
    return (gpu >= tb.g[row]) & (kw >= power_mw(tb.power_kw(row, r, h))) & ok


def _take(tb: Tables, res: Residual, ch: Choice, row: int, r: int, h: int, start: int) -> None:
    ch.set(row, Option(r, h, start, int(tb.dur[row, h]), 0, 0))
    res.apply(tb, ch, row, -1)


def _queue(tb: Tables, res: Residual, ch: Choice, row: int, r: int, h: int, earliest: int) -> None:
    """First start at or after ``earliest`` that fits, up to the end of the horizon (may be late)."""
    ok = _fits(tb, res, row, r, h, earliest, tb.T - int(tb.dur[row, h]))
    hit = np.flatnonzero(ok)
    if len(hit):
        _take(tb, res, ch, row, r, h, earliest + int(hit[0]))


def _finish(tb: Tables, ch: Choice, name: str, t0: float) -> Plan:
    """The baseline's plan; under ``carbon_cost_cap`` a baseline does not aim at the cap, so a plan above it is
    not returned: no job is planned, each says why (``not_solved``), and the status is ``no_solution``."""
    stats = SolveStats(wall_s=time.perf_counter() - t0, num_jobs=len(tb.problem.jobs))
    plan = assemble_plan(tb, ch, solver=name, status=PlanStatus.FEASIBLE, bound=None, penalised=None, stats=stats)
    cap = tb.problem.objective.cost_cap
    if tb.problem.objective.kind is not ObjectiveKind.CARBON_WITH_COST_CAP or cap is None or plan.cost <= cap:
        return plan
    why = f"the {name} baseline's plan costs {plan.cost:.2f}, above cost_cap {cap:.2f}; it cannot meet the cap"
    empty = assemble_plan(
        tb,
        Choice.empty(tb.J),
        solver=name,
        status=PlanStatus.NO_SOLUTION,
        bound=None,
        penalised=None,
        stats=dataclasses.replace(stats, notes=(why,)),
        left_out_reason=UnplannedReason.NOT_SOLVED,
    )
    return dataclasses.replace(
        empty, unplanned=tuple(dataclasses.replace(u, detail=u.detail or why) for u in empty.unplanned)
    )


def solve_run_now(problem: Problem, params: SolveParams | None = None) -> Plan:
    """Run-now baseline (see module docstring); late runs are deadline misses."""
    t0 = time.perf_counter()
    tb = build_tables(problem)
    ch, res = Choice.empty(tb.J), Residual(tb)
    for row in np.lexsort((np.arange(tb.J), tb.rel)):
        r, h = _home(tb, int(row))
        _queue(tb, res, ch, int(row), r, h, int(tb.rel[row]))
    return _finish(tb, ch, "run_now", t0)


def solve_best_window(problem: Problem, params: SolveParams | None = None) -> Plan:
    """Per-job best window in the home region, then greedy capacity repair (see module docstring)."""
    t0 = time.perf_counter()
    tb = build_tables(problem)
    cum = cumulative(tb.slot_h * tb.weights())
    wanted = np.zeros(tb.J, dtype=np.int64)
    homes = [_home(tb, row) for row in range(tb.J)]
    for row, (r, h) in enumerate(homes):
        length = int(tb.dur[row, h])
        starts = np.arange(tb.rel[row], tb.dl[row] - length + 1)
        cost = cum[r, starts + length] - cum[r, starts]
        wanted[row] = starts[int(np.argmin(cost))] if len(starts) else tb.rel[row]
    ch, res = Choice.empty(tb.J), Residual(tb)
    for row in np.lexsort((np.arange(tb.J), wanted)):
        row = int(row)
        r, h = homes[row]
        length = int(tb.dur[row, h])
        first, last = int(tb.rel[row]), int(tb.dl[row]) - length
        ok = _fits(tb, res, row, r, h, first, last)
        if ok.any():
            starts = np.arange(first, last + 1)
            cost = np.where(ok, cum[r, starts + length] - cum[r, starts], np.inf)
            _take(tb, res, ch, row, r, h, int(starts[int(np.argmin(cost))]))
        else:
            _queue(tb, res, ch, row, r, h, first)
    return _finish(tb, ch, "best_window", t0)


def solve_greedy(problem: Problem, params: SolveParams | None = None) -> Plan:
    """Least-slack-first greedy over every region, hardware and start (see module docstring)."""
    t0 = time.perf_counter()
    tb = build_tables(problem)
    ch = place(tb, greedy_order(tb))
    return _finish(tb, ch, "greedy", t0)


def solve_oracle(problem: Problem, params: SolveParams | None = None) -> Plan:
    """The Gridshift planner under the name ``oracle``: pass the problem built from realised curves."""
    return solve_gridshift(problem, params, name="oracle")
