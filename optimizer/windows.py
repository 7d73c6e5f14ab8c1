"""Start windows of a Problem's jobs per (region, hardware): the per-slot curves as arrays, and for each job the
starts of a single run, and of two chunks for interruptible jobs, with whether each is feasible alone.

Used by :func:`optimizer.tables.build_tables` only; ``Segments`` is what the bound and heuristics read.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from optimizer.problem import Problem


@dataclass(slots=True)
class Segments:
    """Start windows of one (region, hardware) pair for a set of jobs and one run length each.

    ``job[i]`` may start at slots ``rel[i] .. rel[i] + nst[i] - 1`` and runs ``length[i]`` slots;
    ``ok`` (flattened over all starts, in that order) marks starts that are feasible alone.
    """

    r: int
    h: int
    job: np.ndarray  # int64 job row
    length: np.ndarray  # int64 run length [slots]
    rel: np.ndarray  # int64 first start
    nst: np.ndarray  # int64 number of starts
    ok: np.ndarray  # bool, flattened starts
    cache: Any = None  # expanded starts kept between Lagrangian iterations (``bound.Expanded``)
    runs: list | None = None  # the starts' layout for running minima, kept likewise (see bound.py)

    def expand(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Flattened ``(segment index, start slot, offsets)`` of every start."""
        seg = np.repeat(np.arange(len(self.job)), self.nst)
        offsets = np.concatenate(([0], np.cumsum(self.nst)))
        start = self.rel[seg] + (np.arange(len(seg)) - offsets[seg])
        return seg, start, offsets


@dataclass(slots=True)
class SharedSegments:
    """The segments of a ``Tables`` with one job per shape (see :mod:`optimizer.shapes`).

    ``contig[k] = (unit, inv)``: ``unit`` holds one job of each shape of ``tables.contig[k]`` and job ``i`` of that
    segment has the values of ``unit``'s job ``inv[i]``; ``halves[k] = (unit_a, unit_b, inv)`` likewise.
    """

    contig: list[tuple[Segments, np.ndarray]]
    halves: list[tuple[Segments, Segments, np.ndarray]]
    starts: int  # starts of the unit segments (what an evaluation prices)
    every: int  # starts of every job


# most first-chunk lengths modelled per interruptible job: the half, then lengths spread over the allowed range.
# One: four (half, shortest, longest and one between) doubled the Lagrangian evaluation at 1,000 bench jobs (202
# interruptible) and the plan in 10 s came out worse (seed 0: 798.7 against 784.3, gap 2.8 % against 1.0 %);
# the bound covers every split anyway (bound.best_chunking)
MAX_SPLITS = 1


@functools.lru_cache(maxsize=4096)
def _splits(dur: int, ovh: int, min_chunk: int) -> tuple[tuple[int, int], ...]:
    """Lengths ``(a, b)`` of the two chunks of an interruptible run (``a + b = dur + ovh``, each at least
    ``min_chunk``, the first shorter than ``dur``): the rounded-up half first, then up to ``MAX_SPLITS - 1`` more
    spread from the shortest first chunk to the longest."""
    lo, hi = max(1, min_chunk), min(dur - 1, dur + ovh - min_chunk)
    if hi < lo:
        return ()
    half = min(max(math.ceil(dur / 2), lo), hi)
    spread = np.unique(np.linspace(lo, hi, MAX_SPLITS).round().astype(int)).tolist()
    firsts = [half, *[a for a in spread if a != half][: MAX_SPLITS - 1]]
    return tuple((a, dur + ovh - a) for a in firsts)


def _two_chunk_feasible(seg_a: Segments, seg_b: Segments) -> np.ndarray:
    """Per job of two aligned chunk segments (``seg_b``'s k-th start is the first that follows ``seg_a``'s k-th):
    whether some first chunk and some second chunk after it are both feasible alone."""
    starts_at = np.concatenate(([0], np.cumsum(seg_a.nst)[:-1]))
    seen = np.cumsum(seg_a.ok)
    before = seen - np.repeat(seen[starts_at] - seg_a.ok[starts_at], seg_a.nst)  # ok first chunks up to here
    return np.logical_or.reduceat(seg_b.ok & (before > 0), starts_at)


def _min_levels(x: np.ndarray) -> np.ndarray:
    """Sparse table of ``x``: row ``k`` holds ``min(x[s : s + 2**k])`` (padded with the row above past the end)."""
    levels = [np.asarray(x)]
    k = 1
    while 2**k <= len(x):
        prev, half = levels[-1], 2 ** (k - 1)
        row = prev.copy()
        row[: len(x) - half] = np.minimum(prev[: len(x) - half], prev[half:])
        levels.append(row)
        k += 1
    return np.stack(levels)


def _range_min(levels: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """``min(x[s : s + l])`` for each start ``s`` and length ``l >= 1`` (``s + l <= len(x)``), from
    :func:`_min_levels`: two overlapping power-of-two windows, O(1) a query whatever the length (a 15-minute grid has
    four times the lengths and the starts of an hourly one; a sliding minimum per length grew with their product)."""
    first, second = _window_index(levels.shape[1], start, length)
    flat = levels.ravel()
    return np.minimum(flat[first], flat[second])


def _window_index(n: int, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flat indices into a ``(levels, n)`` sparse table of the two power-of-two windows covering each window."""
    log2 = np.zeros(n + 1, dtype=np.int64)
    log2[2:] = np.floor(np.log2(np.arange(2, n + 1))).astype(np.int64)
    k = log2[length]
    first = k * n + start
    return first, first + length - (np.int64(1) << k)


@dataclass(slots=True)
class Curves:
    """Per-slot arrays of the regions (see ``Tables`` for shapes and units)."""

    price: np.ndarray
    carbon: np.ndarray
    valid: np.ndarray
    price_known: np.ndarray
    carbon_known: np.ndarray
    cap: np.ndarray
    kw_cap: np.ndarray
    pue: np.ndarray


def curves_of(problem: Problem) -> Curves:
    """Prices in the problem's currency per kWh, carbon per kWh, GPUs and power left for jobs per slot."""
    T, R, H = problem.n_slots, len(problem.regions), len(problem.hardware)
    price = np.array(
        [[p * problem.fx(r.currency) / 1000.0 for p in r.price_per_mwh] for r in problem.regions]
    )
    carbon = np.array([[c / 1000.0 for c in r.carbon_g_per_kwh] for r in problem.regions])
    price = price.reshape(R, T)
    carbon = carbon.reshape(R, T)
    price_known = np.isfinite(price)
    carbon_known = np.isfinite(carbon) & (carbon >= 0)
    # a missing curve the objective does not use never keeps a job out (its figure counts 0 there, noted)
    kind = problem.objective.kind
    valid = (price_known | (not kind.uses_price)) & (carbon_known | (not kind.uses_carbon))
    cap = np.zeros((R, H, T), dtype=np.int64)
    kw_cap = np.zeros((R, T))
    for r, reg in enumerate(problem.regions):
        for h, hw in enumerate(problem.hardware):
            per_slot = reg.inventory_per_slot.get(hw.name)
            cap[r, h] = per_slot if per_slot is not None else reg.inventory.get(hw.name, 0)
        base = np.zeros(T) if reg.base_load_kw is None else np.asarray(reg.base_load_kw, dtype=float)
        kw_cap[r] = np.nan_to_num(np.asarray(reg.power_budget_kw, dtype=float) - base, nan=0.0)
    pue = np.array([r.pue for r in problem.regions], dtype=float)
    return Curves(price, carbon, valid, price_known, carbon_known, cap, kw_cap, pue)


def _segments(
    cur: Curves,
    r: int,
    h: int,
    g: np.ndarray,
    pkw: np.ndarray,
    rows: np.ndarray,
    length: np.ndarray,
    first: np.ndarray,
    last: np.ndarray,
) -> tuple[Segments, np.ndarray]:
    """Start windows ``first .. last`` of ``rows`` on (r, h), and per job how far its best start gets alone:
    stages (enough GPUs, and power, and valid curves) as a ``(3, len(rows))`` bool array.

    Jobs of one shape (GPUs, power, run length, first start, number of starts) have the same windows: each
    shape is checked once and its answers copied to its jobs (at 100,000 bench jobs a (region, hardware) pair
    holds about 2.6 jobs per shape)."""
    nst = np.maximum(last - first + 1, 0)
    power = g[rows] * pkw[rows, h] * cur.pue[r]
    # one integer key per shape (a 1-d sort; np.unique over rows sorts far slower)
    n = len(cur.kw_cap[r]) + 2
    _, power_code = np.unique(power, return_inverse=True)
    g_kinds, g_code = np.unique(g[rows], return_inverse=True)
    key = ((power_code.reshape(-1) * len(g_kinds) + g_code.reshape(-1)) * n + length) * n + first
    key = key * n + nst
    _, pick, inv = np.unique(key, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    u_g, u_power, u_len, u_first, u_nst = g[rows][pick], power[pick], length[pick], first[pick], nst[pick]
    useg = Segments(r, h, np.arange(len(pick)), u_len, u_first, u_nst, np.zeros(0, dtype=bool))
    si, start, u_off = useg.expand()
    lo, hi = _window_index(len(cur.kw_cap[r]), start, u_len[si])

    def window_min(x: np.ndarray) -> np.ndarray:
        flat = _min_levels(x).ravel()
        return np.minimum(flat[lo], flat[hi])

    ok_gpu = window_min(cur.cap[r, h]) >= u_g[si]
    ok_kw = window_min(cur.kw_cap[r]) >= u_power[si] - 1e-9
    ok_valid = window_min(cur.valid[r].astype(np.int8)) > 0
    u_ok = ok_gpu & ok_kw & ok_valid
    hits = np.zeros((3, len(pick)), dtype=bool)
    has = u_nst > 0
    if has.any():
        at = u_off[:-1][has]
        for k, stage in enumerate((ok_gpu, ok_gpu & ok_kw, u_ok)):
            hits[k, has] = np.logical_or.reduceat(stage, at)
    # each job's starts are its shape's starts, in the same order
    offsets = np.concatenate(([0], np.cumsum(nst)))
    shift = u_off[:-1][inv] - offsets[:-1]
    ok = u_ok[np.arange(int(offsets[-1])) + np.repeat(shift, nst)]
    return Segments(r, h, rows, length, first, nst, ok), hits[:, inv]


@dataclass(slots=True)
class JobArrays:
    """Per-job arrays of the jobs valid on their own fields (rows before the plannability cut)."""

    g: np.ndarray
    rel: np.ndarray
    dl: np.ndarray
    intr: np.ndarray
    max_chunks: np.ndarray
    min_chunk: np.ndarray
    ovh: np.ndarray
    dur: np.ndarray
    pkw: np.ndarray
    allowed: np.ndarray


def start_windows(cur: Curves, ja: JobArrays, stage: np.ndarray):
    """Start windows per (region, hardware): contiguous runs and the two-chunk runs of interruptible jobs.

    Raises ``stage[j]`` to how far job ``j`` gets on its best pair: 1 window, 2 GPUs, 3 power, 4 prices,
    5 feasible. Returns ``(elig, contig, halves)``.
    """
    R, H = cur.cap.shape[0], cur.cap.shape[1]
    g, rel, dl, dur = ja.g, ja.rel, ja.dl, ja.dur
    elig = np.zeros((len(g), R, H), dtype=bool)
    contig: list[Segments] = []
    halves: list[tuple[Segments, Segments]] = []
    for r in range(R):
        for h in range(H):
            rows = np.flatnonzero(ja.allowed[:, r, h])
            if len(rows) == 0:
                continue
            stage[rows] = np.maximum(stage[rows], 1)
            L = dur[rows, h]
            fits = dl[rows] - rel[rows] >= L
            rows, L = rows[fits], L[fits]
            if len(rows) == 0:
                continue
            stage[rows] = np.maximum(stage[rows], 2)
            seg, hits = _segments(cur, r, h, g, ja.pkw, rows, L, rel[rows], dl[rows] - L)
            for k in range(3):
                hit = hits[k]
                stage[rows[hit]] = np.maximum(stage[rows[hit]], 3 + k)
            feasible = hits[2]
            elig[rows[feasible], r, h] = True
            contig.append(seg)
            ir = rows[ja.intr[rows]]
            splits = [_splits(int(dur[i, h]), int(ja.ovh[i]), int(ja.min_chunk[i])) for i in ir]
            for k in range(max((len(x) for x in splits), default=0)):
                # the k-th split of every job that has one: one pair of aligned segments
                pick = np.array([j for j, x in enumerate(splits) if len(x) > k], dtype=np.int64)
                hr = ir[pick]
                a = np.array([splits[j][k][0] for j in pick], dtype=np.int64)
                b = np.array([splits[j][k][1] for j in pick], dtype=np.int64)
                room = dl[hr] - rel[hr] >= a + b + 1
                hr, a, b = hr[room], a[room], b[room]
                if len(hr):
                    seg_a, _ = _segments(cur, r, h, g, ja.pkw, hr, a, rel[hr], dl[hr] - b - 1 - a)
                    seg_b, _ = _segments(cur, r, h, g, ja.pkw, hr, b, rel[hr] + a + 1, dl[hr] - b)
                    halves.append((seg_a, seg_b))
                    # plannable in two chunks even where no single run fits (a gap in prices, GPUs or power)
                    chunked = hr[_two_chunk_feasible(seg_a, seg_b)]
                    elig[chunked, r, h] = True
                    stage[chunked] = 5
    return elig, contig, halves


def restrict(seg: Segments, plannable: np.ndarray, remap: np.ndarray) -> Segments:
    """``seg`` over the plannable jobs only, with their new row numbers."""
    keep_seg = plannable[seg.job]
    if keep_seg.all():
        return Segments(seg.r, seg.h, remap[seg.job], seg.length, seg.rel, seg.nst, seg.ok)
    si, _, _ = seg.expand()
    return Segments(
        seg.r,
        seg.h,
        remap[seg.job[keep_seg]],
        seg.length[keep_seg],
        seg.rel[keep_seg],
        seg.nst[keep_seg],
        seg.ok[keep_seg[si]],
    )
