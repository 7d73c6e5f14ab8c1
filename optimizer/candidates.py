"""Faster placement and repair built on per-(region, hardware) candidate starts.

``Candidates`` holds each job's best start per (region, hardware) pair at given capacity prices (from the
Lagrangian evaluation). ``place_fast`` makes the same choices as :func:`optimizer.heuristic.place` with far
fewer scans; ``improve_fast`` is a local-search move over the candidates (the repair of jobs left out is
:mod:`optimizer.repair`).
"""

from __future__ import annotations

import time

import numpy as np

from optimizer.bound import Choice, Multipliers, Option
from optimizer.heuristic import Residual, Scanner, option_objective
from optimizer.scan import best_option
from optimizer.tables import Tables, power_mw


class Candidates:
    """Each job's best start per (region, hardware) pair, ordered by priced value (fast first tries)."""

    def __init__(self, tb: Tables, found: list) -> None:
        rows, r, h, s1, l1, s2, l2, val = (np.concatenate(x) for x in zip(*found, strict=True))
        real = np.isfinite(val) & ((l2 == 0) | (s2 >= s1 + l1))  # runnable: chunks in order, not overlapping
        order = np.lexsort((val[real], rows[real]))
        self.r, self.h = r[real][order], h[real][order]
        self.s1, self.l1, self.s2, self.l2 = (
            s1[real][order],
            l1[real][order],
            s2[real][order],
            l2[real][order],
        )
        self.val = val[real][order]
        self.offsets = np.searchsorted(rows[real][order], np.arange(tb.J + 1))
        # per (job, region, hardware): lowest priced value of any option there (two-chunk relaxations included)
        key = (rows * tb.R + r) * tb.H + h
        fin = np.isfinite(val)
        key, v = key[fin], val[fin]
        o = np.lexsort((v, key))
        key, v = key[o], v[o]
        first = np.ones(len(key), dtype=bool)  # no finite option at all: none (a job that fits only in other splits)
        first[1:] = key[1:] != key[:-1]
        key, v = key[first], v[first]
        prow, rest = np.divmod(key, tb.R * tb.H)
        pr, ph = np.divmod(rest, tb.H)
        o = np.lexsort((v, prow))
        self.pairs_row_off = np.searchsorted(prow[o], np.arange(tb.J + 1))
        self.pr, self.ph, self.plb = pr[o], ph[o], v[o]

    def option(self, k: int) -> Option:
        """Candidate ``k``."""
        return Option(
            int(self.r[k]),
            int(self.h[k]),
            int(self.s1[k]),
            int(self.l1[k]),
            int(self.s2[k]),
            int(self.l2[k]),
        )

    def pairs(self, row: int) -> list[tuple[int, int, float]]:
        """``(region, hardware, lower bound)`` of ``row``'s eligible pairs, best bound first."""
        lo, hi = self.pairs_row_off[row], self.pairs_row_off[row + 1]
        return list(
            zip(
                self.pr[lo:hi].tolist(),
                self.ph[lo:hi].tolist(),
                (self.plb[lo:hi] - 1e-9).tolist(),
                strict=True,
            )
        )


def fits_option(tb: Tables, res: Residual, row: int, opt: Option) -> bool:
    """Whether job ``row`` fits at ``opt`` in the residual capacity ``res`` (GPUs and power in every slot it runs)."""
    r, h, s1, l1, s2, l2 = opt
    g = tb.g[row]
    p = power_mw(tb.power_kw(row, r, h))
    if res.gpu[r, h, s1 : s1 + l1].min() < g or res.kw[r, s1 : s1 + l1].min() < p:
        return False
    return l2 == 0 or (res.gpu[r, h, s2 : s2 + l2].min() >= g and res.kw[r, s2 : s2 + l2].min() >= p)


def place_fast(
    tb: Tables,
    order: np.ndarray,
    cand: Candidates,
    *,
    m: Multipliers | None = None,
    nu: float = 0.0,
    slack: float = 0.0,
    stop_at: float | None = None,
    reached: list[int] | None = None,
) -> Choice:
    """Same choices as :func:`place` (with ``slack=0``), found faster.

    A job first tries its unconstrained best option (optimal when it still fits); otherwise the scan visits
    its (region, hardware) pairs in order of their unconstrained best and stops at the first pair that
    cannot beat the best feasible option found. ``slack`` > 0 also accepts candidates up to that fraction
    above the best (faster, no longer exact). With ``stop_at`` (a ``time.perf_counter()`` value) the placement stops
    there; ``reached``, when given, receives how many jobs of ``order`` were tried.
    """
    ch = Choice.empty(tb.J)
    res = Residual(tb)
    scan = Scanner(tb, m, nu)
    done = 0
    for row_ in order:
        if stop_at is not None and done % 32 == 0 and time.perf_counter() > stop_at:
            break
        done += 1
        row = int(row_)
        taken = False
        lo, hi = cand.offsets[row], cand.offsets[row + 1]
        # exact only below every pair's lower bound (two-chunk relaxations can undercut real candidates)
        plo = cand.pairs_row_off[row]
        floor = cand.plb[plo] if cand.pairs_row_off[row + 1] > plo else -np.inf
        limit = min(cand.val[lo], floor + 1e-9 * max(1.0, abs(floor))) if hi > lo else 0.0
        limit += slack * abs(limit)
        for k in range(lo, hi):
            if cand.val[k] > limit:
                break
            opt = cand.option(k)
            if fits_option(tb, res, row, opt):
                ch.set(row, opt)
                taken = True
                break
        if not taken:
            found = _best_over_pairs(scan, row, res, cand)
            if found is None:
                continue
            ch.set(row, found[2])
        res.apply(tb, ch, row, -1)
    if reached is not None:
        reached.append(done)
    return ch


#: Pairs a job's first scan covers (those of the lowest bounds); the rest are scanned only where their bound can
#: still beat the best found (rarely: the per-pair scan visited 4.4 of 21 pairs on average at 100,000 bench jobs)
FIRST_PAIRS = 6


def _best_over_pairs(scan: Scanner, row: int, res: Residual, cand: Candidates):
    """``best_option`` over ``row``'s pairs in ``cand`` (bound order): the :data:`FIRST_PAIRS` first, then the others
    whose bound is below the best found. The same option as one scan of every pair (a later pair wins only when
    strictly better, as in that scan)."""
    lo, hi = cand.pairs_row_off[row], cand.pairs_row_off[row + 1]
    cut = min(hi, lo + FIRST_PAIRS)
    found = best_option(scan, row, res, cand.pr[lo:cut], cand.ph[lo:cut])
    if cut == hi:
        return found
    more = cand.plb[cut:hi] - 1e-9 < (np.inf if found is None else found[0])
    if not more.any():
        return found
    later = best_option(scan, row, res, cand.pr[cut:hi][more], cand.ph[cut:hi][more])
    if later is not None and (found is None or later[0] < found[0]):
        return later
    return found


def improve_fast(tb: Tables, ch: Choice, cand: Candidates, *, time_limit_s: float) -> Choice:
    """Local search over the candidate starts: move a job to a cheaper candidate that still fits.

    ``cand`` must be ordered by true objective (built at zero prices). Passes repeat until one changes
    nothing or ``time_limit_s`` [s] is spent; the objective never gets worse.
    """
    t0 = time.perf_counter()
    ch = ch.copy()
    res = Residual(tb)
    for busy in np.flatnonzero(ch.r >= 0):
        res.apply(tb, ch, int(busy), -1)
    current = option_objective(tb, ch)
    while time.perf_counter() - t0 < time_limit_s:
        moved = 0
        order = np.concatenate((np.flatnonzero(ch.r < 0), np.argsort(-np.nan_to_num(current, nan=-1.0))))
        for i, row_ in enumerate(order):
            if i % 256 == 0 and time.perf_counter() - t0 > time_limit_s:
                break
            row = int(row_)
            was = current[row] if ch.r[row] >= 0 else tb.penalty[row]
            lo, hi = cand.offsets[row], cand.offsets[row + 1]
            if hi == lo or cand.val[lo] >= was - 1e-9 * max(1.0, abs(was)):
                continue  # no candidate is cheaper than where it is
            res.apply(tb, ch, row, +1)
            for k in range(lo, hi):
                if cand.val[k] >= was - 1e-9 * max(1.0, abs(was)):
                    break
                opt = cand.option(k)
                if fits_option(tb, res, row, opt):
                    ch.set(row, opt)
                    current[row] = cand.val[k]
                    moved += 1
                    break
            res.apply(tb, ch, row, -1)
        if moved == 0:
            break
    return ch


def fill_left_out(tb: Tables, ch: Choice, rows: np.ndarray, *, stop_at: float | None = None) -> Choice:
    """``ch`` with each of ``rows`` that is left out placed at its best option that still fits, if any (rows in
    order; a job placed earlier is not moved). A plan never leaves out a job that fits beside the others.

    ``stop_at`` (a ``time.perf_counter()`` value) ends the pass early; ``ch`` itself is not changed.
    """
    out = ch.copy()
    todo = [int(row) for row in rows if out.r[row] < 0]
    if not todo:
        return out
    res = residual_of(tb, out)
    scan = Scanner(tb)
    for row in todo:
        if stop_at is not None and time.perf_counter() > stop_at:
            break
        r, h = np.nonzero(tb.elig[row])
        found = best_option(scan, row, res, r, h)
        if found is not None:
            out.set(row, found[2])
            res.apply(tb, out, row, -1)
    return out


def residual_of(tb: Tables, ch: Choice) -> Residual:
    """GPUs and power left beside the runs of ``ch`` (one pass with difference arrays, not a loop over jobs)."""
    res = Residual(tb)
    on = np.flatnonzero(ch.r >= 0)
    r, h, g = ch.r[on], ch.h[on], tb.g[on]
    p = power_mw(tb.g[on] * tb.pkw[on, h] * tb.pue[r])
    gpu = np.zeros((tb.R, tb.H, tb.T + 1), dtype=np.int64)
    kw = np.zeros((tb.R, tb.T + 1), dtype=np.int64)
    for s, ln in ((ch.s1[on], ch.l1[on]), (ch.s2[on], ch.l2[on])):
        run = ln > 0
        for at, sign in ((s[run], 1), (s[run] + ln[run], -1)):
            np.add.at(gpu, (r[run], h[run], at), sign * g[run])
            np.add.at(kw, (r[run], at), sign * p[run])
    res.gpu -= np.cumsum(gpu, axis=-1)[..., : tb.T]
    res.kw -= np.cumsum(kw, axis=-1)[..., : tb.T]
    return res
