"""Ejection moves: a job takes a cheaper option by evicting the jobs in its way, which are then re-placed.

``improve_fast`` only moves a job to a cheaper option that still fits; when the capacity is full, the cheap
slots are held by jobs that could run elsewhere at little extra cost. An ejection move evicts those jobs
(same hardware first, smallest first) until the cheaper option fits, places the job there, re-places every
evicted job at its best feasible option, and keeps the move only when the total objective drops.
"""

from __future__ import annotations

import time

import numpy as np

from optimizer.bound import Choice, Option
from optimizer.candidates import Candidates, fits_option
from optimizer.heuristic import Residual, Scanner, option_objective, single_objective
from optimizer.tables import Tables


def _overlapping(ch: Choice, row: int, r: int, spans: list[tuple[int, int]]) -> np.ndarray:
    """Rows planned in region ``r`` whose runs overlap one of ``spans`` (``[start, end)`` slots)."""
    hit = np.zeros(len(ch.r), dtype=bool)
    for a, b in spans:
        for s, ln in ((ch.s1, ch.l1), (ch.s2, ch.l2)):
            hit |= (ln > 0) & (s < b) & (s + ln > a)
    hit &= ch.r == r
    hit[row] = False
    return np.flatnonzero(hit)


def eject_improve(
    tb: Tables,
    ch: Choice,
    cand: Candidates,
    *,
    time_limit_s: float,
    tries: int = 3,
    max_evict: int = 6,
    left_out_only: bool = False,
) -> Choice:
    """Ejection local search over the candidate starts (ordered by ``cand.val``; moves judged at true objective).

    Parameters
    ----------
    tb : Tables
        Problem arrays.
    ch : Choice
        A plan that fits every capacity.
    cand : Candidates
        Each job's best start per (region, hardware), ordered by true objective.
    time_limit_s : float
        Wall-clock limit [s].
    tries : int
        Cheaper candidates tried per job and pass.
    max_evict : int
        Most jobs evicted by one move.
    left_out_only : bool
        Only place jobs left out, trying every candidate (use candidates at capacity prices, which point
        to uncongested slots).

    Returns
    -------
    Choice
        A plan that fits every capacity, with an objective no higher than ``ch``'s.
    """
    t0 = time.perf_counter()
    ch = ch.copy()
    if not len(cand.val):  # no candidate at all (jobs that fit only in other splits: see optimizer.rechunk)
        return ch
    res = Residual(tb)
    for busy in np.flatnonzero(ch.r >= 0):
        res.apply(tb, ch, int(busy), -1)
    scan = Scanner(tb)
    cost = option_objective(tb, ch)
    cost = np.where(ch.r >= 0, cost, tb.penalty)
    size = tb.g * tb.dur.max(axis=1)
    flex = tb.elig.reshape(tb.J, -1).sum(axis=1)  # eligible (region, hardware) pairs per job
    improved = True
    while improved and time.perf_counter() - t0 < time_limit_s:
        improved = False
        first = cand.val[np.minimum(cand.offsets[:-1], len(cand.val) - 1)]
        has = cand.offsets[1:] > cand.offsets[:-1]
        gain = np.where(has, cost - first, 0.0)
        if left_out_only:
            gain = np.where(ch.r < 0, gain, 0.0)
        for row_ in np.argsort(-gain):
            if gain[row_] <= 1e-9 * max(1.0, abs(cost[row_])) or time.perf_counter() - t0 > time_limit_s:
                break
            row = int(row_)
            lo, hi = int(cand.offsets[row]), int(cand.offsets[row + 1])
            for k in range(lo, hi if left_out_only else min(hi, lo + tries)):
                opt = cand.option(k)
                opt_cost = single_objective(tb, row, opt)
                if opt_cost >= cost[row] - 1e-9 * max(1.0, abs(cost[row])):
                    if left_out_only:
                        continue
                    break
                if _try_move(tb, ch, res, scan, cand, cost, size, flex, row, opt, opt_cost, max_evict):
                    improved = True
                    break
    return ch


def _try_move(tb, ch, res, scan, cand, cost, size, flex, row, opt, opt_cost, max_evict) -> bool:
    """Move ``row`` to ``opt`` with ejections; keep it only when the objective drops. Returns whether kept."""
    r, h, s1, l1, s2, l2 = opt
    spans = [(s1, s1 + l1)] + ([(s2, s2 + l2)] if l2 else [])
    old_row = ch.get(row)
    res.apply(tb, ch, row, +1)
    blockers = _overlapping(ch, row, r, spans)
    # same hardware first; among those, jobs that may run on other (region, hardware) pairs, then the ones
    # covering most of the wanted slots (fewest evictions), then small ones
    span = np.zeros(tb.T + 1, dtype=np.int64)
    for a, b in spans:
        span[a:b] = 1
    cum = np.concatenate(([0], np.cumsum(span)))

    def covered(j: int) -> int:
        s1j, l1j, s2j, l2j = int(ch.s1[j]), int(ch.l1[j]), int(ch.s2[j]), int(ch.l2[j])
        return int(cum[s1j + l1j] - cum[s1j] + (cum[s2j + l2j] - cum[s2j] if l2j else 0))

    order = sorted(
        blockers.tolist(), key=lambda j: (int(ch.h[j]) != h, int(flex[j]) <= 1, -covered(j), int(size[j]))
    )
    evicted: list[tuple[int, Option]] = []
    fits = fits_option(tb, res, row, opt)
    for j in order:
        if fits or len(evicted) >= max_evict:
            break
        evicted.append((j, ch.get(j)))
        res.apply(tb, ch, j, +1)
        ch.r[j] = -1
        fits = fits_option(tb, res, row, opt)
    before = cost[row] + sum(cost[j] for j, _ in evicted)
    after = opt_cost
    placed: list[int] = []
    if fits:
        ch.set(row, opt)
        res.apply(tb, ch, row, -1)
        for j, _ in sorted(evicted, key=lambda e: -int(size[e[0]])):
            found = scan.best(j, res, cand.pairs(j))
            if found is None or after + found[1] >= before:
                after = np.inf
                break
            ch.set(j, found[2])
            res.apply(tb, ch, j, -1)
            placed.append(j)
            after += found[1]
    if fits and after < before - 1e-9 * max(1.0, abs(before)):
        cost[row] = opt_cost
        for j in placed:
            cost[j] = single_objective(tb, j, ch.get(j))
        return True
    # undo: take back what was placed, restore the evicted jobs and the row
    for j in placed:
        res.apply(tb, ch, j, +1)
    if fits:
        res.apply(tb, ch, row, +1)
    for j, old in evicted:
        ch.set(j, old)
        res.apply(tb, ch, j, -1)
    ch.set(row, old_row)
    res.apply(tb, ch, row, -1)
    return False



