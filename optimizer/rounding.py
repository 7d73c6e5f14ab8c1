"""Round the LP solution of the aggregated model (``optimizer.lp``) to a plan, then repair it greedily.

The LP gives each job class a (fractional) number of jobs per option. Jobs are placed biggest first
(GPU-slots, as in bin packing); each takes the option of its class with the most LP mass left that still fits
the residual capacity (one job uses up one unit of mass), and a job whose LP options are all full or used up
takes its best feasible option priced with the LP duals (the greedy scan). When the
LP is nearly integral, as with many identical jobs per class, the plan lands close to the LP bound.
"""

from __future__ import annotations

import numpy as np

from optimizer.bound import Choice, Multipliers, Option
from optimizer.candidates import Candidates, fits_option
from optimizer.heuristic import Residual, Scanner, option_objective, size_order
from optimizer.tables import Tables


def runnable_columns(table: np.ndarray) -> np.ndarray:
    """Mask of LP columns that are runnable: one run, or a second chunk starting when or after the first ends
    (``check_plan`` accepts a resume right after a chunk; at negative prices it can pay)."""
    s1, l1, s2, l2 = table[:, 3], table[:, 4], table[:, 5], table[:, 6]
    return (l2 == 0) | (s2 >= s1 + l1)


def round_lp(
    tb: Tables, cls: np.ndarray, primal: np.ndarray, m: Multipliers, first: np.ndarray | None = None
) -> Choice:
    """A plan from the LP solution ``primal`` (rows ``(class, r, h, s1, l1, s2, l2, value)``).

    Parameters
    ----------
    tb : Tables
        Problem arrays.
    cls : numpy.ndarray
        Class of each job row.
    primal : numpy.ndarray
        Positive columns of the restricted LP solution, as returned in ``column_generation``'s info.
    m : Multipliers
        LP duals (capacity prices) for the repair scan.
    first : numpy.ndarray or None
        Job rows placed before all others (e.g. those a first rounding left out), in this order.

    Returns
    -------
    Choice
        A plan that fits every capacity; jobs that fit nowhere are left out (``r == -1``).
    """
    ch = Choice.empty(tb.J)
    res = Residual(tb)
    table = primal[:, :7].astype(np.int64) if len(primal) else np.zeros((0, 7), dtype=np.int64)
    mass = primal[:, 7].copy() if len(primal) else np.zeros(0)
    keep = runnable_columns(table)
    table, mass = table[keep], mass[keep]
    order = np.lexsort((-mass, table[:, 0]))
    table, mass = table[order], mass[order]
    order = size_order(tb)
    if first is not None and len(first):
        order = np.concatenate((first, order[~np.isin(order, first)]))
    at = np.searchsorted(table[:, 0], np.arange(int(cls.max(initial=-1)) + 2))
    scan = Scanner(tb, m)
    for row_ in order:
        row = int(row_)
        c = int(cls[row])
        taken = False
        for k in range(at[c], at[c + 1]):
            if mass[k] <= 1e-6:
                continue
            r, h, s1, l1, s2, l2 = (int(x) for x in table[k, 1:])
            opt = Option(r, h, s1, l1, s2, l2)
            if fits_option(tb, res, row, opt):
                ch.set(row, opt)
                mass[k] -= 1.0
                taken = True
                break
        if not taken:
            found = scan.best(row, res)
            if found is None:
                continue
            ch.set(row, found[2])
        res.apply(tb, ch, row, -1)
    return ch


def lp_candidates(tb: Tables, cls: np.ndarray, columns: np.ndarray, found0: list) -> Candidates:
    """Candidates of every job: its best start per (region, hardware) plus every LP column of its class.

    ``columns`` holds rows ``(class, r, h, s1, l1, s2, l2)`` (column generation's ``columns_table``);
    ``found0`` is the zero-price collection of ``bound.evaluate``. Values are true objectives, so
    ``improve_fast`` and ``eject_improve`` can move jobs to the second-best starts the LP found useful.
    """
    table = columns[runnable_columns(columns)] if len(columns) else np.zeros((0, 7), dtype=np.int64)
    order = np.argsort(cls, kind="stable")
    starts = np.searchsorted(cls[order], np.arange(int(cls.max(initial=-1)) + 2))
    per_col = starts[table[:, 0] + 1] - starts[table[:, 0]]
    col = np.repeat(np.arange(len(table)), per_col)
    offset = np.arange(len(col)) - np.repeat(np.cumsum(per_col) - per_col, per_col)
    rows = order[starts[table[col, 0]] + offset]
    ch = Choice(*(table[col, k] for k in range(1, 7)))
    val = option_objective(tb, ch, rows=rows)
    extra = (rows, ch.r, ch.h, ch.s1, ch.l1, ch.s2, ch.l2, val)
    return Candidates(tb, [*found0, extra])
