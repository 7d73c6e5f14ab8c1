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

from optimizer.blocks import hour_blocks, is_fine
from optimizer.plan import Unplanned, UnplannedReason
from optimizer.problem import ObjectiveKind, Problem
from optimizer.splits import best_two_chunks
from optimizer.windows import Curves, JobArrays, Segments, SharedSegments, curves_of, restrict, start_windows

BIG = 1e12  # stand-in for +inf in cumulative sums (NaN-free arithmetic)


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
    # start slot of each capacity block the LP bound and the ascent price as one (``optimizer.blocks``);
    # None: every slot its own block
    blocks: np.ndarray | None = None
    # the segments with one job per shape, which the Lagrangian evaluation prices instead (``optimizer.shapes``);
    # None: not built yet
    shared: SharedSegments | None = None

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


def _fits_in_two_chunks(cur: Curves, ja: JobArrays, elig: np.ndarray, stage: np.ndarray) -> None:
    """Mark plannable the interruptible jobs that fit alone in two chunks of some split other than the model's own
    (``start_windows`` tries the rounded-up half only): around a gap in prices, GPUs or power a 1 + 3 split may fit
    where 2 + 2 does not. Raises ``stage`` to 5 and sets ``elig`` where they do."""
    T = cur.cap.shape[2]
    for i in np.flatnonzero(ja.intr & (stage < 5)):
        for r, h in zip(*np.nonzero(ja.allowed[i]), strict=True):
            total = int(ja.dur[i, h] + ja.ovh[i])
            if ja.dur[i, h] <= 0 or ja.dl[i] - ja.rel[i] < total:
                continue
            kw = ja.g[i] * ja.pkw[i, h] * cur.pue[r]
            usable = cur.valid[r] & (cur.cap[r, h] >= ja.g[i]) & (cur.kw_cap[r] >= kw - 1e-9)
            usable &= (np.arange(T) >= ja.rel[i]) & (np.arange(T) < ja.dl[i])
            value = np.where(usable, 0.0, np.inf)[None, :]
            if np.isfinite(best_two_chunks(value, np.array([total]), np.array([ja.min_chunk[i]]))[0][0]):
                elig[i, r, h] = True
                stage[i] = 5


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
    cur = curves_of(problem)
    keep, dur_all, pkw_all, allowed_all, unplanned = _job_fields(problem, hw_index, region_index)
    idx = np.array(keep, dtype=np.int64)
    jobs = [problem.jobs[i] for i in keep]
    ja = JobArrays(
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
    elig, contig, halves = start_windows(cur, ja, stage)
    _fits_in_two_chunks(cur, ja, elig, stage)
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
        contig=[s for s in (restrict(s, plannable, remap) for s in contig) if len(s.job)],
        halves=[(restrict(a, plannable, remap), restrict(b, plannable, remap)) for a, b in halves],
        penalty=np.zeros(0),
        unplanned=unplanned,
    )
    tables.halves = [(a, b) for a, b in tables.halves if len(a.job)]
    tables.penalty = _penalty(tables)
    tables.blocks = _capacity_blocks(problem, cur)
    return tables


def _capacity_blocks(problem: Problem, cur: Curves) -> np.ndarray | None:
    """Hour blocks where every curve the plan's cost and capacity depend on is held over the hour
    (``optimizer.blocks``); None when no block holds more than one slot."""
    T, R = problem.n_slots, len(problem.regions)
    curves = [
        cur.price,
        cur.carbon,
        cur.valid.astype(float),
        cur.kw_cap.reshape(R, T),
        cur.cap.reshape(-1, T).astype(float),
    ]
    starts = hour_blocks(problem.start.minute, problem.slot_minutes, curves)
    return None if is_fine(starts, T) else starts


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
