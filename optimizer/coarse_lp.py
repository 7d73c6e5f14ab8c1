"""Coarse to fine on the LP path: the hourly LP's columns and duals as the first columns of the fine LP.

At 1,000 jobs on 15-minute slots the column generation (``optimizer.lp``) takes its whole share of the time without
converging (8-11 rounds in ~6 s on the 16-core machine), so the LP dive never starts and the plan is the LP's rounding
(docs/time-grid.md). The hourly restriction of the same jobs (``optimizer.coarse.coarse_problem``) has a quarter of
the starts to price per round; its column generation is run first for a share of the LP's time, and the fine LP
starts from

* its columns read on the quarter-hours (a run at hour ``c`` starts at the hour's first fine slot with the job's fine
  run time, as in ``optimizer.coarse.lift``: inside the window, on valid slots), and
* the fine options that are cheapest at its duals spread over the quarter-hours (``optimizer.coarse.lift_prices``).

Columns only decide how fast the fine LP gets to its optimum; its bound is still the fine Lagrangian value at its own
duals (valid at any prices), and the value of the fine problem at the spread hourly duals is offered as a bound too,
valid for the same reason. Nothing of the hourly LP's value is claimed as a bound.
"""

from __future__ import annotations

import time

import numpy as np

from optimizer.bound import Choice, Multipliers, Option, evaluate
from optimizer.coarse import Coarse, coarse_problem, inside, lift_prices
from optimizer.cpsat import build_classes
from optimizer.lp import column_generation
from optimizer.tables import Tables, build_tables


def lift_option(tb: Tables, coarse: Coarse, row: int, r: int, h: int, hourly: tuple[int, int, int, int]) -> Option | None:
    """The hourly run ``(s1, l1, s2, l2)`` [hours] of fine job ``row`` on ``(r, h)`` as a fine option, or None.

    One run starts at its hour's first fine slot with the fine run time; two chunks keep the fine lengths, the first
    as long as its hours allow (as in ``optimizer.coarse.lift``). None when the fine run does not lie inside the job's
    window on valid slots or breaks its minimum chunk.
    """
    k, first = coarse.per_hour, coarse.first
    s1, l1, s2, l2 = hourly
    dur, ovh, min_chunk = int(tb.dur[row, h]), int(tb.ovh[row]), int(tb.min_chunk[row])
    if dur <= 0 or not tb.elig[row, r, h]:
        return None
    opt: Option | None = None
    if l2 == 0 or k * l1 >= dur:
        opt = Option(r, h, first + k * s1, dur, 0, 0)
    elif tb.intr[row]:
        f1 = min(k * l1, dur + ovh - min_chunk)
        if f1 >= min_chunk:
            opt = Option(r, h, first + k * s1, f1, first + k * s2, dur + ovh - f1)
    return opt if opt is not None and inside(tb, row, opt) else None


def coarse_columns(
    tb: Tables, cls: np.ndarray, rep: np.ndarray, *, time_limit_s: float, per_class: int = 4
) -> tuple[Choice, np.ndarray, float, Multipliers, dict] | None:
    """Columns for the fine LP of ``tb`` from the hourly LP of the same jobs, run for ``time_limit_s`` [s].

    Returns
    -------
    tuple or None
        ``(options, job_rows, value, prices, notes)``: fine options and the fine row of each (the hourly LP's columns
        read on the quarter-hours, then up to ``per_class`` cheapest options per fine class at the spread hourly
        duals), the fine Lagrangian value at those spread duals [objective units] (a valid bound) and the duals,
        and a few figures for the notes. None where the grid has no hourly restriction.
    """
    t0 = time.perf_counter()
    coarse = coarse_problem(tb.problem)
    if coarse is None:
        return None
    ctb = build_tables(coarse.problem)
    if ctb.J == 0:
        return None
    ccls, crep, ccounts = build_classes(ctb)
    left = time_limit_s - (time.perf_counter() - t0)
    if left <= 0:
        return None
    _, cm, cinfo = column_generation(ctb, ccls, crep, ccounts, [], time_limit_s=left)
    fine_row = {tb.problem.jobs[int(i)].job_id: row for row, i in enumerate(tb.rows)}
    rows: list[int] = []
    opts: list[Option] = []
    # the hourly LP's columns, each read for the fine job of its class's representative
    for c, r, h, s1, l1, s2, l2 in cinfo["columns_table"].tolist():
        row = fine_row.get(coarse.problem.jobs[int(ctb.rows[crep[c]])].job_id)
        if row is None:
            continue
        opt = lift_option(tb, coarse, row, r, h, (s1, l1, s2, l2))
        if opt is not None:
            rows.append(row)
            opts.append(opt)
    # the fine options that are cheapest at the hourly duals spread over the quarter-hours
    m = lift_prices(tb, coarse, cm)
    found: list = []
    value = float(evaluate(tb, m, collect=found)[0])
    frow, fr, fh, fs1, fl1, fs2, fl2, val = (np.concatenate(x) for x in zip(*found, strict=True))
    is_rep = np.zeros(tb.J, dtype=bool)
    is_rep[rep] = True
    idx = np.flatnonzero(is_rep[frow] & np.isfinite(val))
    c = cls[frow[idx]]
    idx = idx[np.lexsort((val[idx], c))]
    rank = np.arange(len(idx)) - np.searchsorted(cls[frow[idx]], cls[frow[idx]], side="left")
    idx = idx[rank < per_class]
    n_lifted = len(rows)
    rows.extend(frow[idx].tolist())
    opts.extend(Option(*o) for o in zip(*(a[idx].tolist() for a in (fr, fh, fs1, fl1, fs2, fl2)), strict=True))
    ch = Choice.empty(len(opts))
    for k, opt in enumerate(opts):
        ch.set(k, opt)
    notes = {
        "hourly_rounds": cinfo["rounds"],
        "hourly_converged": bool(cinfo["converged"]),
        "hourly_lp_value": cinfo["lp_value"],
        "lifted_columns": n_lifted,
        "priced_columns": len(idx),
    }
    return ch, np.array(rows, dtype=np.int64), value, m, notes
