"""The cheapest two chunks of a run over every split of its work, for many candidates at once (numpy).

A leaf module (numpy only): the tables use it to decide which jobs fit in two chunks, ``optimizer.chunking`` to
price the column generation's two-chunk columns and the bound's floor.
"""

from __future__ import annotations

import numpy as np


def _windows(cum: np.ndarray, cum_bad: np.ndarray, length: int) -> np.ndarray:
    """Sum of ``length`` consecutive slots from every start ``0 .. T - length`` (inf where a slot is unusable)."""
    s = cum[:, length:] - cum[:, :-length]
    return np.where(cum_bad[:, length:] - cum_bad[:, :-length] > 0, np.inf, s)


def best_two_chunks(value: np.ndarray, total: np.ndarray, low: np.ndarray):
    """Cheapest two chunks per candidate over every split.

    Parameters
    ----------
    value : ndarray, shape (n, T)
        Value of each slot (+inf where the candidate cannot run).
    total : ndarray, shape (n,)
        Slots of both chunks together (duration + overhead).
    low : ndarray, shape (n,)
        Shortest chunk (at least 1).

    Returns
    -------
    tuple of ndarray, shape (n,)
        ``(value, first length, first start, second start)``; value is +inf where no two chunks fit.
    """
    n, T = value.shape
    best = np.full(n, np.inf)
    a_best = np.zeros(n, dtype=np.int64)
    s1_best = np.zeros(n, dtype=np.int64)
    s2_best = np.zeros(n, dtype=np.int64)
    if n == 0:
        return best, a_best, s1_best, s2_best
    bad = ~np.isfinite(value)
    cum = np.zeros((n, T + 1))
    np.cumsum(np.where(bad, 0.0, value), axis=1, out=cum[:, 1:])
    cum_bad = np.zeros((n, T + 1), dtype=np.int64)
    np.cumsum(bad, axis=1, out=cum_bad[:, 1:])
    low = np.maximum(1, low)
    for D in np.unique(total).tolist():
        for m in np.unique(low[total == D]).tolist():
            sel = np.flatnonzero((total == D) & (low == m))
            c, cb = cum[sel], cum_bad[sel]
            for a in range(m, D - m + 1):
                b = D - a
                if a + b > T:
                    continue
                first = _windows(c, cb, a)  # starts 0 .. T - a
                second = _windows(c, cb, b)  # starts 0 .. T - b
                # the second chunk at s2 >= a follows any first chunk starting at s1 <= s2 - a
                run = np.minimum.accumulate(first[:, : T - a - b + 1], axis=1)
                pair = run + second[:, a:]
                k = np.argmin(pair, axis=1)
                v = pair[np.arange(len(sel)), k]
                better = v < best[sel]
                if not better.any():
                    continue
                idx = sel[better]
                kb = k[better]
                best[idx] = v[better]
                a_best[idx] = a
                s2_best[idx] = kb + a
                # the first start reaching the running minimum at kb
                head = first[better]
                cols = np.arange(head.shape[1])
                masked = np.where(cols[None, :] <= kb[:, None], head, np.inf)
                s1_best[idx] = np.argmin(masked, axis=1)
    return best, a_best, s1_best, s2_best
