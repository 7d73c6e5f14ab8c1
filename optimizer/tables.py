"""Numeric tables of a Problem: per-slot curves as arrays, jobs validated, start windows per (region, hardware).

``build_tables`` is the only place that turns the dataclasses into numpy arrays. Jobs that cannot run at
all (alone, with the whole fleet to themselves) are returned as ``Unplanned`` with the first reason that
applies, in this order: invalid fields, deadline before release, outside the horizon, no eligible region,
no eligible hardware, window too short, power budget too low, invalid prices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from optimizer.plan import Unplanned, UnplannedReason
from optimizer.problem import ObjectiveKind, Problem

BIG = 1e12  # stand-in for +inf in cumulative sums (NaN-free arithmetic)


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
    cache: tuple | None = None  # expanded starts kept between Lagrangian iterations (see bound.py)

    def expand(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Flattened ``(segment index, start slot, offsets)`` of every start."""
        seg = np.repeat(np.arange(len(self.job)), self.nst)
        offsets = np.concatenate(([0], np.cumsum(self.nst)))
        start = self.rel[seg] + (np.arange(len(seg)) - offsets[seg])
        return seg, start, offsets


@dataclass(slots=True)
class Tables:
    """Arrays of one problem (rows of job arrays are the plannable jobs only)."""

    problem: Problem
    T: int
    R: int
    H: int
    slot_h: float
    price_kwh: np.ndarray  # (R, T) currency/kWh, NaN where missing
    carbon_kg_kwh: np.ndarray  # (R, T) kg/kWh, NaN where missing
    valid: np.ndarray  # (R, T) bool: the curves the objective needs are known (a job may run there)
    price_known: np.ndarray  # (R, T) bool: a price (figures count 0 where not)
    carbon_known: np.ndarray  # (R, T) bool: a carbon intensity >= 0 (figures count 0 where not)
    pue: np.ndarray  # (R,)
    cap: np.ndarray  # (R, H, T) GPUs
    kw_cap: np.ndarray  # (R, T) kW left for jobs (budget - base load)
    rows: np.ndarray  # problem job index of each row
    g: np.ndarray  # (J,) GPUs
    rel: np.ndarray  # (J,) release slot (clipped to 0)
    dl: np.ndarray  # (J,) deadline slot (clipped to T)
    prio: np.ndarray  # (J,)
    intr: np.ndarray  # (J,) bool: may run in chunks (interruptible, max_chunks >= 2)
    max_chunks: np.ndarray  # (J,) most chunks
    min_chunk: np.ndarray  # (J,)
    ovh: np.ndarray  # (J,)
    dur: np.ndarray  # (J, H) run length, 0 = not eligible
    pkw: np.ndarray  # (J, H) kW per GPU
    elig: np.ndarray  # (J, R, H) bool, allowed and feasible alone somewhere
    allowed: np.ndarray  # (J, R, H) bool, allowed (region, hardware) pairs, feasible or not
    contig: list[Segments]  # one per (r, h) with eligible jobs
    halves: list[tuple[Segments, Segments]]  # two-chunk windows of interruptible jobs per (r, h)
    penalty: np.ndarray  # (J,) objective charged for leaving a plannable job out
    unplanned: list[Unplanned]

    @property
    def J(self) -> int:
        return len(self.rows)

    def weights(self, nu: float = 0.0) -> np.ndarray:
        """Objective per kWh ``(R, T)`` [objective unit/kWh]; BIG where the curves are missing."""
        obj = self.problem.objective
        if obj.kind is ObjectiveKind.COST:
            w = self.price_kwh
        elif obj.kind is ObjectiveKind.CARBON:
            w = self.carbon_kg_kwh
        elif obj.kind is ObjectiveKind.WEIGHTED:
            w = self.price_kwh + obj.carbon_price_per_tonne / 1000.0 * self.carbon_kg_kwh
        else:
            w = self.carbon_kg_kwh + nu * self.price_kwh
        return np.where(self.valid, w, BIG)

    def known_price(self) -> np.ndarray:
        """``price_kwh`` with 0 where no price is known ``(R, T)`` [currency/kWh]."""
        return np.where(self.price_known, self.price_kwh, 0.0)

    def known_carbon(self) -> np.ndarray:
        """``carbon_kg_kwh`` with 0 where no carbon intensity is known ``(R, T)`` [kg/kWh]."""
        return np.where(self.carbon_known, self.carbon_kg_kwh, 0.0)

    def power_kw(self, row: int, r: int, h: int) -> float:
        """Facility power of job ``row`` on (r, h) [kW]."""
        return float(self.g[row] * self.pkw[row, h] * self.pue[r])

    def kw_cap_mw(self) -> np.ndarray:
        """Power left for jobs per (region, slot) in integer milliwatts, rounded down."""
        return np.floor(self.kw_cap * 1e6 + 1e-6).astype(np.int64)


def power_mw(power_kw) -> np.ndarray:
    """Facility power in integer milliwatts, rounded up (heuristics and CP-SAT count power alike)."""
    return np.ceil(np.asarray(power_kw) * 1e6 - 1e-6).astype(np.int64)


# most first-chunk lengths modelled per interruptible job: the half, then lengths spread over the allowed range.
# One: four (half, shortest, longest and one between) doubled the Lagrangian evaluation at 1,000 bench jobs (202
# interruptible) and the plan in 10 s came out worse (seed 0: 798.7 against 784.3, gap 2.8 % against 1.0 %);
# the bound covers every split anyway (bound.best_chunking)
MAX_SPLITS = 1


def _splits(dur: int, ovh: int, min_chunk: int) -> list[tuple[int, int]]:
    """Lengths ``(a, b)`` of the two chunks of an interruptible run (``a + b = dur + ovh``, each at least
    ``min_chunk``, the first shorter than ``dur``): the rounded-up half first, then up to ``MAX_SPLITS - 1`` more
    spread from the shortest first chunk to the longest."""
    lo, hi = max(1, min_chunk), min(dur - 1, dur + ovh - min_chunk)
    if hi < lo:
        return []
    half = min(max(math.ceil(dur / 2), lo), hi)
    spread = np.unique(np.linspace(lo, hi, MAX_SPLITS).round().astype(int)).tolist()
    firsts = [half, *[a for a in spread if a != half][: MAX_SPLITS - 1]]
    return [(a, dur + ovh - a) for a in firsts]


def _two_chunk_feasible(seg_a: Segments, seg_b: Segments) -> np.ndarray:
    """Per job of two aligned chunk segments (``seg_b``'s k-th start is the first that follows ``seg_a``'s k-th):
    whether some first chunk and some second chunk after it are both feasible alone."""
    starts_at = np.concatenate(([0], np.cumsum(seg_a.nst)[:-1]))
    seen = np.cumsum(seg_a.ok)
    before = seen - np.repeat(seen[starts_at] - seg_a.ok[starts_at], seg_a.nst)  # ok first chunks up to here
    return np.logical_or.reduceat(seg_b.ok & (before > 0), starts_at)


def _sliding_min(x: np.ndarray, length: int) -> np.ndarray:
    """``out[s] = min(x[s:s+length])`` for s = 0 .. len(x) - length."""
    return np.lib.stride_tricks.sliding_window_view(x, length).min(axis=-1)


def _job_fields(problem: Problem, hw_index: dict[str, int], region_index: dict[str, int]):
    """Per-job arrays and the reasons of jobs invalid on their own fields."""
    T, H, R = problem.n_slots, len(problem.hardware), len(problem.regions)
    unplanned: list[Unplanned] = []
    keep: list[int] = []
    dur = np.zeros((len(problem.jobs), H), dtype=np.int64)
    pkw = np.zeros((len(problem.jobs), H))
    allowed = np.zeros((len(problem.jobs), R, H), dtype=bool)
    for i, job in enumerate(problem.jobs):
        reason, detail = None, ""
        if (
            job.gpus <= 0
            or job.priority < 0
            or job.min_chunk_slots < 1
            or job.checkpoint_overhead_slots < 0
            or job.max_chunks < 1
        ):
            reason, detail = UnplannedReason.INVALID_JOB, "gpus, priority, min_chunk, overhead or max_chunks out of range"
        elif any(d <= 0 for d in job.duration_slots.values()):
            reason, detail = UnplannedReason.INVALID_JOB, "duration_slots must be positive"
        elif job.deadline_slot <= job.release_slot:
            reason = UnplannedReason.DEADLINE_BEFORE_RELEASE
            detail = f"deadline slot {job.deadline_slot} <= release slot {job.release_slot}"
        elif job.release_slot >= T or job.deadline_slot <= 0:
            reason, detail = UnplannedReason.OUTSIDE_HORIZON, f"window outside slots 0..{T}"
        if reason is not None:
            unplanned.append(Unplanned(job.job_id, reason, detail))
            continue
        regions = [region_index[r] for r in (job.allowed_regions or region_index) if r in region_index]
        if not regions:
            unplanned.append(Unplanned(job.job_id, UnplannedReason.NO_ELIGIBLE_REGION, "no allowed region"))
            continue
        hw_ok = []
        for name, d in job.duration_slots.items():
            h = hw_index.get(name)
            if h is None or (job.allowed_hardware is not None and name not in job.allowed_hardware):
                continue
            if problem.hardware[h].memory_gb < job.memory_gb_per_gpu:
                continue
            power = problem.job_power_kw_per_gpu(job, name)
            if not (power >= 0 and math.isfinite(power)):
                continue
            dur[i, h], pkw[i, h] = int(d), power
            hw_ok.append(h)
        for r in regions:
            for h in hw_ok:
                allowed[i, r, h] = True
        keep.append(i)
    return keep, dur, pkw, allowed, unplanned


@dataclass(slots=True)
class _Curves:
    """Per-slot arrays of the regions (see ``Tables`` for shapes and units)."""

    price: np.ndarray
    carbon: np.ndarray
    valid: np.ndarray
    price_known: np.ndarray
    carbon_known: np.ndarray
    cap: np.ndarray
    kw_cap: np.ndarray
    pue: np.ndarray


def _curves(problem: Problem) -> _Curves:
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
    return _Curves(price, carbon, valid, price_known, carbon_known, cap, kw_cap, pue)


def _segments(
    cur: _Curves,
    r: int,
    h: int,
    g: np.ndarray,
    pkw: np.ndarray,
    rows: np.ndarray,
    length: np.ndarray,
    first: np.ndarray,
    last: np.ndarray,
) -> tuple[Segments, np.ndarray]:
    """Start windows ``first .. last`` of ``rows`` on (r, h), and per start how far it gets alone: stages
    (enough GPUs, and power, and valid curves) as a ``(3, starts)`` array."""
    nst = np.maximum(last - first + 1, 0)
    seg = Segments(r, h, rows, length, first, nst, np.zeros(0, dtype=bool))
    si, start, _ = seg.expand()
    ln = length[si]
    ok_gpu = np.ones(len(si), dtype=bool)
    ok_kw = np.ones(len(si), dtype=bool)
    ok_valid = np.ones(len(si), dtype=bool)
    for L in np.unique(length):
        sel = ln == L
        st = start[sel]
        ok_gpu[sel] = _sliding_min(cur.cap[r, h], int(L))[st] >= g[rows[si[sel]]]
        power = g[rows[si[sel]]] * pkw[rows[si[sel]], h] * cur.pue[r]
        ok_kw[sel] = _sliding_min(cur.kw_cap[r], int(L))[st] >= power - 1e-9
        ok_valid[sel] = _sliding_min(cur.valid[r].astype(np.int8), int(L))[st] > 0
    seg.ok = ok_gpu & ok_kw & ok_valid
    stages = np.stack([ok_gpu, ok_gpu & ok_kw, seg.ok]).astype(np.int64)
    return seg, stages


@dataclass(slots=True)
class _JobArrays:
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


def _windows(cur: _Curves, ja: _JobArrays, stage: np.ndarray):
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
            seg, stages = _segments(cur, r, h, g, ja.pkw, rows, L, rel[rows], dl[rows] - L)
            starts_at = np.concatenate(([0], np.cumsum(seg.nst)[:-1]))  # every job has >= 1 start here
            for k in range(3):
                hit = np.logical_or.reduceat(stages[k].astype(bool), starts_at)
                stage[rows[hit]] = np.maximum(stage[rows[hit]], 3 + k)
            feasible = np.logical_or.reduceat(seg.ok, starts_at)
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


_REASONS = {
    0: (UnplannedReason.NO_ELIGIBLE_HARDWARE, "no allowed hardware type with enough memory and a duration"),
    1: (
        UnplannedReason.WINDOW_TOO_SHORT,
        "no eligible (region, hardware) fits its run time between release and deadline",
    ),
    2: (UnplannedReason.NO_ELIGIBLE_HARDWARE, "needs more GPUs than any eligible region has in its window"),
    3: (UnplannedReason.POWER_BUDGET_TOO_LOW, "its power draw exceeds the power budget over every possible run"),
    4: (UnplannedReason.INVALID_PRICES, "every possible run crosses a slot with a missing price or carbon intensity"),
}


def _restrict(seg: Segments, plannable: np.ndarray, remap: np.ndarray) -> Segments:
    """``seg`` over the plannable jobs only, with their new row numbers."""
    keep_seg = plannable[seg.job]
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


def build_tables(problem: Problem) -> Tables:
    """Validate ``problem`` and build its arrays and start windows.

    Parameters
    ----------
    problem : Problem
        The problem.

    Returns
    -------
    Tables
        Arrays over the plannable jobs, plus an ``Unplanned`` entry with its reason for every other job.
    """
    T, R, H = problem.n_slots, len(problem.regions), len(problem.hardware)
    hw_index = {h.name: k for k, h in enumerate(problem.hardware)}
    region_index = {r.name: k for k, r in enumerate(problem.regions)}
    cur = _curves(problem)
    keep, dur_all, pkw_all, allowed_all, unplanned = _job_fields(problem, hw_index, region_index)
    idx = np.array(keep, dtype=np.int64)
    jobs = [problem.jobs[i] for i in keep]
    ja = _JobArrays(
        g=np.array([j.gpus for j in jobs], dtype=np.int64),
        rel=np.array([max(0, j.release_slot) for j in jobs], dtype=np.int64),
        dl=np.array([min(T, j.deadline_slot) for j in jobs], dtype=np.int64),
        intr=np.array([j.interruptible and j.max_chunks >= 2 for j in jobs], dtype=bool),
        max_chunks=np.array([j.max_chunks for j in jobs], dtype=np.int64),
        min_chunk=np.array([j.min_chunk_slots for j in jobs], dtype=np.int64),
        ovh=np.array([j.checkpoint_overhead_slots for j in jobs], dtype=np.int64),
        dur=dur_all[idx],
        pkw=pkw_all[idx],
        allowed=allowed_all[idx],
    )
    J = len(jobs)
    # stage[j] = how far the best (r, h) got: 0 no hw, 1 window, 2 gpus, 3 power, 4 prices, 5 feasible
    stage = np.zeros(J, dtype=np.int64)
    elig, contig, halves = _windows(cur, ja, stage)
    plannable = stage >= 5
    for left_out in np.flatnonzero(~plannable):
        reason, detail = _REASONS[int(stage[left_out])]
        unplanned.append(Unplanned(jobs[left_out].job_id, reason, detail))
    remap = -np.ones(J, dtype=np.int64)
    remap[plannable] = np.arange(int(plannable.sum()))
    tables = Tables(
        problem=problem,
        T=T,
        R=R,
        H=H,
        slot_h=problem.slot_hours,
        price_kwh=cur.price,
        carbon_kg_kwh=cur.carbon,
        valid=cur.valid,
        price_known=cur.price_known,
        carbon_known=cur.carbon_known,
        pue=cur.pue,
        cap=cur.cap,
        kw_cap=cur.kw_cap,
        rows=idx[plannable],
        g=ja.g[plannable],
        rel=ja.rel[plannable],
        dl=ja.dl[plannable],
        prio=np.array([max(1, j.priority) for j in jobs])[plannable] if J else np.zeros(0, dtype=np.int64),
        intr=ja.intr[plannable],
        max_chunks=ja.max_chunks[plannable],
        min_chunk=ja.min_chunk[plannable],
        ovh=ja.ovh[plannable],
        dur=ja.dur[plannable],
        pkw=ja.pkw[plannable],
        elig=elig[plannable],
        allowed=ja.allowed[plannable],
        contig=[s for s in (_restrict(s, plannable, remap) for s in contig) if len(s.job)],
        halves=[(_restrict(a, plannable, remap), _restrict(b, plannable, remap)) for a, b in halves],
        penalty=np.zeros(0),
        unplanned=unplanned,
    )
    tables.halves = [(a, b) for a, b in tables.halves if len(a.job)]
    tables.penalty = _penalty(tables)
    return tables


def _penalty(tables: Tables) -> np.ndarray:
    """Objective charged for leaving each plannable job out: well above any of its options, so planning a job
    always pays."""
    valid = tables.valid
    w = tables.weights(nu=1.0)
    w_max = float(np.max(np.where(valid, w, 0.0))) if valid.any() else 1.0
    worst = (
        tables.g
        * (tables.pkw * (tables.dur + tables.ovh[:, None])).max(axis=1)
        * tables.pue.max()
        * tables.slot_h
        * max(w_max, 1e-6)
    )
    return 10.0 * tables.prio * worst + 1.0
