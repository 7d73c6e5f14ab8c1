"""One job's best feasible option over all its (region, hardware) pairs in one numpy pass.

:meth:`optimizer.heuristic.Scanner.best` scans a job's pairs one at a time (about ten numpy calls each); at
100,000 jobs the first plan made 400,000 such scans and spent most of its time in numpy's per-call overhead on
arrays of a few hundred values. :func:`best_option` stacks the pairs as the rows of one array (starts padded to
the longest window) and finds the same option, ties broken the same way (pairs in the order given, a single run
before two chunks of the same pair, the earliest start first).
"""

from __future__ import annotations

import numpy as np

from optimizer.bound import Option
from optimizer.heuristic import Residual, Scanner
from optimizer.tables import power_mw


def _windows(scan: Scanner, row: int, r: np.ndarray, h: np.ndarray, power: np.ndarray, st: np.ndarray, ln):
    """Objective, score and invalid-curve flag of runs of ``ln`` slots (per pair, ``(P, 1)``) starting at ``st``
    ``(P, S)`` or ``(S,)``; columns past a pair's last start hold any value (masked by the caller)."""
    tb = scan.tb
    end = np.minimum(st + ln, tb.T)
    st = np.minimum(st, tb.T)
    rc = r[:, None]
    obj = power * (scan.cum_obj[rc, end] - scan.cum_obj[rc, st])
    score = obj
    if scan.cum_mu is not None and scan.cum_lam is not None:
        score = obj + power * (scan.cum_mu[rc, end] - scan.cum_mu[rc, st])
        hc = h[:, None]
        score = score + tb.g[row] * (scan.cum_lam[rc, hc, end] - scan.cum_lam[rc, hc, st])
    bad = (scan.cum_bad[rc, end] - scan.cum_bad[rc, st]) > 0
    return obj, score, bad


def best_option(
    scan: Scanner, row: int, res: Residual, r: np.ndarray, h: np.ndarray
) -> tuple[float, float, Option] | None:
    """``(score, objective, option)`` of job ``row``'s best feasible option on the pairs ``(r[k], h[k])``, or None.

    The same answer as ``scan.best(row, res, pairs)`` for those pairs in that order (a run fits when every slot
    it covers has the GPUs and the power left in ``res`` and valid curves).
    """
    tb = scan.tb
    if len(r) == 0:
        return None
    r = np.asarray(r, dtype=np.int64)
    h = np.asarray(h, dtype=np.int64)
    rel, dl = int(tb.rel[row]), int(tb.dl[row])
    g = tb.g[row]
    span = dl - rel
    ln = tb.dur[row, h]  # (P,)
    n_st = span - ln + 1  # starts per pair
    power = (g * tb.pkw[row, h] * tb.pue[r])[:, None]
    # slots short of GPUs or power over the job's window, counted with a prefix sum per pair
    short = (res.gpu[r[:, None], h[:, None], np.arange(rel, dl)] < g) | (res.kw[r, rel:dl] < power_mw(power))
    count = np.zeros((len(r), span + 1), dtype=np.int64)
    np.cumsum(short, axis=1, out=count[:, 1:])
    rows = np.arange(len(r))[:, None]

    def fits(first: np.ndarray, length: np.ndarray) -> np.ndarray:
        # no short slot in [first, first + length) (offsets from the release slot)
        return count[rows, np.minimum(first + length, span)] == count[rows, np.minimum(first, span)]

    cols = np.arange(int(n_st.max()))[None, :]
    ln_c = ln[:, None]
    obj, score, bad = _windows(scan, row, r, h, power, rel + cols, ln_c)
    ok = (cols < n_st[:, None]) & fits(cols, ln_c) & ~bad
    masked = np.where(ok, score, np.inf)
    k = int(np.argmin(masked))
    p1, j1 = divmod(k, masked.shape[1])
    single = None
    if np.isfinite(masked[p1, j1]):
        single = (
            float(masked[p1, j1]),
            float(obj[p1, j1]),
            Option(int(r[p1]), int(h[p1]), rel + j1, int(ln[p1]), 0, 0),
        )
    two = _two_chunks(scan, row, r, h, power, fits, rel, span) if tb.intr[row] else None
    if two is None:
        return single
    if single is None or two[1][0] < single[0] or (two[1][0] == single[0] and two[0] < p1):
        return two[1]
    return single


def _two_chunks(scan: Scanner, row: int, r, h, power, fits, rel: int, span: int):
    """``(pair, (score, objective, option))`` of the best two-chunk run (the rounded-up half first), or None."""
    tb = scan.tb
    ln = tb.dur[row, h]
    a = -(-ln // 2)
    b = ln - a + tb.ovh[row]
    n_st = span - a - b  # chunk a at rel + i, chunk b at rel + a + 1 + i, i < n_st
    use = (ln - a > 0) & (np.minimum(a, b) >= tb.min_chunk[row]) & (n_st >= 1)
    if not use.any():
        return None
    cols = np.arange(int(n_st[use].max()))[None, :]
    a_c, b_c = a[:, None], b[:, None]
    obj_a, sc_a, bad_a = _windows(scan, row, r, h, power, rel + cols, a_c)
    obj_b, sc_b, bad_b = _windows(scan, row, r, h, power, rel + a_c + 1 + cols, b_c)
    inside = use[:, None] & (cols < n_st[:, None])
    ma = np.where(inside & fits(cols, a_c) & ~bad_a, sc_a, np.inf)
    mb = np.where(inside & fits(a_c + 1 + cols, b_c) & ~bad_b, sc_b, np.inf)
    # chunk b's i-th start follows chunk a's i-th, so chunk a at index <= i pairs with chunk b at index i
    total = np.minimum.accumulate(ma, axis=1) + mb
    k = int(np.argmin(total))
    p, jb = divmod(k, total.shape[1])
    if not np.isfinite(total[p, jb]):
        return None
    ja = int(np.argmin(ma[p, : jb + 1]))
    objective = float(obj_a[p, ja] + obj_b[p, jb])
    opt = Option(int(r[p]), int(h[p]), rel + ja, int(a[p]), rel + int(a[p]) + 1 + jb, int(b[p]))
    return p, (float(total[p, jb]), objective, opt)
