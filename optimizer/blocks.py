"""Capacity blocks: the slots whose GPU and power rows the LP bound and the subgradient ascent price as one.

On a grid finer than the market (15-minute slots, hourly prices held over the quarter-hours) the LP of the
time-indexed model has four times the capacity rows of the hourly one and its column generation gets a quarter of
the rounds in the same time (issue 27: 1,000 jobs in 10 s, 5-6 rounds at 15 minutes against 11-15 at 60). Here the
rows of the slots of one hour are summed into one row per block,

    sum over the slots t of block B of the GPUs (power) used at t <= sum over t of B of the capacity at t,

a relaxation of the per-slot rows (every plan that fits each slot fits each block), so its LP value and the
Lagrangian value at multipliers constant over each block (``lam[t] = y[B]``) are valid lower bounds of the
per-slot problem: ``L(lam)`` is a bound for every ``lam >= 0``, block-constant ones included. The columns keep their
exact slots (a job starting at :45 uses one quarter of its first hour's row), so windows that start or end
mid-hour are priced exactly; only the capacity rows are coarser. Plans are still built and checked slot by slot.

Blocks are the hours where the objective's curves are held (equal over the hour's slots in every region); where a
curve changes within an hour each slot of that hour keeps its own row.
"""

from __future__ import annotations

import numpy as np


def hour_blocks(problem_start_minute: int, slot_minutes: int, curves: list[np.ndarray]) -> np.ndarray:
    """Start slot of each capacity block ``(n_blocks,)``, the first one 0.

    Parameters
    ----------
    problem_start_minute : int
        Minute of the hour at which slot 0 starts.
    slot_minutes : int
        Slot length [min].
    curves : list of ndarray, shape (R, T)
        Curves that must be held over a block (the objective's weights and where they are valid); NaN equals NaN.

    Returns
    -------
    ndarray
        Block starts: the hour boundaries (and slot 0) where every curve is held over the hour's slots, every slot
        its own block elsewhere; ``arange(T)`` when slots are an hour or longer or do not divide the hour.
    """
    T = curves[0].shape[-1] if curves else 0
    per_hour = 60 // slot_minutes if 0 < slot_minutes < 60 and 60 % slot_minutes == 0 else 1
    if per_hour <= 1 or T == 0:
        return np.arange(T, dtype=np.int64)
    # slot index of each hour boundary inside the horizon (slot 0 may start mid-hour)
    first = (-(problem_start_minute // slot_minutes)) % per_hour
    bounds = np.unique(np.concatenate(([0], np.arange(first, T, per_hour), [T])))
    starts: list[int] = []
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        held = all(_held(c[:, a:b]) for c in curves)
        starts.extend([a] if held else range(a, b))
    return np.array(starts, dtype=np.int64)


def _held(x: np.ndarray) -> bool:
    """Whether every row of ``x`` is constant along its last axis (NaN counts as equal to NaN)."""
    if x.shape[-1] <= 1:
        return True
    first = x[:, :1]
    same = (x == first) | (np.isnan(x) & np.isnan(first)) if x.dtype.kind == "f" else x == first
    return bool(np.all(same))


def is_fine(starts: np.ndarray, T: int) -> bool:
    """Whether every slot is its own block (nothing aggregated)."""
    return len(starts) == T


def row_starts(blocks: np.ndarray | None, T: int) -> np.ndarray:
    """Start slot of each block of capacity rows: ``blocks`` (``Tables.blocks``, hour blocks on a finer grid), else
    one block per slot."""
    return blocks if blocks is not None else np.arange(T, dtype=np.int64)


def slot_block(starts: np.ndarray, T: int) -> np.ndarray:
    """Block of each slot ``(T,)``."""
    out = np.zeros(T, dtype=np.int64)
    if len(starts) > 1:
        out[starts[1:]] = 1
    return np.cumsum(out)


def block_sum(x: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Sum of ``x`` over each block along the last axis."""
    return np.add.reduceat(x, starts, axis=-1)


def spread(y: np.ndarray, starts: np.ndarray, T: int) -> np.ndarray:
    """Per-block values ``y`` (last axis: blocks) repeated over each block's slots (last axis: ``T``)."""
    lengths = np.diff(np.append(starts, T))
    return np.repeat(y, lengths, axis=-1)


def block_mean(x: np.ndarray, starts: np.ndarray, T: int) -> np.ndarray:
    """``x`` replaced by its mean over each block (a block-constant array of the same shape)."""
    lengths = np.diff(np.append(starts, T))
    return spread(block_sum(x, starts) / lengths, starts, T)


def column_slots(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every slot each column of ``keys`` (rows ``(class, r, h, s1, l1, s2, l2)``) runs in: the column's index in
    ``keys`` and the slot, one entry per slot of each chunk (the bound's overlapping two-chunk relaxations repeat
    a slot)."""
    cols, slots = [], []
    for s, ln in ((keys[:, 3], keys[:, 4]), (keys[:, 5], keys[:, 6])):
        ln = np.maximum(ln, 0)
        col = np.repeat(np.arange(len(keys)), ln)
        cols.append(col)
        slots.append(s[col] + np.arange(len(col)) - np.repeat(np.cumsum(ln) - ln, ln))
    return np.concatenate(cols), np.concatenate(slots)


def column_blocks(keys: np.ndarray, block_of: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The blocks each column of ``keys`` runs in: ``(column index, block, slots of the column in that block)``, one
    entry per (column, block); ``block_of`` is :func:`slot_block`'s block of each slot."""
    col, t = column_slots(keys)
    nb = int(block_of[-1]) + 1 if len(block_of) else 1
    pair, count = np.unique(col * nb + block_of[t], return_counts=True)
    col, b = np.divmod(pair, nb)
    return col, b, count
