"""Jobs of one shape evaluated once: the Lagrangian evaluation prices one job per shape of each segment.

Within a (region, hardware) segment a start's priced value depends on its job only through the job's GPUs, kW per GPU,
run length and start window; at 100,000 bench jobs a segment holds about 2.6 jobs per such shape, at 10,000 about
2.2. :func:`share_shapes` finds the shapes once per ``Tables`` (they do not change with the prices) and
:func:`optimizer.bound.evaluate` then evaluates each shape once and copies the answer to its jobs: the same bound,
choice, values and collected options as evaluating every job, for fewer starts priced in every iteration of the
subgradient ascent, the LP's pricing and the priced placements.
"""

from __future__ import annotations

import numpy as np

from optimizer.tables import Tables
from optimizer.windows import Segments, SharedSegments

# a segment whose shapes hold more than this share of its starts is evaluated job by job (the copying would cost
# more than the starts it saves)
MAX_SHARED_SHARE = 0.9


def _shape_of(tb: Tables, seg: Segments, *more: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per job of ``seg``, the index of its shape and, per shape, its first job (index into ``seg.job``)."""
    rows = seg.job
    per_gpu = tb.pkw[rows, seg.h] * tb.pue[seg.r]  # kW per GPU, as ``bound.segment_values`` reads it
    key = np.zeros(len(rows), dtype=np.int64)
    for col in (per_gpu, tb.g[rows], seg.length, seg.rel, seg.nst, *more):
        # mixed-radix key of dense codes, made dense again after each column (1-d sorts only)
        kinds, code = np.unique(col, return_inverse=True)
        key = np.unique(key * len(kinds) + code.reshape(-1), return_inverse=True)[1].reshape(-1)
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    return inv.reshape(-1), first


def _unique(seg: Segments, first: np.ndarray) -> Segments:
    """The sub-segment of jobs ``first`` (one per shape), with their starts' feasibility."""
    offsets = np.concatenate(([0], np.cumsum(seg.nst)))
    nst = seg.nst[first]
    at = np.repeat(offsets[first] - np.concatenate(([0], np.cumsum(nst)[:-1])), nst) + np.arange(
        int(nst.sum())
    )
    return Segments(seg.r, seg.h, seg.job[first], seg.length[first], seg.rel[first], nst, seg.ok[at])


def _identity(seg: Segments) -> np.ndarray:
    return np.arange(len(seg.job))


def share_shapes(tb: Tables) -> SharedSegments:
    """The segments of ``tb`` with one job per shape, built once and kept in ``tb.shared``.

    A segment whose shapes save less than ``1 - MAX_SHARED_SHARE`` of its starts is kept whole (its ``inv`` is
    the identity).
    """
    if tb.shared is not None:
        return tb.shared
    contig: list[tuple[Segments, np.ndarray]] = []
    halves: list[tuple[Segments, Segments, np.ndarray]] = []
    starts = every = 0
    for seg in tb.contig:
        inv, first = _shape_of(tb, seg)
        unit = _unique(seg, first)
        if len(unit.ok) > MAX_SHARED_SHARE * len(seg.ok):
            unit, inv = seg, _identity(seg)
        contig.append((unit, inv))
        starts, every = starts + len(unit.ok), every + len(seg.ok)
    for seg_a, seg_b in tb.halves:
        inv, first = _shape_of(tb, seg_a, seg_b.length, seg_b.rel)
        unit_a, unit_b = _unique(seg_a, first), _unique(seg_b, first)
        if len(unit_a.ok) > MAX_SHARED_SHARE * len(seg_a.ok):
            unit_a, unit_b, inv = seg_a, seg_b, _identity(seg_a)
        halves.append((unit_a, unit_b, inv))
        starts, every = starts + 2 * len(unit_a.ok), every + 2 * len(seg_a.ok)
    tb.shared = SharedSegments(contig, halves, starts, every)
    return tb.shared
