"""Reduced-cost fixing over every option: the options that can still be in a plan better than a known one.

At capacity prices ``m`` the Lagrangian value ``L(m) = sum_j best_j(m) - lam . cap - mu . kw_cap`` bounds every
plan, and a plan whose jobs run options ``o_j`` costs at least ``L(m) + sum_j (v_j(o_j) - best_j(m))`` (``v_j``:
the priced value, ``best_j``: the job's least one; leaving a job out is the option at its penalty). Each term is
non-negative, so in a plan of objective below ``upper`` no job runs an option whose *reduced cost*
``v_j(o) - best_j(m)`` exceeds ``upper - L(m)``. Listing every option within that gap (one run anywhere it fits,
and for interruptible jobs of at most two chunks every split of their work and every pair of starts) gives an
integer program whose optimum is the optimum of the Problem whenever that is below ``upper`` ("price and branch");
its dual bound, capped at ``upper``, is a valid bound of the Problem.

Jobs of more than two chunks are not enumerated: :func:`enumerate_options` reports the listing as inexact when one
of them could run within the gap in more than two chunks.
"""

from __future__ import annotations

import numpy as np

from optimizer.bound import Multipliers, cumulative, evaluate, segment_values
from optimizer.chunking import chunk_options, chunked_floor, slot_values
from optimizer.tables import Tables

BATCH_CELLS = 2_000_000  # (candidate, first start, second start) cells priced at once (16 MB of floats)


def least_values(tb: Tables, m: Multipliers) -> tuple[float, np.ndarray]:
    """Lagrangian value at ``m`` over every option of at most two chunks (any split) and each job's least priced
    value (its penalty when nothing is cheaper)."""
    value, _, best = evaluate(tb, m)
    two = np.flatnonzero(tb.intr & (tb.max_chunks >= 2))
    if len(two):
        got = chunk_options(tb, two, m.lam, m.mu, m.nu, above=best)
        floor = np.minimum(best[two], got[-1])
        value -= float((best[two] - floor).sum())
        best = best.copy()
        best[two] = floor
    return value, best


def _contiguous(tb: Tables, cls: np.ndarray, is_rep: np.ndarray, m: Multipliers, best: np.ndarray, gap: float):
    """One-run options of the class representatives within ``gap`` of their best: rows ``(class, r, h, s1, l1,
    0, 0)``."""
    w = tb.weights(m.nu)
    cum_a, cum_l = cumulative(tb.slot_h * w + m.mu), cumulative(m.lam)
    parts = []
    for seg in tb.contig:
        si, start, _, value = segment_values(tb, seg, cum_a, cum_l)
        rows = seg.job[si]
        keep = is_rep[rows] & np.isfinite(value) & (value - best[rows] <= gap)
        n = int(keep.sum())
        if not n:
            continue
        z = np.zeros(n, dtype=np.int64)
        parts.append(
            np.column_stack((cls[rows[keep]], z + seg.r, z + seg.h, start[keep], seg.length[si][keep], z, z))
        )
    return parts


def _two_chunk(
    tb: Tables, cls: np.ndarray, rows: np.ndarray, m: Multipliers, best: np.ndarray, gap: float, most: int
) -> list[np.ndarray] | None:
    """Two-chunk options of interruptible representatives ``rows`` within ``gap`` of their best, every split and
    every pair of starts (the second chunk starting when or after the first ends): rows ``(class, r, h, s1, l1,
    s2, l2)``; None once there are more than ``most``."""
    parts: list[np.ndarray] = []
    count = 0
    T = tb.T
    for h in range(tb.H):
        sub = rows[(tb.dur[rows, h] > 0) & tb.allowed[rows, :, h].any(axis=1)]
        if not len(sub):
            continue
        jr, rr = np.nonzero(tb.allowed[sub, :, h])
        jr = sub[jr]
        total = tb.dur[jr, h] + tb.ovh[jr]
        fits = (tb.dl[jr] - tb.rel[jr] >= total) & (total <= T)
        jr, rr, total = jr[fits], rr[fits], total[fits]
        if not len(jr):
            continue
        value = slot_values(tb, jr, rr, h, m.lam, m.mu, m.nu)
        limit = best[jr] + gap
        # a floor by sort: the ``total`` cheapest usable slots
        ordered = np.sort(value, axis=1)
        floor = np.take_along_axis(np.cumsum(np.where(np.isfinite(ordered), ordered, np.inf), axis=1),
                                   (total - 1)[:, None], axis=1)[:, 0]
        keep = floor <= limit
        jr, rr, total, value, limit = jr[keep], rr[keep], total[keep], value[keep], limit[keep]
        if not len(jr):
            continue
        bad = ~np.isfinite(value)
        cum = np.zeros((len(jr), T + 1))
        np.cumsum(np.where(bad, 0.0, value), axis=1, out=cum[:, 1:])
        cum_bad = np.zeros((len(jr), T + 1), dtype=np.int64)
        np.cumsum(bad, axis=1, out=cum_bad[:, 1:])
        low = np.maximum(1, tb.min_chunk[jr])
        for a in range(1, int(total.max())):
            for_a = np.flatnonzero((a >= low) & (total - a >= low))
            for b in np.unique(total[for_a] - a).tolist():
                every = for_a[total[for_a] - a == b]
                batch = max(1, BATCH_CELLS // ((T - a + 1) * (T - b + 1)))
                for lo in range(0, len(every), batch):
                    sel = every[lo : lo + batch]
                    first = cum[sel, a:] - cum[sel, :-a]  # starts 0 .. T - a
                    first = np.where(cum_bad[sel, a:] - cum_bad[sel, :-a] > 0, np.inf, first)
                    second = cum[sel, b:] - cum[sel, :-b]
                    second = np.where(cum_bad[sel, b:] - cum_bad[sel, :-b] > 0, np.inf, second)
                    pair = first[:, :, None] + second[:, None, :]  # (n, s1, s2)
                    s1 = np.arange(first.shape[1])[:, None]
                    s2 = np.arange(second.shape[1])[None, :]
                    pair = np.where(s2 >= s1 + a, pair, np.inf)
                    k, i1, i2 = np.nonzero(pair <= limit[sel][:, None, None])
                    if not len(k):
                        continue
                    row = jr[sel[k]]
                    z = np.zeros(len(k), dtype=np.int64)
                    parts.append(np.column_stack((cls[row], rr[sel[k]], z + h, i1, z + a, i2, z + b)))
                    count += len(k)
                    if count > most:
                        return None
    return parts


def enumerate_options(
    tb: Tables, cls: np.ndarray, rep: np.ndarray, m: Multipliers, upper: float, max_options: int | None = None
) -> tuple[np.ndarray, float, bool] | None:
    """Every option of every job class whose reduced cost at ``m`` is within ``upper - L(m)``.

    Parameters
    ----------
    tb : Tables
        Problem arrays.
    cls, rep : numpy.ndarray
        Class of each job row and a representative row per class.
    m : Multipliers
        Capacity prices.
    upper : float
        Penalised objective of a known plan [objective units].
    max_options : int or None
        Give up (return None) once there are more options than this.

    Returns
    -------
    tuple
        ``(table, lower, exact)``: distinct options, rows ``(class, r, h, s1, l1, s2, l2)``; the Lagrangian value
        ``L(m)`` over every option of at most two chunks; and whether the listing holds every option a plan below
        ``upper`` may use (False when a job of more than two chunks might chunk within the gap); None when there are
        more than ``max_options``.
    """
    most = np.iinfo(np.int64).max if max_options is None else int(max_options)
    lower, best = least_values(tb, m)
    gap = max(0.0, upper - lower) * (1 + 1e-9) + 1e-9
    is_rep = np.zeros(tb.J, dtype=bool)
    is_rep[rep] = True
    parts = _contiguous(tb, cls, is_rep, m, best, gap)
    count = sum(len(p) for p in parts)
    if count > most:
        return None
    two = rep[tb.intr[rep] & (tb.max_chunks[rep] >= 2)]
    if len(two):
        chunked = _two_chunk(tb, cls, two, m, best, gap, most - count)
        if chunked is None:
            return None
        parts += chunked
    exact = True
    more = rep[tb.intr[rep] & (tb.max_chunks[rep] > 2)]
    if len(more):
        floor = chunked_floor(tb, m, exact=False)
        exact = not bool((floor[more] <= best[more] + gap).any())
    table = np.unique(np.concatenate(parts), axis=0) if parts else np.zeros((0, 7), dtype=np.int64)
    return table.astype(np.int64), lower, exact
