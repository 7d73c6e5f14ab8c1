"""A MIP over the LP's columns around the best plan (relaxation induced neighbourhood search), by HiGHS.

Local moves stall where the LP's cheap capacity is held by a mosaic of jobs (1,000 jobs, seed 1: the fast
moves and group moves end at 664 against an LP bound of 646; priced at the LP's duals, the whole loss is in the
one congested region, FI, and in jobs pushed out of it). Here the job classes that the best plan and the LP
solution put on the same columns in the same numbers are fixed (RINS: Danna, Rothberg and Le Pape, "Exploring
relaxation induced neighborhoods to improve MIP solutions", Math. Programming 102, 2005), and the rest is solved
as an integer program over all the columns column generation priced in plus the plan's own options,
warm-started from the plan. HiGHS's root cuts and its own sub-MIP heuristics then find plans that single and
group moves do not (seed 1, from 663.7: 652.3 after 6 s). It needs that time: with ~5 s (a 10 s solve at 1,000
jobs) it found nothing better in 3 of 3 seeds, so the planner starts it only with enough time left. The MIP's
dual bound holds for these columns only, so it is not reported as a bound of the problem.
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np
from ortools.math_opt import model_parameters_pb2, result_pb2
from ortools.math_opt.python import mathopt
from ortools.math_opt.solvers import highs_pb2

from optimizer.bound import Choice, Option, usage
from optimizer.heuristic import Residual
from optimizer.master import master_model, run_model
from optimizer.rounding import runnable_columns
from optimizer.tables import Tables

# HiGHS's share of MIP effort on its primal heuristics (default 0.05): at 1,000 jobs (seed 1, 12 s) 0.3 found
# nothing better than the plan given, 0.6 found 650.1 after 10.9 s (mip_lp_age_limit 3 instead of 10 made the time
# to the first better plan swing between 3.7 s and more than 8 s, so HiGHS's other defaults stay)
HEURISTIC_EFFORT = 0.6
# kW taken off every power row (but never below the incumbent's draw): the MIP counts facility power in floating kW,
# the heuristics and the checks in integer mW rounded up, so a run the MIP packs to the last mW could be refused
POWER_MARGIN_KW = 1e-4


def plan_columns(cls: np.ndarray, ch: Choice) -> tuple[np.ndarray, np.ndarray]:
    """Distinct options of ``ch`` per job class, rows ``(class, r, h, s1, l1, s2, l2)``, and their counts."""
    on = ch.r >= 0
    keys = np.column_stack((cls[on], ch.r[on], ch.h[on], ch.s1[on], ch.l1[on], ch.s2[on], ch.l2[on]))
    if not len(keys):
        return np.zeros((0, 7), dtype=np.int64), np.zeros(0, dtype=np.int64)
    table, n = np.unique(keys.astype(np.int64), axis=0, return_counts=True)
    return table, n


def _lookup(table: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Index in ``table`` (unique rows, sorted) of each row of ``keys``; -1 where absent."""
    if not len(keys):
        return np.zeros(0, dtype=np.int64)
    view = np.ascontiguousarray(table).view([("", table.dtype)] * table.shape[1]).ravel()
    kview = np.ascontiguousarray(keys.astype(table.dtype)).view([("", table.dtype)] * table.shape[1]).ravel()
    at = np.searchsorted(view, kview)
    at = np.minimum(at, len(view) - 1)
    return np.where(view[at] == kview, at, -1)


def rins(
    tb: Tables,
    cls: np.ndarray,
    rep: np.ndarray,
    counts: np.ndarray,
    columns: np.ndarray,
    primal: np.ndarray,
    incumbent: Choice,
    *,
    time_limit_s: float,
    seed: int = 0,
    free: np.ndarray | None = None,
) -> Choice | None:
    """The best plan HiGHS finds in ``time_limit_s`` over ``columns`` with the classes the LP agrees on fixed.

    Parameters
    ----------
    tb : Tables
        Problem arrays.
    cls, rep, counts : numpy.ndarray
        Class of each job row, a representative row and the size of each class.
    columns : numpy.ndarray
        Every column of the LP, rows ``(class, r, h, s1, l1, s2, l2)`` (``column_generation``'s
        ``columns_table``).
    primal : numpy.ndarray
        The LP solution: rows ``(class, r, h, s1, l1, s2, l2, value)`` of its positive columns.
    incumbent : Choice
        The plan to improve; it warm-starts the MIP and its options are columns.
    time_limit_s : float
        Wall-clock limit of the MIP [s].
    seed : int
        HiGHS's random seed.
    free : numpy.ndarray or None
        Per class, whether the MIP may change it; by default the classes the plan and the LP solution place
        differently (the rest keep the plan's options).

    Returns
    -------
    Choice or None
        A plan that fits every capacity (the incumbent itself where nothing better was found), or None when
        HiGHS returned no solution in time.
    """
    if len(primal):  # the bound's overlapping two-chunk relaxations cannot be planned: not columns here
        primal = primal[runnable_columns(primal[:, :7].astype(np.int64))]
    lp_keys = primal[:, :7].astype(np.int64) if len(primal) else np.zeros((0, 7), dtype=np.int64)
    inc_keys, inc_n = plan_columns(cls, incumbent)
    cols = columns[runnable_columns(columns)] if len(columns) else np.zeros((0, 7), dtype=np.int64)
    table = np.unique(np.concatenate((cols, lp_keys, inc_keys)).astype(np.int64), axis=0)
    if not len(table):
        return None
    lp_x = np.zeros(len(table))
    if len(lp_keys):
        lp_x[_lookup(table, lp_keys)] = primal[:, 7]
    inc_x = np.zeros(len(table))
    inc_x[_lookup(table, inc_keys)] = inc_n
    n_cls = len(rep)
    inc_left = counts - np.bincount(table[:, 0], weights=inc_x, minlength=n_cls)
    lp_left = counts - np.bincount(table[:, 0], weights=lp_x, minlength=n_cls)
    differs = np.abs(lp_x - inc_x) > 1e-6
    if free is None:
        free = np.zeros(n_cls, dtype=bool)
        free[table[differs, 0]] = True
        free |= np.abs(lp_left - inc_left) > 1e-6
    # a row per slot, whatever the LP's capacity blocks (``Tables.blocks``): the MIP's plans must fit every slot, and
    # its power rows below are per slot
    model = master_model(tb, rep, counts, table, np.arange(tb.T, dtype=np.int64))
    n = len(table)
    n_var = n + n_cls
    del model.variables.integers[:]
    model.variables.integers.extend([True] * n_var)
    fixed = np.concatenate((~free[table[:, 0]], ~free))
    value = np.concatenate((inc_x, inc_left))
    lower = np.where(fixed, value, 0.0)
    upper = np.where(fixed, value, np.concatenate((counts[table[:, 0]], counts)).astype(float))
    del model.variables.lower_bounds[:]
    del model.variables.upper_bounds[:]
    model.variables.lower_bounds.extend(lower.tolist())
    model.variables.upper_bounds.extend(upper.tolist())
    rows_upper = np.array(model.linear_constraints.upper_bounds)
    # never below what the plan itself draws: a plan packed to the last mW (the LP dive's often are) would otherwise
    # be an infeasible start, and HiGHS would go on without it (1,000 jobs in 30 s: a plan of 1605 against 649)
    _, drawn = usage(tb, incumbent)
    rows_upper[n_cls + tb.R * tb.H * tb.T :] = np.maximum(
        tb.kw_cap_mw().ravel() / 1e6 - POWER_MARGIN_KW, drawn.ravel() + 1e-9
    )
    del model.linear_constraints.upper_bounds[:]
    model.linear_constraints.upper_bounds.extend(rows_upper.tolist())
    highs = highs_pb2.HighsOptionsProto()
    highs.double_options["mip_heuristic_effort"] = HEURISTIC_EFFORT
    params = mathopt.SolveParameters(
        time_limit=timedelta(seconds=max(0.05, time_limit_s)), random_seed=seed, highs=highs
    ).to_proto()
    model_params = model_parameters_pb2.ModelSolveParametersProto()
    hint = model_params.solution_hints.add()
    hint.variable_values.ids.extend(range(n_var))
    hint.variable_values.values.extend(value.tolist())
    out = run_model(model, mathopt.SolverType.HIGHS, params, model_params)
    feasible = (result_pb2.TERMINATION_REASON_OPTIMAL, result_pb2.TERMINATION_REASON_FEASIBLE)
    if out.termination.reason not in feasible or not out.solutions:
        return None
    x = np.zeros(n_var)
    sol = out.solutions[0].primal_solution.variable_values
    x[np.array(sol.ids, dtype=np.int64)] = np.array(sol.values, dtype=float)
    return _to_choice(tb, cls, table, np.rint(x[:n]).astype(np.int64))


def _to_choice(tb: Tables, cls: np.ndarray, table: np.ndarray, n: np.ndarray) -> Choice | None:
    """Rows of each class on the columns with positive counts ``n``; None if that breaks a capacity."""
    ch = Choice.empty(tb.J)
    order = np.argsort(cls, kind="stable")
    starts = np.searchsorted(cls[order], np.arange(int(cls.max(initial=-1)) + 2))
    used = np.zeros(len(starts), dtype=np.int64)
    res = Residual(tb)
    for k in np.flatnonzero(n > 0):
        c = int(table[k, 0])
        for _ in range(int(n[k])):
            if starts[c] + used[c] >= starts[c + 1]:
                return None  # more jobs on the class's columns than it has
            row = int(order[starts[c] + used[c]])
            used[c] += 1
            r, h, s1, l1, s2, l2 = (int(v) for v in table[k, 1:])
            ch.set(row, Option(r, h, s1, l1, s2, l2))
            res.apply(tb, ch, row, -1)
    if (res.gpu < 0).any() or (res.kw < 0).any():
        return None
    return ch
