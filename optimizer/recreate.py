"""Ruin and recreate: take a group of related jobs out of the plan and put them back one by one.

Single-job moves (``improve``, ``improve_fast``) and ejections stop where every cheaper option of a job is
held by several other jobs at once. Here a move removes a whole group and re-places it, biggest first with
some noise, each job at its cheapest option that still fits. Two kinds of group:

- targeted: a job whose option is far above its best option at capacity prices (the LP duals or Lagrange
  multipliers: its reduced cost) with the jobs that hold that best option's slots; the job is put back
  there first, the others around it;
- LP-targeted (when the LP solution is given): a job whose option costs more than the cheapest LP column of
  its class, put back on one of its class's LP columns (drawn by LP mass) with the jobs holding those slots;
  the capacity prices of a degenerate LP rate many options alike and rarely pick these jobs;
- window: the jobs running in one region during a few slots;
- left out: a job the plan leaves out, put back first at its best option at capacity prices, with the jobs
  that hold that option's slots put back around it (the move saves its penalty; single-job moves can place
  it only where a gap is already free).

A move is accepted when it lowers the objective, or with the simulated-annealing probability
``exp(-increase / temperature)`` while the temperature falls linearly to zero over the time limit; the best
plan seen is returned, so the objective never ends above the starting plan's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from optimizer.bound import Choice, Multipliers, Option, cumulative, evaluate
from optimizer.candidates import Candidates, fits_option
from optimizer.heuristic import Residual, Scanner, option_objective, penalised_objective, single_objective
from optimizer.tables import Tables


def priced_values(tb: Tables, ch: Choice, m: Multipliers) -> np.ndarray:
    """Value of each row's option at the capacity prices of ``m`` [objective units]; 0 where left out."""
    cum_a = cumulative(tb.slot_h * tb.weights(m.nu) + m.mu)
    cum_l = cumulative(m.lam)
    on = np.flatnonzero(ch.r >= 0)
    r, h = ch.r[on], ch.h[on]
    g = tb.g[on].astype(float)
    kw = g * tb.pkw[on, h] * tb.pue[r]
    out = np.zeros(tb.J)
    for s, ln in ((ch.s1[on], ch.l1[on]), (ch.s2[on], ch.l2[on])):
        part = kw * (cum_a[r, s + ln] - cum_a[r, s]) + g * (cum_l[r, h, s + ln] - cum_l[r, h, s])
        out[on] += np.where(ln > 0, part, 0.0)
    return out


def _end(ch: Choice) -> np.ndarray:
    return np.maximum(ch.s1 + ch.l1, ch.s2 + ch.l2)


def ruin_recreate(
    tb: Tables,
    ch: Choice,
    m: Multipliers,
    cand: Candidates | None = None,
    *,
    time_limit_s: float,
    seed: int = 0,
    size: int = 32,
    temperature: float = 0.01,
    lp: tuple[np.ndarray, np.ndarray] | None = None,
) -> Choice:
    """Ruin-and-recreate search from plan ``ch`` for ``time_limit_s`` [s].

    Parameters
    ----------
    tb : Tables
        Problem arrays.
    ch : Choice
        A plan that fits every capacity.
    m : Multipliers
        Capacity prices (LP duals or Lagrange multipliers) that pick the targeted moves.
    cand : Candidates or None
        Candidates at true objective (zero prices); their per-pair bounds cut the re-placement scans short.
    time_limit_s : float
        Wall-clock limit [s].
    seed : int
        Seed of the move choice and the noise in the re-placement order.
    size : int
        Most jobs taken out by one move.
    temperature : float
        Starting temperature as a fraction of the mean objective per planned job.
    lp : tuple or None
        ``(class of each job row, LP solution rows (class, r, h, s1, l1, s2, l2, value))`` for the
        LP-targeted moves.

    Returns
    -------
    Choice
        The best plan seen (fits every capacity; objective no higher than ``ch``'s).
    """
    t0 = time.perf_counter()
    ch = ch.copy()
    if tb.J == 0 or not (ch.r >= 0).any():
        return ch
    rng = np.random.default_rng(seed)
    res = Residual(tb)
    for busy in np.flatnonzero(ch.r >= 0):
        res.apply(tb, ch, int(busy), -1)
    _, target, best_priced = evaluate(tb, m)
    cost = np.where(ch.r >= 0, option_objective(tb, ch), tb.penalty)
    current = float(cost.sum())
    best, best_value = ch.copy(), current
    t_start = temperature * float(np.nansum(np.where(ch.r >= 0, cost, 0.0))) / max(1, int((ch.r >= 0).sum()))
    # window moves go to congested regions (high capacity prices) most of the time
    congestion = m.lam.sum(axis=(1, 2)) + m.mu.sum(axis=1)
    region_p = np.full(tb.R, 1.0 / tb.R)
    if congestion.sum() > 0:
        region_p = 0.3 * region_p + 0.7 * congestion / congestion.sum()
    mv = _Moves(tb, ch, res, Scanner(tb), cand, cost, rng, size, tb.g * tb.dur.max(axis=1), region_p, target)
    reduced = np.zeros(tb.J)
    lp_t = _lp_targets(tb, *lp) if lp is not None else None
    excess = np.zeros(tb.J)
    out = np.zeros(0, dtype=np.int64)
    it = 0
    while True:
        elapsed = time.perf_counter() - t0
        if elapsed >= time_limit_s:
            break
        temp = t_start * (1.0 - elapsed / time_limit_s) + 1e-12
        if it % 64 == 0:
            reduced = np.where(ch.r >= 0, np.maximum(priced_values(tb, ch, m) - best_priced, 0.0), 0.0)
            if lp_t is not None:
                excess = np.where(ch.r >= 0, np.maximum(cost - lp_t[3], 0.0), 0.0)
            out = np.flatnonzero(ch.r < 0)
        it += 1
        free, first = _pick_group(mv, it, reduced, excess, lp, lp_t, out)
        if not free:
            continue
        delta = _move(mv, free, first, temp)
        if delta is None:
            continue
        current += delta
        if current < best_value - 1e-9 * max(1.0, abs(best_value)):
            best, best_value = ch.copy(), current
    if penalised_objective(tb, best) > penalised_objective(tb, ch):
        best = ch
    return best


@dataclass(eq=False, slots=True)
class _Moves:
    """The plan being searched (``ch``, modified in place), the capacity it leaves (``res``) and the objective of
    each row's option (``cost``, the penalty where left out)."""

    tb: Tables
    ch: Choice
    res: Residual
    scan: Scanner
    cand: Candidates | None
    cost: np.ndarray
    rng: np.random.Generator
    size: int  # most jobs taken out by one move
    size_key: np.ndarray  # GPUs x longest run per row: bigger jobs are put back first
    region_p: np.ndarray  # probability of each region for a window move
    target: Choice  # each row's best option at the capacity prices


def _pick_group(
    mv: _Moves, it: int, reduced: np.ndarray, excess: np.ndarray, lp, lp_t, out: np.ndarray
) -> tuple[list[int], tuple[int, Option] | None]:
    """The jobs the next move takes out, and the job to put back first with its option (targeted moves).
    ``out``: rows left out at the last refresh (one move in four goes to one of them while any is still out)."""
    tb, ch, rng = mv.tb, mv.ch, mv.rng
    target_opt: Option | None = None
    j = -1
    still_out = out[ch.r[out] < 0] if it % 4 == 2 and len(out) else out[:0]
    if len(still_out):
        j = int(rng.choice(still_out))
        target_opt = mv.target.get(j)
    elif lp_t is not None and it % 4 == 1 and excess.sum() > 0:
        j = int(rng.choice(tb.J, p=excess / excess.sum()))
        table, mass, offsets, _ = lp_t
        c = int(lp[0][j]) if lp is not None else 0
        lo, hi = offsets[c], offsets[c + 1]
        if hi > lo:
            k_ = lo + int(rng.choice(hi - lo, p=mass[lo:hi] / mass[lo:hi].sum()))
            target_opt = Option(*(int(v) for v in table[k_, 1:7]))
    elif it % 2 and reduced.sum() > 0:
        j = int(rng.choice(tb.J, p=reduced / reduced.sum()))
        target_opt = mv.target.get(j)
    if target_opt is not None:
        # targeted: a job far from its priced best (or its LP columns), with the jobs holding those slots
        opt = target_opt
        if opt[0] < 0 or opt == ch.get(j):
            return [], None
        r, h = opt[0], opt[1]
        a, b = opt[2], max(opt[2] + opt[3], opt[4] + opt[5])
        over = np.flatnonzero((ch.r == r) & (ch.s1 < b) & (_end(ch) > a))
        over = over[over != j]
        pool = np.concatenate((rng.permutation(over[ch.h[over] == h]), rng.permutation(over[ch.h[over] != h])))
        k = int(rng.integers(mv.size // 2, mv.size + 1))
        return [j, *(int(x) for x in pool[:k])], (j, opt)
    # window: the jobs running in one region during a few slots
    r = int(rng.choice(tb.R, p=mv.region_p))
    a = int(rng.integers(0, max(1, tb.T - 1)))
    w = int(rng.integers(2, 17))
    on = np.flatnonzero((ch.r == r) & (ch.s1 < a + w) & (_end(ch) > a))
    k = int(rng.integers(mv.size // 2, mv.size + 1))
    return [int(x) for x in rng.permutation(on)[:k]], None


def _move(mv: _Moves, free: list[int], first: tuple[int, Option] | None, temp: float) -> float | None:
    """Take ``free`` out and put them back (``first`` at its option first, the rest biggest first with noise, each
    at its cheapest option that fits); the change in objective when accepted, else None with the plan restored."""
    tb, ch, res, rng, cost = mv.tb, mv.ch, mv.res, mv.rng, mv.cost
    old = [ch.get(j) for j in free]
    before = float(cost[free].sum())
    for j in free:
        res.apply(tb, ch, j, +1)
        ch.r[j] = -1
    placed: list[int] = []
    after = 0.0
    rest = free
    if first is not None and fits_option(tb, res, first[0], first[1]):
        ch.set(first[0], first[1])
        res.apply(tb, ch, first[0], -1)
        placed.append(first[0])
        after += single_objective(tb, first[0], first[1])
        rest = free[1:]
    keys = mv.size_key[rest] * np.exp(rng.normal(0.0, 0.5, len(rest)))
    ok = True
    for j_ in np.asarray(rest)[np.argsort(-keys)]:
        j = int(j_)
        found = mv.scan.best(j, res, mv.cand.pairs(j) if mv.cand is not None else None)
        if found is None:
            ok = False
            break
        ch.set(j, found[2])
        res.apply(tb, ch, j, -1)
        placed.append(j)
        after += found[1]
        if after >= before + 5.0 * temp:
            ok = False
            break
    delta = after - before
    if ok and (delta < -1e-12 or rng.random() < np.exp(-max(delta, 0.0) / temp)):
        for j in placed:
            cost[j] = single_objective(tb, j, ch.get(j))
        return delta
    for j in placed:
        res.apply(tb, ch, j, +1)
        ch.r[j] = -1
    for j, o in zip(free, old, strict=True):
        ch.set(j, o)
        res.apply(tb, ch, j, -1)
    return None


def _lp_targets(tb: Tables, cls: np.ndarray, primal: np.ndarray):
    """LP columns grouped by class: ``(table, mass, offsets per class, cheapest LP objective per job row)``."""
    table = primal[:, :7].astype(np.int64)
    mass = primal[:, 7].astype(float)
    s1, l1, s2, l2 = table[:, 3], table[:, 4], table[:, 5], table[:, 6]
    real = (l2 == 0) | (s2 >= s1 + l1 + 1)  # runnable columns only
    table, mass = table[real], mass[real]
    order = np.argsort(table[:, 0], kind="stable")
    table, mass = table[order], mass[order]
    n_cls = int(cls.max(initial=-1)) + 1
    offsets = np.searchsorted(table[:, 0], np.arange(n_cls + 1))
    low = np.full(tb.J, np.inf)
    if len(table):
        rep = np.zeros(n_cls, dtype=np.int64)
        rep[cls] = np.arange(tb.J)
        obj = option_objective(tb, Choice(*(table[:, k] for k in range(1, 7))), rows=rep[table[:, 0]])
        per_cls = np.full(n_cls, np.inf)
        np.minimum.at(per_cls, table[:, 0], obj)
        low = per_cls[cls]
    return table, mass, offsets, low

