"""The Lagrangian evaluation with jobs of one shape evaluated once (the first plan's candidates at 100,000 jobs).

Within a (region, hardware) segment a start's priced value depends on its job only through the job's GPUs, power,
run length and start window; at 100,000 bench jobs a segment holds about 2.6 jobs per such shape.
:func:`evaluate_shared` evaluates each shape once with :mod:`optimizer.bound`'s own functions and copies the answer
to its jobs: the same bound, choice, values and collected options as :func:`optimizer.bound.evaluate`.
"""

from __future__ import annotations

import numpy as np

from optimizer.bound import Choice, Multipliers, cumulative, segment_argmin, segment_values, two_chunk_argmin
from optimizer.problem import ObjectiveKind
from optimizer.tables import Tables
from optimizer.windows import Segments


def _shape_of(tb: Tables, seg: Segments, *more: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per job of ``seg``, the index of its shape and, per shape, its first job (index into ``seg.job``)."""
    rows = seg.job
    power = tb.g[rows] * tb.pkw[rows, seg.h] * tb.pue[seg.r]
    key = np.zeros(len(rows), dtype=np.int64)
    for col in (power, tb.g[rows], seg.length, seg.rel, seg.nst, *more):
        # mixed-radix key of dense codes, made dense again after each column (1-d sorts only)
        kinds, code = np.unique(col, return_inverse=True)
        key = np.unique(key * len(kinds) + code.reshape(-1), return_inverse=True)[1].reshape(-1)
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    return inv.reshape(-1), first


def _unique(seg: Segments, first: np.ndarray) -> Segments:
    """The sub-segment of jobs ``first`` (one per shape), with their starts' feasibility."""
    offsets = np.concatenate(([0], np.cumsum(seg.nst)))
    nst = seg.nst[first]
    at = np.repeat(offsets[first] - np.concatenate(([0], np.cumsum(nst)[:-1])), nst) + np.arange(
        int(nst.sum())
    )
    return Segments(seg.r, seg.h, seg.job[first], seg.length[first], seg.rel[first], nst, seg.ok[at])


def evaluate_shared(tb: Tables, m: Multipliers, collect: list | None = None, work: list | None = None):
    """:func:`optimizer.bound.evaluate`, each job shape of a segment evaluated once (same results).

    ``work``, when given, receives the starts evaluated and the starts of every job (their ratio turns this
    evaluation's time into an estimate of a plain one, which the later phases time themselves by).
    """
    done = every = 0
    w = tb.weights(m.nu)
    cum_a = cumulative(tb.slot_h * w + m.mu)
    cum_l = cumulative(m.lam)
    best = tb.penalty.astype(float).copy()
    ch = Choice.empty(tb.J)
    for seg in tb.contig:
        inv, first = _shape_of(tb, seg)
        shared = _unique(seg, first)
        done, every = done + len(shared.ok), every + len(seg.ok)
        si, start, offsets, value = segment_values(tb, shared, cum_a, cum_l)
        u_min, u_arg = segment_argmin(si, start, offsets, value)
        seg_min, arg = u_min[inv], u_arg[inv]
        if collect is not None:
            z = np.zeros(len(arg), dtype=np.int64)
            collect.append((seg.job, seg.r + z, seg.h + z, arg, seg.length, z, z, seg_min))
        better = seg_min < best[seg.job]
        rows = seg.job[better]
        best[rows] = seg_min[better]
        ch.r[rows], ch.h[rows], ch.s1[rows], ch.l1[rows], ch.l2[rows] = (
            seg.r,
            seg.h,
            arg[better],
            seg.length[better],
            0,
        )
    for seg_a, seg_b in tb.halves:
        inv, first = _shape_of(tb, seg_a, seg_b.length, seg_b.rel)
        shared_a, shared_b = _unique(seg_a, first), _unique(seg_b, first)
        done, every = done + 2 * len(shared_a.ok), every + 2 * len(seg_a.ok)
        u_total, u_s1, u_s2 = two_chunk_argmin(tb, shared_a, shared_b, cum_a, cum_l)
        total, s1, s2 = u_total[inv], u_s1[inv], u_s2[inv]
        if collect is not None:
            z = np.zeros(len(total), dtype=np.int64)
            collect.append((seg_a.job, seg_a.r + z, seg_a.h + z, s1, seg_a.length, s2, seg_b.length, total))
        better = total < best[seg_a.job]
        rows = seg_a.job[better]
        best[rows] = total[better]
        ch.r[rows], ch.h[rows] = seg_a.r, seg_a.h
        ch.s1[rows], ch.l1[rows] = s1[better], seg_a.length[better]
        ch.s2[rows], ch.l2[rows] = s2[better], seg_b.length[better]
    if work is not None:
        work.extend((done, every))
    value = float(best.sum() - (m.lam * tb.cap).sum() - (m.mu * tb.kw_cap).sum())
    if tb.problem.objective.kind is ObjectiveKind.CARBON_WITH_COST_CAP:
        value -= m.nu * float(tb.problem.objective.cost_cap or 0.0)
    return value, ch, best
