"""Repair for the jobs a plan leaves out: find the run whose way is cheapest to clear, clear it, re-place the rest.

A dive or a search that ends a few jobs short is often the closest plan to the LP: the jobs left out are the big,
tight ones whose room the others took piece by piece. Trying only a job's cheapest starts (where the whole fleet
wants to run) rarely clears: the jobs in the way find no other place. Instead, every start of the job on every
eligible region and hardware type is scored by its *deficit*, the GPU-slots (and power, in GPU-slots of the job)
missing over its run; the starts missing least are tried first. A try evicts, among the jobs that overlap a slot
short of GPUs (same hardware) or power (same region), the smallest first (among equals the one with the most
other runs) until the job fits, places it, and re-places the evicted jobs at their best feasible options, biggest
first; an evicted job that finds no place gets the same treatment one level down (a cascade) without touching the
jobs already settled in this try. A try is kept only when the penalised objective drops (fewer jobs left out, or
the same jobs at lower cost).

Pure arithmetic over the residual capacity; no solver.
"""

from __future__ import annotations

import time

import numpy as np

from optimizer.bound import Choice, Option, cumulative
from optimizer.candidates import fits_option, residual_of
from optimizer.heuristic import Residual, Scanner, penalised_objective
from optimizer.tables import Tables, power_mw

#: Starts tried per job left out, least deficit first.
POSITIONS = 16
#: Starts tried per (region, hardware) pair at most, so that one congested pool does not take every try.
PER_PAIR = 6
#: Jobs one try may evict at most.
MAX_EVICT = 40
#: Levels of the cascade: an evicted job that finds no free place may itself evict jobs (not those of this try)
#: (1,000 jobs over one day at 15-minute slots, seed 3: a dive 2 small jobs short in a full region, 730.6 EUR with
#: their penalties, is repaired to a whole plan of 714.5 with two levels and not at all with one).
DEPTH = 2


def _window_sums(x: np.ndarray, length: int) -> np.ndarray:
    """Sums of ``x`` over every window of ``length`` along its last axis."""
    c = cumulative(x)
    return c[..., length:] - c[..., :-length]


def positions(tb: Tables, res: Residual, row: int, limit: int = POSITIONS) -> list[Option]:
    """``row``'s contiguous runs on every eligible (region, hardware) pair whose curves are valid, the run missing
    the fewest GPU-slots (power counted in GPU-slots of the job) first, the cheaper first among equals; at most
    ``PER_PAIR`` a pair and ``limit`` in all."""
    rel, dl, g = int(tb.rel[row]), int(tb.dl[row]), int(tb.g[row])
    w = tb.weights()
    scored: list[tuple[float, float, Option]] = []
    for r, h in zip(*np.nonzero(tb.elig[row]), strict=True):
        r, h = int(r), int(h)
        length = int(tb.dur[row, h])
        if length <= 0 or dl - rel < length:
            continue
        p = int(power_mw(tb.power_kw(row, r, h)))
        span = slice(rel, dl)
        short_gpu = np.maximum(0, g - res.gpu[r, h, span]).astype(float)
        short_kw = np.maximum(0, p - res.kw[r, span]) / max(p, 1) * g
        bad = (~tb.valid[r, span]).astype(float)
        deficit = _window_sums(short_gpu + short_kw, length)
        invalid = _window_sums(bad, length) > 0
        cost = _window_sums(np.nan_to_num(w[r, span]), length) * tb.power_kw(row, r, h) * tb.slot_h
        order = np.lexsort((cost, deficit))
        kept = order[~invalid[order]][:PER_PAIR]
        scored += [(float(deficit[i]), float(cost[i]), Option(r, h, rel + int(i), length, 0, 0)) for i in kept]
    scored.sort(key=lambda t: (t[0], t[1]))
    return [opt for _, _, opt in scored[:limit]]


def _in_the_way(tb: Tables, ch: Choice, res: Residual, row: int, opt: Option, keep: np.ndarray) -> np.ndarray:
    """Rows (not in ``keep``) whose runs overlap a slot of ``opt`` short of GPUs (same hardware) or power (same
    region): same hardware first, then the fewest GPU-slots, then the most runs of their own."""
    r, h, s1, l1, _, _ = opt
    g = int(tb.g[row])
    p = int(power_mw(tb.power_kw(row, r, h)))
    short = np.zeros(tb.T, dtype=bool)
    short_gpu = np.zeros(tb.T, dtype=bool)
    short_gpu[s1 : s1 + l1] = res.gpu[r, h, s1 : s1 + l1] < g
    short[s1 : s1 + l1] = res.kw[r, s1 : s1 + l1] < p
    short |= short_gpu
    cum_any, cum_gpu = np.concatenate(([0], np.cumsum(short))), np.concatenate(([0], np.cumsum(short_gpu)))
    hit = np.zeros(len(ch.r), dtype=bool)
    for s, ln in ((ch.s1, ch.l1), (ch.s2, ch.l2)):
        on = (ch.r == r) & (ln > 0) & ~keep
        a, b = np.clip(s, 0, tb.T), np.clip(s + ln, 0, tb.T)
        gpu_hit = on & (ch.h == h) & (cum_gpu[b] > cum_gpu[a])
        kw_hit = on & (cum_any[b] > cum_any[a])
        hit |= gpu_hit | kw_hit
    rows = np.flatnonzero(hit)
    same = ch.h[rows] == h
    size = tb.g[rows] * (ch.l1[rows] + ch.l2[rows])
    return rows[np.lexsort((-_runs(tb, rows), size, ~same))]


def _runs(tb: Tables, rows: np.ndarray) -> np.ndarray:
    """How many contiguous runs (region, hardware, start) each of ``rows`` may take: among jobs of one size, the one
    with the most is evicted first (it is the likeliest to find another place)."""
    starts = np.maximum(0, (tb.dl[rows] - tb.rel[rows])[:, None] - tb.dur[rows] + 1) * (tb.dur[rows] > 0)
    return (tb.elig[rows].sum(axis=1) * starts).sum(axis=1)


State = tuple[Choice, Residual, np.ndarray]  # a plan, the capacity it leaves, the rows this try has settled


def _clear(
    tb: Tables, state: State, scan: Scanner, row: int, opt: Option, depth: int, stop_at: float
) -> State | None:
    """``state`` (not changed) with ``row`` placed at ``opt`` by evicting jobs it has not settled, the evicted ones
    re-placed (or, ``depth`` levels down, placed by clearing a way of their own); None when ``opt`` cannot be
    cleared."""
    ch, res, keep = state[0].copy(), state[1].copy(), state[2].copy()
    evicted: list[int] = []
    while not fits_option(tb, res, row, opt):
        way = _in_the_way(tb, ch, res, row, opt, keep)
        if not len(way) or len(evicted) >= MAX_EVICT:
            return None
        j = int(way[0])
        res.apply(tb, ch, j, +1)
        ch.r[j] = -1
        evicted.append(j)
    ch.set(row, opt)
    res.apply(tb, ch, row, -1)
    keep[row] = True
    for j in sorted(evicted, key=lambda j: -int(tb.g[j]) * int(tb.dur[j].max())):
        found = scan.best(j, res)
        if found is not None:
            ch.set(j, found[2])
            res.apply(tb, ch, j, -1)
            keep[j] = True
        elif depth > 0 and time.perf_counter() < stop_at:
            # the first of its starts that clears (an evicted job that finds none stays out of this try)
            for alt in positions(tb, res, j, limit=4):
                got = _clear(tb, (ch, res, keep), scan, j, alt, depth - 1, stop_at)
                if got is not None:
                    ch, res, keep = got
                    break
                if time.perf_counter() >= stop_at:
                    break
    return ch, res, keep


def repair_left_out(tb: Tables, ch: Choice, *, time_limit_s: float) -> Choice:
    """``ch`` with jobs it leaves out placed by clearing their way (see the module); never worse than ``ch``."""
    t0 = time.perf_counter()
    stop_at = t0 + max(0.0, time_limit_s)
    ch = ch.copy()
    out = np.flatnonzero(ch.r < 0)
    plannable = out[tb.elig[out].any(axis=(1, 2))]
    if not len(plannable):
        return ch
    res = residual_of(tb, ch)
    scan = Scanner(tb)
    score = penalised_objective(tb, ch)
    # the hardest first: most GPU-slots, then least slack
    min_dur = np.where(tb.dur[plannable] > 0, tb.dur[plannable], 10**9).min(axis=1)
    order = plannable[
        np.lexsort((tb.dl[plannable] - tb.rel[plannable] - min_dur, -tb.g[plannable] * min_dur))
    ]
    for row_ in order:
        row = int(row_)
        if ch.r[row] >= 0:
            continue
        for opt in positions(tb, res, row):
            if time.perf_counter() >= stop_at:
                return ch
            got = _clear(tb, (ch, res, np.zeros(tb.J, dtype=bool)), scan, row, opt, DEPTH, stop_at)
            if got is None:
                continue
            value = penalised_objective(tb, got[0])
            if value < score - 1e-9:
                ch, res, score = got[0], got[1], value
                break
    return ch
