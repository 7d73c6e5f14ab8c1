"""Re-chunking: move interruptible jobs to their best two-chunk run with any split of the work.

The model's options hold an interruptible job to one run or two chunks of fixed lengths (the rounded-up half
first, ``tables._splits``); the Problem allows any lengths of at least ``min_chunk_slots`` (and up to
``max_chunks`` chunks). Here each planned interruptible job, costliest first, is taken out and put back at its
cheapest single run or two-chunk run over every split that fits the capacity left, when that is cheaper; the
interruptible jobs it leaves out are tried first.
"""

from __future__ import annotations

import time

import numpy as np

from optimizer.bound import Choice, Option, cumulative
from optimizer.heuristic import Residual, option_objective
from optimizer.tables import Tables, power_mw


def rechunk(tb: Tables, ch: Choice, *, time_limit_s: float) -> Choice:
    """Move interruptible jobs of plan ``ch`` (fitting every capacity) to cheaper chunkings, and place the ones it
    leaves out where they fit, for ``time_limit_s`` [s]; returns a plan that fits every capacity with a penalised
    objective no higher than ``ch``'s."""
    t0 = time.perf_counter()
    ch = ch.copy()
    on = tb.intr  # the planned ones, and the ones left out (first: a job that fits only in an unusual split)
    if not on.any():
        return ch
    cost = np.where(ch.r >= 0, option_objective(tb, ch), np.inf)
    res = Residual(tb)
    for busy in np.flatnonzero(ch.r >= 0):
        res.apply(tb, ch, int(busy), -1)
    cum = cumulative(tb.slot_h * tb.weights())
    # the costliest runs first: where a better chunking saves most
    for row_ in sorted(np.flatnonzero(on), key=lambda j: -cost[j]):
        row = int(row_)
        spent = time.perf_counter() - t0
        # the jobs left out (first) are tried even past the limit, for at most 0.05 s more
        if spent > time_limit_s and (np.isfinite(cost[row]) or spent > time_limit_s + 0.05):
            break
        res.apply(tb, ch, row, +1)
        found = _best_run(tb, res, cum, row)
        left_out = not np.isfinite(cost[row])
        if found is not None and (left_out or found[0] < cost[row] - 1e-9 * max(1.0, abs(cost[row]))):
            ch.set(row, found[1])
            cost[row] = found[0]
        res.apply(tb, ch, row, -1)
    return ch


def _best_run(tb: Tables, res: Residual, cum: np.ndarray, row: int) -> tuple[float, Option] | None:
    """Cheapest single run or two-chunk run (any split, the second chunk starting when or after the first ends) of
    ``row`` that fits ``res``, over its eligible (region, hardware) pairs: ``(objective, option)``."""
    rel, dl, g = int(tb.rel[row]), int(tb.dl[row]), int(tb.g[row])
    ovh, low = int(tb.ovh[row]), max(1, int(tb.min_chunk[row]))
    best: tuple[float, Option] | None = None
    for h in (int(x) for x in np.flatnonzero(tb.elig[row].any(axis=0))):
        dur = int(tb.dur[row, h])
        rr = np.flatnonzero(tb.elig[row, :, h])
        power = g * tb.pkw[row, h] * tb.pue[rr]
        # a slot is short when it lacks GPUs, power or the curves the objective needs
        short = (res.gpu[rr, h, :] < g) | (res.kw[rr, :] < power_mw(power)[:, None]) | ~tb.valid[rr]
        cums = (power[:, None] * cum[rr], cumulative(short.astype(float)))
        value, starts = _runs(cums, dur, rel, dl - dur)
        if value.size:
            i, j = np.unravel_index(int(np.argmin(value)), value.shape)
            if np.isfinite(value[i, j]) and (best is None or value[i, j] < best[0]):
                best = (float(value[i, j]), Option(int(rr[i]), h, int(starts[j]), dur, 0, 0))
        for a in range(low, dur + ovh - low + 1):
            b = dur + ovh - a
            if dl - rel < a + b:
                continue
            first, sa = _runs(cums, a, rel, dl - b - a)
            second, sb = _runs(cums, b, rel + a, dl - b)
            # second[k] starts a slots after first[k] (a resume right after the first chunk is allowed: at negative
            # prices the overhead can pay): any first chunk up to k goes with it
            total = np.minimum.accumulate(first, axis=1) + second
            i, k = np.unravel_index(int(np.argmin(total)), total.shape)
            if np.isfinite(total[i, k]) and (best is None or total[i, k] < best[0]):
                ja = int(np.argmin(first[i, : k + 1]))
                best = (float(total[i, k]), Option(int(rr[i]), h, int(sa[ja]), a, int(sb[k]), b))
    return best


def _runs(cums: tuple[np.ndarray, np.ndarray], length: int, first: int, last: int) -> tuple[np.ndarray, np.ndarray]:
    """Objective of the runs of ``length`` starting at ``first .. last``, per region (inf where a slot is short),
    and the starts; ``cums`` are the cumulative objective and short-slot count per region."""
    cum_obj, cum_short = cums
    starts = np.arange(first, last + 1)
    value = cum_obj[:, starts + length] - cum_obj[:, starts]
    bad = cum_short[:, starts + length] - cum_short[:, starts] > 0
    return np.where(bad, np.inf, value), starts
