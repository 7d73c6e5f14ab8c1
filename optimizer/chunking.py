"""Pricing of two-chunk runs over every split of the work: the column generation's chunked columns and the bound's
floor for jobs of at most two chunks.

An interruptible job of ``max_chunks >= 2`` may run in two chunks of any lengths ``a + b = duration + overhead``,
each at least ``min_chunk_slots`` long, the second starting when or after the first ends (``check_plan``'s rules).
The model's own two-chunk options fix the split (the rounded-up half first, ``windows._splits``), so pricing only
them leaves the LP's bound above plans that split differently. Here every split of every (job, region, hardware)
candidate is priced at once with numpy: for a split ``(a, b)`` the cheapest pair is the minimum over the second
chunk's start of its value plus the running minimum of the first chunk's values up to ``a`` slots before it.

Used by :func:`optimizer.lp.column_generation` (a column per job class whose best two-chunk run prices in) and by
:func:`optimizer.bound.valid_bound` (the exact floor of a job of at most two chunks; more chunks go to the DP of
:func:`optimizer.bound.best_chunking`).
"""

from __future__ import annotations

import numpy as np

from optimizer.bound import Multipliers, best_chunking, evaluate
from optimizer.splits import best_two_chunks
from optimizer.tables import Tables


def _candidates(tb: Tables, rows: np.ndarray, h: int, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, region) pairs of ``rows`` on hardware ``h`` marked in ``pairs`` whose window holds two chunks."""
    sub = rows[(tb.dur[rows, h] > 0) & pairs[rows, :, h].any(axis=1)]
    if not len(sub):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    need = tb.dur[sub, h] + tb.ovh[sub]
    sub = sub[tb.dl[sub] - tb.rel[sub] >= need]
    jr, rr = np.nonzero(pairs[sub, :, h])
    return sub[jr], rr


def slot_values(tb: Tables, rows: np.ndarray, rr: np.ndarray, h: int, lam: np.ndarray, mu: np.ndarray, nu: float):
    """Priced value of each job ``rows[k]`` running one slot in region ``rr[k]`` on hardware ``h``, ``(n, T)``
    [objective units]; +inf outside its window and where it cannot run alone (missing curves, GPUs or power)."""
    g = tb.g[rows]
    kw = g * tb.pkw[rows, h] * tb.pue[rr]
    a = tb.slot_h * tb.weights(nu) + mu  # (R, T) per kW
    value = kw[:, None] * a[rr] + g[:, None] * lam[rr, h]
    t = np.arange(tb.T)
    inside = (t >= tb.rel[rows][:, None]) & (t < tb.dl[rows][:, None])
    usable = inside & tb.valid[rr] & (tb.cap[rr, h] >= g[:, None]) & (tb.kw_cap[rr] >= kw[:, None] - 1e-9)
    return np.where(usable, value, np.inf)


def chunk_options(
    tb: Tables, rows: np.ndarray, lam: np.ndarray, mu: np.ndarray, nu: float, above=None, *, eligible: bool = False
):
    """Each job row's cheapest two-chunk run over every split at prices ``(lam, mu, nu)``.

    ``rows`` are interruptible rows (``max_chunks >= 2``). ``above`` (per row of ``tb``), when given, skips the
    candidates whose cheapest ``duration + overhead`` slots already reach it (a floor found by a sort). The
    (region, hardware) pairs are those the job is allowed on, or with ``eligible`` those where it was found to fit
    alone (``Tables.elig``: the planner's columns).

    Returns
    -------
    tuple
        ``(rows, r, h, s1, l1, s2, l2, value)`` arrays, one entry per row of ``rows`` (value +inf and ``r == -1``
        where no two chunks fit below ``above``), in the layout of ``bound.evaluate``'s collection.
    """
    rows = np.asarray(rows, dtype=np.int64)
    n = len(rows)
    out_v = np.full(n, np.inf)
    out = np.zeros((6, n), dtype=np.int64)
    out[0] = -1
    pos = -np.ones(tb.J, dtype=np.int64)
    pos[rows] = np.arange(n)
    for h in range(tb.H):
        jr, rr = _candidates(tb, rows, h, tb.elig if eligible else tb.allowed)
        if not len(jr):
            continue
        value = slot_values(tb, jr, rr, h, lam, mu, nu)
        total = tb.dur[jr, h] + tb.ovh[jr]
        if above is not None:
            ordered = np.sort(value, axis=1)
            csum = np.zeros((len(jr), tb.T + 1))
            np.cumsum(np.where(np.isfinite(ordered), ordered, 0.0), axis=1, out=csum[:, 1:])
            enough = np.isfinite(ordered[np.arange(len(jr)), np.minimum(total, tb.T) - 1]) & (total <= tb.T)
            floor = np.where(enough, csum[np.arange(len(jr)), np.minimum(total, tb.T)], np.inf)
            lim = above[jr]
            keep = floor < lim - 1e-9 * np.maximum(1.0, np.abs(lim))
            jr, rr, value, total = jr[keep], rr[keep], value[keep], total[keep]
        v, a, s1, s2 = best_two_chunks(value, total, tb.min_chunk[jr])
        # per row, the best candidate of this hardware against the best so far
        order = np.lexsort((v, jr))
        jr_o, first = np.unique(jr[order], return_index=True)
        k = order[first]
        p = pos[jr_o]
        better = v[k] < out_v[p]
        k, p = k[better], p[better]
        out_v[p] = v[k]
        out[:, p] = np.stack((rr[k], np.full(len(k), h), s1[k], a[k], s2[k], total[k] - a[k]))
    return rows, out[0], out[1], out[2], out[3], out[4], out[5], out_v


def chunked_floor(
    tb: Tables, m: Multipliers, above: np.ndarray | None = None, *, exact: bool = True
) -> np.ndarray:
    """Per job row, its least priced value over every chunking the Problem allows [objective units].

    The planner's options hold interruptible jobs to one run or two chunks of fixed lengths; ``check_plan`` accepts
    up to ``max_chunks`` chunks of any length of at least ``min_chunk_slots``, each resume adding
    ``checkpoint_overhead_slots``. Jobs of at most two chunks get their best two-chunk run over every split
    (:func:`chunk_options`, exact); jobs of more chunks get each allowed (region, hardware) pair's best chunking by
    :func:`optimizer.bound.best_chunking` over the slots the job can use alone (valid curves, GPUs and power
    enough). Rows that are not interruptible get +inf (their options are exact).

    ``above`` (per row), when given, skips the pairs where no chunking can go below it: the ``duration`` cheapest
    usable slots plus every negative one beyond them bound any chunking from below and are found by a sort; those
    pairs get +inf. With ``exact=False`` that sum is the answer for jobs of more than two chunks (a lower bound
    found without the DP).
    """
    out = np.full(tb.J, np.inf)
    two = np.flatnonzero(tb.intr & (tb.max_chunks <= 2))
    if len(two):
        got = chunk_options(tb, two, m.lam, m.mu, m.nu, above=above)
        out[two] = got[-1]
    a = tb.slot_h * tb.weights(m.nu) + m.mu  # (R, T) per kW
    for row in np.flatnonzero(tb.intr & (tb.max_chunks > 2)):
        rel, dl, g = int(tb.rel[row]), int(tb.dl[row]), int(tb.g[row])
        for h in np.flatnonzero(tb.allowed[row].any(axis=0)):
            dur = int(tb.dur[row, h])
            rr = np.flatnonzero(tb.allowed[row, :, h])
            if dur <= 0 or dl - rel < dur or not len(rr):
                continue
            kw = g * tb.pkw[row, h] * tb.pue[rr][:, None]
            window = slice(rel, dl)
            value = kw * a[rr, window] + g * m.lam[rr, h, window]
            usable = tb.valid[rr, window] & (tb.cap[rr, h, window] >= g) & (tb.kw_cap[rr, window] >= kw - 1e-9)
            value = np.where(usable, value, np.inf)
            if above is not None or not exact:
                ordered = np.sort(value, axis=1)
                rest = ordered[:, dur:]
                low = ordered[:, :dur].sum(axis=1) + np.where(rest < 0, rest, 0.0).sum(axis=1)
                if not exact:
                    out[row] = min(out[row], float(low.min()))
                    continue
                limit = above[row] if above is not None else np.inf
                keep = low < limit - 1e-9 * max(1.0, abs(float(limit)))
                if not keep.any():
                    continue
                value = value[keep]
            got = best_chunking(value, dur, int(tb.ovh[row]), int(tb.min_chunk[row]), int(tb.max_chunks[row]))
            out[row] = min(out[row], float(got.min()))
    return out


def valid_bound(tb: Tables, m: Multipliers, *, exact: bool = True) -> float:
    """Lagrangian bound at ``m`` that holds for the Problem as ``check_plan`` checks it: as
    :func:`optimizer.bound.evaluate`, with each interruptible job at the lower of its best option and
    :func:`chunked_floor` (every chunking it may run in; with ``exact=False`` the quicker, weaker floor for jobs of
    more than two chunks)."""
    value, _, best = evaluate(tb, m)
    if not tb.intr.any():
        return value
    floor = chunked_floor(tb, m, above=best, exact=exact)
    return value - float((best - np.minimum(best, floor)).sum())
