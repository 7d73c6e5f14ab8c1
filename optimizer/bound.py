"""Lagrangian lower bound of the time-indexed model: GPU and power capacity constraints priced out.

For multipliers ``lam[r, h, t] >= 0`` (GPUs), ``mu[r, t] >= 0`` (kW) and ``nu >= 0`` (cost cap), every
job independently picks its cheapest option under the priced objective (or is left out at its penalty);
``L(lam, mu, nu) = sum_j min_option(...) - sum lam * cap - sum mu * kw_cap - nu * cost_cap`` is a valid
lower bound on the objective of every plan, and its maximum equals the bound of the LP relaxation of
the time-indexed model (the job subproblems have the integrality property). Subgradient ascent with
Polyak steps finds good multipliers; they also price congested slots for the primal heuristic.

Interruptible jobs: the bound covers contiguous runs and the planner's two-chunk runs (first chunk
ending at least one slot before the second starts, priced exactly by a running minimum), so it is the
bound of the planner's option model.
"""

from __future__ import annotations

import time
from collections.abc import MutableSequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from optimizer.blocks import block_mean, block_sum, spread
from optimizer.problem import ObjectiveKind
from optimizer.shapes import share_shapes
from optimizer.tables import Tables
from optimizer.windows import Segments


@dataclass(slots=True)
class Multipliers:
    """Lagrange multipliers of the capacity constraints."""

    lam: np.ndarray  # (R, H, T) per GPU-slot
    mu: np.ndarray  # (R, T) per kW-slot
    nu: float = 0.0  # per unit of cost above the cost cap

    @classmethod
    def zeros(cls, tb: Tables, nu: float = 0.0) -> Multipliers:
        return cls(np.zeros((tb.R, tb.H, tb.T)), np.zeros((tb.R, tb.T)), nu)


class Option(NamedTuple):
    """One job's placement: region and hardware index, and up to two chunks ``[s1, s1 + l1)``, ``[s2, s2 + l2)``
    [slots] (``l2 == 0``: one chunk)."""

    r: int
    h: int
    s1: int
    l1: int
    s2: int
    l2: int


@dataclass(slots=True)
class Choice:
    """One option per job row: region, hardware and up to two chunks (``l2 == 0``: one chunk)."""

    r: np.ndarray
    h: np.ndarray
    s1: np.ndarray
    l1: np.ndarray
    s2: np.ndarray
    l2: np.ndarray

    @classmethod
    def empty(cls, n: int) -> Choice:
        z = np.zeros(n, dtype=np.int64)
        return cls(-np.ones(n, dtype=np.int64), z.copy(), z.copy(), z.copy(), z.copy(), z.copy())

    def get(self, row: int) -> Option:
        """The option of ``row``."""
        return Option(
            int(self.r[row]),
            int(self.h[row]),
            int(self.s1[row]),
            int(self.l1[row]),
            int(self.s2[row]),
            int(self.l2[row]),
        )

    def set(self, row: int, opt: Option) -> None:
        self.r[row], self.h[row], self.s1[row], self.l1[row], self.s2[row], self.l2[row] = opt

    def copy(self) -> Choice:
        return Choice(
            self.r.copy(), self.h.copy(), self.s1.copy(), self.l1.copy(), self.s2.copy(), self.l2.copy()
        )


def cumulative(x: np.ndarray) -> np.ndarray:
    """Prefix sums along the last axis with a leading zero."""
    pad = np.zeros((*x.shape[:-1], 1))
    return np.concatenate((pad, np.cumsum(x, axis=-1)), axis=-1)


# expanded starts kept in memory across iterations (about 16 bytes each, 32-bit indices: 100,000 bench jobs price
# 39.5 million starts an evaluation, one job per shape, in ~5 s when expanded anew each time)
CACHE_LIMIT = 50_000_000


class Expanded(NamedTuple):
    """The starts of a segment, flattened (see :func:`segment_values`)."""

    si: np.ndarray  # segment (job) index of each start
    start: np.ndarray  # start slot
    offsets: np.ndarray  # first start of each segment, and the total at the end
    g: np.ndarray  # GPUs of the start's job (float)
    bad: np.ndarray  # the starts not feasible alone
    # each start's run: (kind, start) as one flat index into a (kinds, T + 1) table, a kind being a (run length,
    # kW per GPU) pair, with the end slot of each kind and start (capped at T) and each kind's kW per GPU; or None
    # (more kinds than starts) and ``end`` and ``kw_per_gpu`` per start
    code: np.ndarray | None
    ends: np.ndarray  # (kinds, T + 1) with ``code``, else per start
    kw_per_gpu: np.ndarray  # per kind with ``code``, else per start


def _keep(tb: Tables) -> bool:
    """Whether the expanded starts of ``tb``'s evaluated segments fit in ``CACHE_LIMIT``."""
    shared = tb.shared
    if shared is not None:
        return shared.starts <= CACHE_LIMIT
    return sum(len(s.ok) for s in tb.contig) + sum(len(a.ok) + len(b.ok) for a, b in tb.halves) <= CACHE_LIMIT


def _expanded(tb: Tables, seg: Segments) -> Expanded:
    if seg.cache is not None:
        return seg.cache
    # every start in order, built from per-job values repeated over the job's starts (no gathers)
    nst = seg.nst
    offsets = np.concatenate(([0], np.cumsum(nst)))
    at = np.arange(offsets[-1], dtype=np.int64)
    si = np.repeat(np.arange(len(seg.job), dtype=np.int32), nst)
    start64 = at + np.repeat(seg.rel - offsets[:-1], nst)
    start = start64.astype(np.int32)
    per_gpu = tb.pkw[seg.job, seg.h] * tb.pue[seg.r]  # kW per GPU of each job
    g = np.repeat(tb.g[seg.job].astype(np.float32), nst)  # GPU counts: exact in 32 bits
    bad = np.flatnonzero(~seg.ok)
    # kinds of run: (length, kW per GPU) pairs, as one integer key (1-d sorts only)
    powers, p_code = np.unique(per_gpu, return_inverse=True)
    keys, first, kind = np.unique(
        seg.length * len(powers) + p_code.reshape(-1), return_index=True, return_inverse=True
    )
    n = tb.T + 1
    if len(keys) * n <= len(start):
        ends = np.minimum(np.arange(n) + seg.length[first][:, None], tb.T)
        code = (at + np.repeat(kind.reshape(-1) * n + seg.rel - offsets[:-1], nst)).astype(np.int32)
        out = Expanded(si, start, offsets, g, bad, code, ends, per_gpu[first])
    else:
        ends = start64 + np.repeat(seg.length, nst)
        out = Expanded(si, start, offsets, g, bad, None, ends, np.repeat(per_gpu, nst))
    if _keep(tb):
        seg.cache = out
    return out


def segment_values(tb: Tables, seg: Segments, cum_a: np.ndarray, cum_l: np.ndarray):
    """Priced value of every start of ``seg``; returns ``(si, start, offsets, value)``.

    A run of ``g`` GPUs at ``p`` kW per GPU from ``s`` to ``e`` is worth ``g * (p * (A[e] - A[s]) + L[e] - L[s])``
    for the cumulative slot weights ``A`` and GPU prices ``L``. Where a segment has fewer (length, kW per GPU) kinds
    than starts, the bracket is taken once per kind and start slot and read per start (the same arithmetic).
    """
    ex = _expanded(tb, seg)
    ca, cl = cum_a[seg.r], cum_l[seg.r, seg.h]
    if ex.code is not None:
        per_kind = ex.kw_per_gpu[:, None] * (ca[ex.ends] - ca) + (cl[ex.ends] - cl)
        value = per_kind.ravel()[ex.code]
    else:
        end = ex.ends
        value = ex.kw_per_gpu * (ca[end] - ca[ex.start]) + (cl[end] - cl[ex.start])
    value *= ex.g
    value[ex.bad] = np.inf
    return ex.si, ex.start, ex.offsets, value


def _firsts(key: np.ndarray) -> np.ndarray:
    """Index of the first element of each run of equal values of a sorted ``key``."""
    return np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))


def segment_argmin(si: np.ndarray, start: np.ndarray, offsets: np.ndarray, value: np.ndarray):
    """Minimum value and the first start reaching it, per segment."""
    seg_min = np.minimum.reduceat(value, offsets[:-1])
    pos = np.flatnonzero(value == seg_min[si])
    first = _firsts(si[pos])  # ``pos`` ascends, so its segments do too
    arg = np.zeros(len(seg_min), dtype=np.int64)
    arg[si[pos[first]]] = start[pos[first]]
    return seg_min, arg


def _run_layout(tb: Tables, seg: Segments, offsets: np.ndarray) -> list:
    """The starts of ``seg`` as matrices, one per power-of-two width class of its segments' start counts: per class
    ``(at, inside, dest)``, the flat start of each cell (past the end: a padding cell), whether it is a start, and
    the starts in the order of the cells that are. Kept in ``seg.runs`` when the expanded starts are kept."""
    if seg.runs is not None:
        return seg.runs
    nst = seg.nst
    width = np.left_shift(1, np.ceil(np.log2(np.maximum(nst, 1))).astype(np.int64))
    out = []
    for w in np.unique(width[nst > 0]).tolist():
        rows = np.flatnonzero((width == w) & (nst > 0))
        at = offsets[:-1][rows][:, None] + np.arange(w)
        inside = np.arange(w) < nst[rows][:, None]
        at[~inside] = len(seg.ok)
        at32 = at.astype(np.int32)
        out.append((at32, inside, at32[inside]))
    if _keep(tb):
        seg.runs = out
    return out


def _running_min(tb: Tables, seg: Segments, value: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per segment of ``seg``, the running minimum of ``value`` over its starts.

    Segments of a width class are stacked into one matrix padded with +inf (at most twice the cells), one
    accumulate per class.
    """
    low = np.empty(len(value))
    padded = np.append(value, np.inf)
    for at, inside, dest in _run_layout(tb, seg, offsets):
        low[dest] = np.minimum.accumulate(padded[at], axis=1)[inside]
    return low


def two_chunk_argmin(tb: Tables, seg_a: Segments, seg_b: Segments, cum_a: np.ndarray, cum_l: np.ndarray):
    """Cheapest two-chunk run per job: chunk ``a`` ends at least one slot before chunk ``b`` starts.

    Both segments of a job have the same number of starts and the ``k``-th start of ``b`` may follow the
    first ``k + 1`` starts of ``a`` (``b`` starts ``a + 1`` slots later at the earliest), so the best pair is
    the minimum over ``k`` of ``b``'s value plus the running minimum of ``a``'s values; the first chunk is then the
    first start of ``a`` whose value is that running minimum.

    Returns
    -------
    tuple
        ``(value, start of a, start of b)`` per segment; value is inf where no pair is feasible alone.
    """
    si, start_a, offsets, va = segment_values(tb, seg_a, cum_a, cum_l)
    _, start_b, _, vb = segment_values(tb, seg_b, cum_a, cum_l)
    n = len(seg_a.job)
    best_a = _running_min(tb, seg_a, va, offsets)
    total = best_a + vb
    seg_min = np.minimum.reduceat(total, offsets[:-1])
    pos = np.flatnonzero(total == seg_min[si])
    k = pos[_firsts(si[pos])]  # the first ``b`` start of each segment reaching its minimum
    s1 = np.zeros(n, dtype=np.int64)
    s2 = np.zeros(n, dtype=np.int64)
    s2[si[k]] = start_b[k]
    target = np.full(n, np.nan)
    target[si[k]] = best_a[k]
    at = np.flatnonzero(va == target[si])
    first_a = at[_firsts(si[at])]
    s1[si[first_a]] = start_a[first_a]
    return seg_min, s1, s2


def evaluate(tb: Tables, m: Multipliers, collect: list | None = None):
    """Lagrangian value and each job's priced best option.

    Each job shape of a segment is evaluated once and its answer copied to its jobs (``optimizer.shapes``; the
    shapes are found at the first call and kept in ``tb.shared``).

    ``collect``, when given, receives each (region, hardware) pair's best option per job as arrays
    ``(rows, r, h, s1, l1, s2, l2, value)`` (column generation adds several columns per round from them).

    Returns
    -------
    tuple
        ``(L, choice, best)``: the bound [objective units], the chosen options (``r == -1``: left out)
        and each job's priced value.
    """
    shared = share_shapes(tb)
    w = tb.weights(m.nu)
    cum_a = cumulative(tb.slot_h * w + m.mu)
    cum_l = cumulative(m.lam)
    best = tb.penalty.astype(float).copy()
    ch = Choice.empty(tb.J)
    for seg, (unit, inv) in zip(tb.contig, shared.contig, strict=True):
        si, start, offsets, value = segment_values(tb, unit, cum_a, cum_l)
        seg_min, arg = segment_argmin(si, start, offsets, value)
        if unit is not seg:
            seg_min, arg = seg_min[inv], arg[inv]
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
    for (seg_a, seg_b), (unit_a, unit_b, inv) in zip(tb.halves, shared.halves, strict=True):
        total, s1, s2 = two_chunk_argmin(tb, unit_a, unit_b, cum_a, cum_l)
        if unit_a is not seg_a:
            total, s1, s2 = total[inv], s1[inv], s2[inv]
        if collect is not None:
            z = np.zeros(len(total), dtype=np.int64)
            collect.append((seg_a.job, seg_a.r + z, seg_a.h + z, s1, seg_a.length, s2, seg_b.length, total))
        better = total < best[seg_a.job]
        rows = seg_a.job[better]
        best[rows] = total[better]
        ch.r[rows], ch.h[rows] = seg_a.r, seg_a.h
        ch.s1[rows], ch.l1[rows] = s1[better], seg_a.length[better]
        ch.s2[rows], ch.l2[rows] = s2[better], seg_b.length[better]
    value = float(best.sum() - (m.lam * tb.cap).sum() - (m.mu * tb.kw_cap).sum())
    if tb.problem.objective.kind is ObjectiveKind.CARBON_WITH_COST_CAP:
        value -= m.nu * float(tb.problem.objective.cost_cap or 0.0)
    return value, ch, best


def best_chunking(
    value: np.ndarray, dur: int, overhead: int, min_chunk: int, max_chunks: int | None = None
) -> np.ndarray:
    """Cheapest run of one job over every chunking of at most ``max_chunks`` chunks of at least ``min_chunk`` slots.

    Parameters
    ----------
    value : ndarray, shape (n, W)
        Value of running in each slot of the job's window, per candidate (e.g. region) [objective units]; +inf
        where the job cannot run.
    dur : int
        Run time without resumes [slots].
    overhead : int
        Extra run time per resume [slots].
    min_chunk : int
        Shortest chunk [slots].
    max_chunks : int or None
        Most chunks (None: as many as fit).

    Returns
    -------
    ndarray, shape (n,)
        The least total value of chunks ``c_1 < c_2 < ...`` (in order, not overlapping, each ``>= min_chunk``)
        covering ``dur + overhead * (k - 1)`` slots for ``k`` chunks; +inf when none fits. A single chunk shorter
        than ``min_chunk`` is allowed by the Problem but not counted here (it is a contiguous run).

    A dynamic program over the slots: the state is the number of chunks so far, the work still needed and the
    length of the chunk running (capped at ``min_chunk``), or "between chunks"; a new chunk adds ``overhead`` to
    the work still needed (so a plan that is done may still resume, where slots of negative value pay for the
    overhead).
    """
    n, W = value.shape
    m = max(1, int(min_chunk))
    K = W // m + 1 if max_chunks is None else max(1, min(int(max_chunks), W // m + 1))
    # work still needed k = dur + overhead * (chunks - 1) - slots run, at index k + W: a chunk may run past the
    # work of the chunks so far when a later resume's overhead makes up for it (k < 0 for a while)
    off = W
    size = off + dur + overhead * K + 1
    run = np.full((n, K, m, size), np.inf)  # run[:, c - 1, l - 1, k + off]: chunk c running, its length l (capped)
    gap = np.full((n, K, size), np.inf)  # after chunk c (each so far >= min_chunk)
    best = np.full(n, np.inf)
    for t in range(W):
        v = value[:, t][:, None, None]
        ended = np.minimum(gap, run[:, :, m - 1])  # a chunk may end after slot t - 1
        new = np.full((n, K, m, size), np.inf)
        # go on with the chunk: one slot less needed
        if m > 1:
            new[:, :, 1:, :-1] = run[:, :, :-1, 1:] + v[..., None]
        new[:, :, m - 1, :-1] = np.minimum(new[:, :, m - 1, :-1], run[:, :, m - 1, 1:] + v)
        # resume: chunk c + 1 after chunk c ended, paying the overhead, and its first slot
        shift = overhead - 1
        if K > 1:
            if shift >= 0:
                new[:, 1:, 0, shift:] = np.minimum(new[:, 1:, 0, shift:], ended[:, :-1, : size - shift] + v)
            else:
                new[:, 1:, 0, :-1] = np.minimum(new[:, 1:, 0, :-1], ended[:, :-1, 1:] + v)
        # the first chunk
        new[:, 0, 0, off + dur - 1] = np.minimum(new[:, 0, 0, off + dur - 1], v[:, 0, 0])
        gap, run = ended, new
        best = np.minimum(best, run[:, :, m - 1, off].min(axis=1))  # done at the end of a long enough chunk
    return best


def usage(tb: Tables, ch: Choice) -> tuple[np.ndarray, np.ndarray]:
    """GPUs ``(R, H, T)`` and facility power ``(R, T)`` [kW] used by ``ch``."""
    gpu = np.zeros((tb.R, tb.H, tb.T + 1))
    kw = np.zeros((tb.R, tb.T + 1))
    on = ch.r >= 0
    rows = np.flatnonzero(on)
    r, h = ch.r[on], ch.h[on]
    g = tb.g[rows].astype(float)
    p = g * tb.pkw[rows, h] * tb.pue[r]
    for s, ln in ((ch.s1[on], ch.l1[on]), (ch.s2[on], ch.l2[on])):
        run = ln > 0
        for arr, amount, idx in ((gpu, g, (r, h)), (kw, p, (r,))):
            np.add.at(arr, (*[i[run] for i in idx], s[run]), amount[run])
            np.add.at(arr, (*[i[run] for i in idx], s[run] + ln[run]), -amount[run])
    return np.cumsum(gpu, axis=-1)[..., :-1], np.cumsum(kw, axis=-1)[..., :-1]


def choice_cost(tb: Tables, ch: Choice) -> float:
    """Energy cost of ``ch`` [currency] (NaN-free: options only use valid slots)."""
    cum_p = cumulative(tb.known_price())
    on = ch.r >= 0
    rows = np.flatnonzero(on)
    r, h = ch.r[on], ch.h[on]
    e = tb.g[rows] * tb.pkw[rows, h] * tb.pue[r] * tb.slot_h
    s1, l1, s2, l2 = ch.s1[on], ch.l1[on], ch.s2[on], ch.l2[on]
    total = cum_p[r, s1 + l1] - cum_p[r, s1] + np.where(l2 > 0, cum_p[r, s2 + l2] - cum_p[r, s2], 0.0)
    return float((e * total).sum())


def subgradient(
    tb: Tables,
    upper: float,
    *,
    max_iter: int = 200,
    time_limit_s: float = 5.0,
    start: Multipliers | None = None,
    trail: MutableSequence[Choice] | None = None,
) -> tuple[float, Multipliers, list[float]]:
    """Subgradient ascent on the Lagrangian dual.

    Parameters
    ----------
    tb : Tables
        Problem arrays.
    upper : float
        Objective of a known plan (penalties included) [objective units], for the Polyak step.
    max_iter : int
        Iteration limit.
    time_limit_s : float
        Wall-clock limit [s].
    start : Multipliers or None
        Starting point (zeros by default).
    trail : list or deque of Choice, or None
        When given, receives the options every job picked at each iteration (columns for a master LP).

    Returns
    -------
    tuple
        ``(best bound, its multipliers, bound per iteration)``.
    """
    t0 = time.perf_counter()
    m = start or Multipliers.zeros(tb)
    starts = tb.blocks
    if starts is not None:
        # ascent on the block-aggregated dual (``optimizer.blocks``): multipliers constant over each block,
        # the subgradient of a block the sum over its slots; a quarter of the multipliers at 15-minute slots
        m = Multipliers(block_mean(m.lam, starts, tb.T), block_mean(m.mu, starts, tb.T), m.nu)
    capped = tb.problem.objective.kind is ObjectiveKind.CARBON_WITH_COST_CAP
    best_value, best_m, history = -np.inf, m, []
    theta, stall = 1.0, 0
    for _ in range(max_iter):
        value, ch, _ = evaluate(tb, m)
        history.append(value)
        if trail is not None:
            trail.append(ch)
        if not history[:-1] or value > best_value + 1e-9 * max(1.0, abs(best_value)):
            best_value, best_m, stall = value, Multipliers(m.lam.copy(), m.mu.copy(), m.nu), 0
        else:
            stall += 1
            if stall >= 4:
                theta, stall = theta / 2.0, 0
        gpu, kw = usage(tb, ch)
        d_lam = gpu - tb.cap
        d_mu = kw - tb.kw_cap
        lam, mu = m.lam, m.mu
        if starts is not None:
            d_lam, d_mu = block_sum(d_lam, starts), block_sum(d_mu, starts)
            lam, mu = lam[..., starts], mu[..., starts]
        d_lam[(lam <= 0) & (d_lam < 0)] = 0.0
        d_mu[(mu <= 0) & (d_mu < 0)] = 0.0
        d_nu = choice_cost(tb, ch) - float(tb.problem.objective.cost_cap or 0.0) if capped else 0.0
        if capped and m.nu <= 0 and d_nu < 0:
            d_nu = 0.0
        norm = float((d_lam**2).sum() + (d_mu**2).sum() + d_nu**2)
        gap = upper - best_value
        if norm <= 1e-12 or gap <= 1e-9 * max(1.0, abs(upper)) or theta < 1e-4:
            break
        if time.perf_counter() - t0 > time_limit_s:
            break
        # Polyak step towards a target at most 10 % above the best bound (a plan's objective with
        # penalties for left-out jobs can be far above the optimum and would overshoot)
        target_gap = min(gap, 0.1 * max(abs(best_value), 1e-6))
        step = theta * max(target_gap, 1e-9) / norm
        if starts is not None:
            d_lam, d_mu = spread(d_lam, starts, tb.T), spread(d_mu, starts, tb.T)
        m = Multipliers(
            np.maximum(0.0, m.lam + step * d_lam),
            np.maximum(0.0, m.mu + step * d_mu),
            max(0.0, m.nu + step * d_nu),
        )
    return float(best_value), best_m, history
