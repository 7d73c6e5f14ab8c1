"""The LP of the aggregated model over a fixed set of columns, built in one piece from numpy arrays.

Column generation (``optimizer.lp``) adds columns round by round through MathOpt's Python model, about
0.25 ms a column: at 10,000 jobs a round adds ~16,000 columns, and with GLOP's re-solves 3 rounds take 40 s
and end far from the optimum (LP 9366 against ~9200). Here the whole restricted master (columns
``x[c, o]`` of job classes, ``left[c]`` at the penalty, one convexity row per class, GPU rows per (region,
hardware, slot) and power rows per (region, slot)) is written as one MathOpt ``ModelProto`` from arrays
and solved once, by HiGHS's interior point method with crossover (10,000 jobs, ~35,000 columns: 8-12 s on
a loaded 2-core machine; GLOP's dual simplex took twice as long). Its columns are the options the
Lagrangian ascent picked in its last iterations: near the best multipliers those are the options of the
LP optimum (zero reduced cost), so the restricted LP lands near the full one (seed 0: 9220 against a
Lagrangian bound of 9150) and its solution is rounded and guides the group moves as the converged LP does at
1,000 jobs. Its value is not a bound (the master is restricted).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

import numpy as np
from ortools.math_opt import (
    callback_pb2,
    model_parameters_pb2,
    model_pb2,
    parameters_pb2,
    result_pb2,
)
from ortools.math_opt.core.python import solver as core_solver
from ortools.math_opt.python import mathopt

from optimizer.blocks import block_sum, column_blocks, row_starts, slot_block, spread
from optimizer.bound import Choice, Multipliers, evaluate
from optimizer.heuristic import option_objective, penalised_objective
from optimizer.rounding import round_lp
from optimizer.tables import Tables

TRAIL_ITERATIONS = 15  # last ascent iterations whose options become columns (near the best multipliers)
BEST_PAIRS = 3  # per job, its best options on this many (region, hardware) pairs at the best multipliers
# master LP time per nonzero of its matrix, in units of one ascent iteration's measured time scaled to the master's
# blocks (the iteration prices every start on the T slots, the master has a row per block: ``iteration_s * blocks /
# T``). Measured at 10,000 jobs (HiGHS's solve alone, load 1.5-3.5 on the 2-core development machine): 2.53e-4 at
# 15-minute slots over hour blocks (434,445 nonzeros, 6.38 s, iteration 0.232 s) and 2.71e-4 at 60 minutes (277,959,
# 5.06 s, iteration 0.067 s); the iteration alone, unscaled, gave 6.3e-5 and 2.7e-4, 4x apart, and the cold
# evaluation used before predicted 42.5-115 s for the per-slot master at 15 minutes (skipped in every run). A master
# that does not finish costs far more than one skipped (the priced placements then run as before), hence the margin
# of 1.5x.
MASTER_ITERATIONS_PER_NONZERO = 4e-4
# a master predicted not to finish is tried on the options of fewer of the ascent's last iterations, down to this
# many (the iterations near the best multipliers repeat most options: 15 gave 32,776 columns at 10,000 jobs)
MIN_TRAIL_ITERATIONS = 3


def column_table(tb: Tables, cls: np.ndarray, choices: list[Choice]) -> np.ndarray:
    """Distinct runnable options of ``choices`` per job class: rows ``(class, r, h, s1, l1, s2, l2)``.

    Overlapping two-chunk relaxations of the bound (second chunk not after the first) are dropped.
    """
    parts = []
    for ch in choices:
        on = (ch.r >= 0) & ((ch.l2 == 0) | (ch.s2 >= ch.s1 + ch.l1 + 1))
        parts.append(
            np.column_stack((cls[on], ch.r[on], ch.h[on], ch.s1[on], ch.l1[on], ch.s2[on], ch.l2[on]))
        )
    if not parts:
        return np.zeros((0, 7), dtype=np.int64)
    table = np.concatenate(parts).astype(np.int64)
    return np.unique(table, axis=0)


def best_pairs(tb: Tables, found: list, k: int) -> list[Choice]:
    """Per job, its ``q``-th cheapest (region, hardware) pair's best option at the multipliers of ``found``.

    ``found`` is the ``collect`` output of ``bound.evaluate``; returns ``k`` Choices (``q = 0 .. k - 1``), a
    job with fewer eligible pairs left out (``r == -1``) of the later ones.
    """
    rows, r, h, s1, l1, s2, l2, val = (np.concatenate(x) for x in zip(*found, strict=True))
    ok = np.flatnonzero(np.isfinite(val))
    ok = ok[np.lexsort((val[ok], rows[ok]))]
    rank = np.arange(len(ok)) - np.searchsorted(rows[ok], rows[ok], side="left")
    out = []
    for q in range(k):
        at = ok[rank == q]
        ch = Choice.empty(tb.J)
        j = rows[at]
        for field, values in zip((ch.r, ch.h, ch.s1, ch.l1, ch.s2, ch.l2), (r, h, s1, l1, s2, l2), strict=True):
            field[j] = values[at]
        out.append(ch)
    return out


def _entries(tb: Tables, table: np.ndarray, rep: np.ndarray, n_cls: int, starts: np.ndarray):
    """Rows, columns and coefficients of the master's matrix, sorted row-major.

    A column's GPU (power) coefficient in the row of block ``B`` is its GPUs (kW) times the number of its slots in
    ``B``; with one block per slot that is the per-slot model.
    """
    n = len(table)
    c, r, h = table[:, 0], table[:, 1], table[:, 2]
    row = rep[c]
    g = tb.g[row].astype(float)
    kw = g * tb.pkw[row, h] * tb.pue[r]
    nb = len(starts)
    # slots of a column per block: one entry per (column, block) with the count as its multiple
    col, b, count = column_blocks(table, slot_block(starts, tb.T))
    gpu0, kw0 = n_cls, n_cls + tb.R * tb.H * nb
    rows = [c, np.arange(n_cls), gpu0 + (r[col] * tb.H + h[col]) * nb + b, kw0 + r[col] * nb + b]
    cols = [np.arange(n), n + np.arange(n_cls), col, col]
    vals = [np.ones(n), np.ones(n_cls), g[col] * count, kw[col] * count]
    row_ids, col_ids, coef = np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)
    order = np.lexsort((col_ids, row_ids))
    return row_ids[order], col_ids[order], coef[order]


def master_nonzeros(tb: Tables, table: np.ndarray, starts: np.ndarray | None = None) -> int:
    """Nonzeros of the master's matrix over the columns ``table``: per column its convexity entry and one GPU and
    one power entry per block its chunks touch (a block two chunks share counted twice: an upper estimate)."""
    if len(table) == 0:
        return 0
    block_of = slot_block(row_starts(tb.blocks, tb.T) if starts is None else starts, tb.T)
    touched = np.zeros(len(table), dtype=np.int64)
    for s, ln in ((table[:, 3], table[:, 4]), (table[:, 5], table[:, 6])):
        on = ln > 0
        touched[on] += block_of[s[on] + ln[on] - 1] - block_of[s[on]] + 1
    return int((1 + 2 * touched).sum())


def solve_master(
    tb: Tables,
    cls: np.ndarray,
    rep: np.ndarray,
    counts: np.ndarray,
    table: np.ndarray,
    *,
    time_limit_s: float,
    solver: str = "highs_ipm",
    starts: np.ndarray | None = None,
) -> tuple[float, np.ndarray, Multipliers] | None:
    """Solve the master LP over the columns ``table`` (rows ``(class, r, h, s1, l1, s2, l2)``).

    Parameters
    ----------
    tb : Tables
        Problem arrays.
    cls, rep, counts : numpy.ndarray
        Class of each job row, a representative row and the size of each class.
    table : numpy.ndarray
        Columns, as from :func:`column_table`.
    time_limit_s : float
        Wall-clock limit of the LP solve [s].
    solver : str
        Key of ``SOLVERS``: HiGHS's interior point with crossover by default.
    starts : numpy.ndarray or None
        Start slot of each block of capacity rows (:func:`optimizer.blocks.row_starts` by default: hour blocks where
        ``tb.blocks`` has them; ``arange(T)`` gives the per-slot rows).

    Returns
    -------
    tuple or None
        ``(LP value [objective units], positive columns as rows (class, r, h, s1, l1, s2, l2, value),
        capacity duals)``; the duals of a block's rows are held over each of its slots. None when the solver
        (``solver``, a key of ``SOLVERS``) did not reach the optimum in time.
    """
    starts = row_starts(tb.blocks, tb.T) if starts is None else starts
    model = master_model(tb, rep, counts, table, starts)
    return _solve(tb, model, table, len(rep), time_limit_s, solver, starts)


def master_model(
    tb: Tables, rep: np.ndarray, counts: np.ndarray, table: np.ndarray, starts: np.ndarray | None = None
) -> model_pb2.ModelProto:
    """The master LP over the columns ``table`` as a MathOpt model (variables: columns, then left-out).

    Its capacity rows are per (region, hardware, block) and (region, block) for the blocks ``starts``: the use of
    a block's slots summed against the block's capacities summed, the relaxation the LP bound and the ascent price
    (``optimizer.blocks``). At 10,000 jobs on 15-minute slots the per-slot master has four times the hourly rows
    and nonzeros and was predicted never to finish in 60 s, so the plan went without its rounding.
    """
    starts = row_starts(tb.blocks, tb.T) if starts is None else starts
    n_cls, n, nb = len(rep), len(table), len(starts)
    obj = option_objective(tb, Choice(*(table[:, k] for k in range(1, 7))), rows=rep[table[:, 0]])
    model = model_pb2.ModelProto(name="master")
    n_var = n + n_cls
    model.variables.ids.extend(range(n_var))
    model.variables.lower_bounds.extend(np.zeros(n_var).tolist())
    model.variables.upper_bounds.extend(np.concatenate((counts[table[:, 0]], counts)).astype(float).tolist())
    model.variables.integers.extend([False] * n_var)
    model.objective.linear_coefficients.ids.extend(range(n_var))
    model.objective.linear_coefficients.values.extend(np.concatenate((obj, tb.penalty[rep])).tolist())
    n_cap = tb.R * tb.H * nb + tb.R * nb
    model.linear_constraints.ids.extend(range(n_cls + n_cap))
    lower = np.concatenate((counts.astype(float), np.full(n_cap, -np.inf)))
    cap_b = block_sum(tb.cap.astype(float), starts)
    kw_cap_b = block_sum(tb.kw_cap.astype(float), starts)
    upper = np.concatenate((counts.astype(float), cap_b.ravel(), kw_cap_b.ravel()))
    model.linear_constraints.lower_bounds.extend(lower.tolist())
    model.linear_constraints.upper_bounds.extend(upper.tolist())
    row_ids, col_ids, coef = _entries(tb, table, rep, n_cls, starts)
    matrix = model.linear_constraint_matrix
    matrix.row_ids.extend(row_ids.tolist())
    matrix.column_ids.extend(col_ids.tolist())
    matrix.coefficients.extend(coef.tolist())
    return model


def run_model(
    model: model_pb2.ModelProto,
    kind: mathopt.SolverType,
    params: parameters_pb2.SolveParametersProto,
    model_params: model_parameters_pb2.ModelSolveParametersProto,
) -> result_pb2.SolveResultProto:
    """Solve a MathOpt model proto in this process (MathOpt's core solve: no Python model to parse back)."""
    return core_solver.solve(
        model,
        kind.value,
        parameters_pb2.SolverInitializerProto(),
        params,
        model_params,
        None,
        callback_pb2.CallbackRegistrationProto(),
        None,
        None,
    )


SOLVERS = {
    "glop": (mathopt.SolverType.GLOP, mathopt.LPAlgorithm.DUAL_SIMPLEX),
    "highs_ipm": (mathopt.SolverType.HIGHS, mathopt.LPAlgorithm.BARRIER),
    "highs": (mathopt.SolverType.HIGHS, mathopt.LPAlgorithm.DUAL_SIMPLEX),
}


def _solve(
    tb: Tables,
    model: model_pb2.ModelProto,
    table: np.ndarray,
    n_cls: int,
    time_limit_s: float,
    solver: str,
    starts: np.ndarray,
):
    n = len(table)
    n_var = n + n_cls
    nb = len(starts)
    n_gpu = tb.R * tb.H * nb
    n_cap = n_gpu + tb.R * nb
    kind, algorithm = SOLVERS[solver]
    params = mathopt.SolveParameters(
        time_limit=timedelta(seconds=max(0.05, time_limit_s)),
        lp_algorithm=algorithm,
    ).to_proto()
    model_params = model_parameters_pb2.ModelSolveParametersProto()
    model_params.reduced_costs_filter.filter_by_ids = True
    out = run_model(model, kind, params, model_params)
    if out.termination.reason != result_pb2.TERMINATION_REASON_OPTIMAL or not out.solutions:
        return None
    sol = out.solutions[0]
    x = np.zeros(n_var)
    ids = np.array(sol.primal_solution.variable_values.ids, dtype=np.int64)
    x[ids] = np.array(sol.primal_solution.variable_values.values, dtype=float)
    y = np.zeros(n_cls + n_cap)
    ids = np.array(sol.dual_solution.dual_values.ids, dtype=np.int64)
    y[ids] = np.array(sol.dual_solution.dual_values.values, dtype=float)
    pos = np.flatnonzero(x[:n] > 1e-7)
    primal = np.column_stack((table[pos].astype(float), x[pos]))
    # a block's dual held over each of its slots: the price of one slot's use in its block's row
    lam = spread(np.maximum(0.0, -y[n_cls : n_cls + n_gpu]).reshape(tb.R, tb.H, nb), starts, tb.T)
    mu = spread(np.maximum(0.0, -y[n_cls + n_gpu :]).reshape(tb.R, nb), starts, tb.T)
    return float(sol.primal_solution.objective_value), primal, Multipliers(lam, mu)


def master_guide(
    tb: Tables,
    cls: np.ndarray,
    rep: np.ndarray,
    counts: np.ndarray,
    trail: list[Choice],
    m: Multipliers,
    seeds: list[Choice],
    *,
    time_limit_s: float,
    iteration_s: float = 0.0,
    notes: list[str] | None = None,
    score: Callable[[Tables, Choice], float] = penalised_objective,
) -> tuple[float, np.ndarray, np.ndarray, Choice] | None:
    """Restricted master LP over the ascent's last options, ``best_pairs`` at ``m`` and ``seeds``; its rounding.

    With the best pairs at the best multipliers ``m`` the restricted LP comes near the full one at 10,000 jobs
    (seed 0: 9195 against 9222 from the trail alone; the full LP is at most 9197). The rounding is
    :func:`optimizer.rounding.round_lp`, checked slot by slot against the residual capacity, redone with the jobs
    it left out placed first when there are any. ``iteration_s`` [s], one ascent iteration on this machine,
    predicts the LP's time: ``iteration_s * blocks / T * nonzeros * MASTER_ITERATIONS_PER_NONZERO``. A master
    predicted past ``time_limit_s`` is tried on the options of fewer of the ascent's last iterations (down to
    ``MIN_TRAIL_ITERATIONS``), then on fewer best pairs per job (``BEST_PAIRS`` down to 1), and is not started
    when even that does not fit (20,000 jobs in 60 s: a master that would not finish would leave the priced
    placements no time). ``notes`` receives what was solved, or why no LP came back. ``score`` ranks the two
    roundings (the caller's, e.g. one that refuses a broken cost cap).

    Returns
    -------
    tuple or None
        ``(LP value, positive columns (class, r, h, s1, l1, s2, l2, value), every column, rounded plan)``, or
        None when the LP was not solved, or predicted not to be, in ``time_limit_s`` [s].
    """
    found: list = []
    evaluate(tb, m, collect=found)
    pairs = best_pairs(tb, found, BEST_PAIRS)
    notes = notes if notes is not None else []
    starts = row_starts(tb.blocks, tb.T)
    kept, n_pairs = min(TRAIL_ITERATIONS, len(trail)), BEST_PAIRS
    while True:
        table = column_table(tb, cls, [*seeds, *pairs[:n_pairs], *trail[len(trail) - kept :]])
        nonzeros = master_nonzeros(tb, table, starts)
        predicted_s = iteration_s * len(starts) / max(1, tb.T) * nonzeros * MASTER_ITERATIONS_PER_NONZERO
        if predicted_s <= time_limit_s:
            break
        if kept > MIN_TRAIL_ITERATIONS:
            kept = max(MIN_TRAIL_ITERATIONS, kept * 2 // 3)
        elif n_pairs > 1:
            n_pairs -= 1
        else:
            break
    what = (
        f"{len(table)} columns from {kept} iterations and {n_pairs} pairs, {nonzeros} nonzeros, "
        f"{len(starts)} blocks, predicted {predicted_s:.3g} s"
    )
    if len(table) == 0 or predicted_s > time_limit_s:
        notes.append(f"master lp skipped: {what} > {time_limit_s:.3g} s")
        return None
    t0 = time.perf_counter()
    got = solve_master(tb, cls, rep, counts, table, time_limit_s=time_limit_s, starts=starts)
    took_s = time.perf_counter() - t0
    if got is None:
        notes.append(f"master lp not solved in {time_limit_s:.3g} s: {what}")
        return None
    notes.append(f"master lp: {what}, solved in {took_s:.3g} s")
    value, primal, duals = got
    plan = round_lp(tb, cls, primal, duals)
    if (plan.r < 0).any():
        again = round_lp(tb, cls, primal, duals, first=np.flatnonzero(plan.r < 0))
        if score(tb, again) < score(tb, plan):
            plan = again
    return value, primal, table, plan
