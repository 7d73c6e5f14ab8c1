"""Primal heuristics: place jobs one by one at their best option that still fits, then improve locally.

A job's options are scanned with numpy per hardware type (all regions and starts at once); a run is
feasible if every slot it covers still has the GPUs and the power left and has valid curves. The score
of an option is its objective plus, optionally, Lagrangian prices of the capacity it uses, so jobs
placed early avoid slots that later jobs need.
"""

from __future__ import annotations

import time

import numpy as np

from optimizer.bound import Choice, Multipliers, Option, cumulative
from optimizer.tables import Tables, power_mw


class Residual:
    """GPUs and power left per slot."""

    def __init__(self, tb: Tables) -> None:
        self.gpu = tb.cap.astype(np.int64).copy()
        self.kw = tb.kw_cap_mw()  # integer mW, as in the CP-SAT model

    def copy(self) -> Residual:
        out = Residual.__new__(Residual)
        out.gpu, out.kw = self.gpu.copy(), self.kw.copy()
        return out

    def apply(self, tb: Tables, ch: Choice, row: int, sign: int) -> None:
        """Take (``sign=-1``) or give back (``sign=+1``) the capacity of ``row``'s option."""
        r, h = int(ch.r[row]), int(ch.h[row])
        if r < 0:
            return
        g = int(tb.g[row])
        p = int(power_mw(tb.power_kw(row, r, h)))
        for s, ln in ((ch.s1[row], ch.l1[row]), (ch.s2[row], ch.l2[row])):
            if ln > 0:
                self.gpu[r, h, s : s + ln] += sign * g
                self.kw[r, s : s + ln] += sign * p


class Scanner:
    """Finds a job's best feasible option against the residual capacity.

    The objective and prices of a run depend on its job only through a factor (power, GPUs), so their sums over
    every window of a length are computed once per length and shared by every job of that length
    (``_windows``); a job's scan is then a slice of those tables and one pass over the residual capacity.
    """

    def __init__(self, tb: Tables, m: Multipliers | None = None, nu: float = 0.0) -> None:
        self.tb = tb
        w = tb.weights(nu)
        self.cum_obj = cumulative(tb.slot_h * w)  # objective per kW over a run
        self.cum_bad = cumulative((~tb.valid).astype(float))
        self.cum_mu = cumulative(m.mu) if m is not None else None
        self.cum_lam = cumulative(m.lam) if m is not None else None
        self._win: dict[int, tuple] = {}

    def _windows(self, length: int) -> tuple:
        """Sums over the run ``s .. s + length - 1`` for every start ``s``: objective per kW ``(R, S)``, a slot
        without valid curves ``(R, S)`` bool, power price ``(R, S)`` and GPU price ``(R, H, S)`` (None without
        multipliers)."""
        got = self._win.get(length)
        if got is None:
            n = self.tb.T + 1 - length
            obj = self.cum_obj[:, length:] - self.cum_obj[:, :n]
            bad = (self.cum_bad[:, length:] - self.cum_bad[:, :n]) > 0
            mu = lam = None
            if self.cum_mu is not None and self.cum_lam is not None:
                mu = self.cum_mu[:, length:] - self.cum_mu[:, :n]
                lam = self.cum_lam[:, :, length:] - self.cum_lam[:, :, :n]
            got = self._win[length] = (obj, bad, mu, lam)
        return got

    def _score(self, row: int, rr: np.ndarray, h: int, first: int, last: int, length: int):
        """Objective, score, invalid-curve flag ``(len(rr), last - first + 1)`` and power ``(len(rr), 1)`` [kW]
        of the runs of ``length`` slots starting at ``first .. last``."""
        tb = self.tb
        obj_w, bad_w, mu_w, lam_w = self._windows(length)
        power = tb.g[row] * tb.pkw[row, h] * tb.pue[rr][:, None]
        obj = power * obj_w[rr, first : last + 1]
        score = obj
        if mu_w is not None and lam_w is not None:
            score = obj + power * mu_w[rr, first : last + 1]
            score = score + tb.g[row] * lam_w[rr, h, first : last + 1]
        return obj, score, bad_w[rr, first : last + 1], power

    def _fits(
        self, res: Residual, row: int, rr: np.ndarray, h: int, first: int, last: int, length: int, power
    ):
        # a run fits when none of its slots lacks GPUs or power: count short slots with a prefix sum
        end = last + length
        short = (res.gpu[rr, h, first:end] < self.tb.g[row]) | (res.kw[rr, first:end] < power_mw(power))
        count = np.zeros((len(rr), end - first + 1), dtype=np.int64)
        np.cumsum(short, axis=1, out=count[:, 1:])
        return count[:, length:] == count[:, : last - first + 1]

    def best(
        self, row: int, res: Residual, pairs: list[tuple[int, int, float]] | None = None
    ) -> tuple[float, float, Option] | None:
        """``(score, objective, (r, h, s1, l1, s2, l2))`` of the best feasible option, or None.

        ``pairs``, when given, lists ``(region, hardware, lower bound of its score)`` in increasing bound
        order; the scan stops at the first pair whose bound cannot beat the best found (same answer, less work).
        """
        tb = self.tb
        found: tuple[float, float, Option] | None = None
        if pairs is None:
            groups = [
                (np.flatnonzero(tb.elig[row, :, h]), int(h)) for h in np.flatnonzero(tb.elig[row].any(axis=0))
            ]
            for rr, h in groups:
                found = self._scan(row, res, rr, h, found)
            return found
        for r, h, lower in pairs:
            if found is not None and lower >= found[0]:
                break
            found = self._scan(row, res, np.array([r]), h, found)
        return found

    def _scan(self, row, res, rr, h, found):
        tb = self.tb
        rel, dl = int(tb.rel[row]), int(tb.dl[row])
        length = int(tb.dur[row, h])
        last = dl - length
        obj, score, bad, power = self._score(row, rr, h, rel, last, length)
        ok = self._fits(res, row, rr, h, rel, last, length, power) & ~bad
        masked = np.where(ok, score, np.inf)
        k = int(np.argmin(masked))
        i, j = divmod(k, masked.shape[1])
        if np.isfinite(masked[i, j]) and (found is None or masked[i, j] < found[0]):
            found = (float(masked[i, j]), float(obj[i, j]), Option(int(rr[i]), h, rel + j, length, 0, 0))
        if tb.intr[row]:
            two = self._two_chunks(row, res, rr, h, rel, dl, length)
            if two is not None and (found is None or two[0] < found[0]):
                found = two
        return found

    def _two_chunks(self, row, res, rr, h, rel, dl, length):
        tb = self.tb
        a = -(-length // 2)
        b = length - a + int(tb.ovh[row])
        if length - a <= 0 or min(a, b) < tb.min_chunk[row] or dl - rel < a + b + 1:
            return None
        # chunk a starts at rel .. dl - b - a - 1 (it ends at least one slot before chunk b starts); b at
        # rel + a + 1 .. dl - b
        a_last, b_first, b_last = dl - b - a - 1, rel + a + 1, dl - b
        obj_a, sc_a, bad_a, power = self._score(row, rr, h, rel, a_last, a)
        obj_b, sc_b, bad_b, _ = self._score(row, rr, h, b_first, b_last, b)
        ok_a = self._fits(res, row, rr, h, rel, a_last, a, power) & ~bad_a
        ok_b = self._fits(res, row, rr, h, b_first, b_last, b, power) & ~bad_b
        ma = np.where(ok_a, sc_a, np.inf)
        mb = np.where(ok_b, sc_b, np.inf)
        # chunk b's k-th start is chunk a's k-th + a + 1, so chunk a at index <= k pairs with chunk b at index k
        pref = np.minimum.accumulate(ma, axis=1)
        total = pref + mb
        k = int(np.argmin(total))
        i, jb = divmod(k, total.shape[1])
        if not np.isfinite(total[i, jb]):
            return None
        ja = int(np.argmin(ma[i, : jb + 1]))
        objective = float(obj_a[i, ja] + obj_b[i, jb])
        return float(total[i, jb]), objective, Option(int(rr[i]), h, rel + ja, a, b_first + jb, b)


def option_objective(
    tb: Tables,
    ch: Choice,
    nu: float = 0.0,
    *,
    rows: np.ndarray | None = None,
    weights: np.ndarray | None = None,
) -> np.ndarray:
    """Objective of each option of ``ch`` [objective units]; NaN where ``r == -1``.

    ``rows[k]`` is the job row of option ``k`` (default: option ``k`` belongs to row ``k``); ``weights``
    replaces the objective per kWh ``(R, T)`` (e.g. the price, to get costs).
    """
    w = tb.weights(nu) if weights is None else weights
    cum = cumulative(tb.slot_h * w)
    out = np.full(len(ch.r), np.nan)
    on = np.flatnonzero(ch.r >= 0)
    job = on if rows is None else np.asarray(rows)[on]
    r, h = ch.r[on], ch.h[on]
    power = tb.g[job] * tb.pkw[job, h] * tb.pue[r]
    s1, l1, s2, l2 = ch.s1[on], ch.l1[on], ch.s2[on], ch.l2[on]
    part2 = np.where(l2 > 0, cum[r, np.minimum(s2 + l2, tb.T)] - cum[r, s2], 0.0)
    out[on] = power * (cum[r, s1 + l1] - cum[r, s1] + part2)
    return out


def single_objective(tb: Tables, row: int, opt: Option) -> float:
    """Objective of job ``row`` at option ``opt`` [objective units]."""
    single = Choice(*(np.array([v]) for v in opt))
    return float(option_objective(tb, single, rows=np.array([row]))[0])


def penalised_objective(tb: Tables, ch: Choice, nu: float = 0.0) -> float:
    """Objective of ``ch`` plus the penalty of every row left out [objective units]."""
    obj = option_objective(tb, ch, nu)
    return float(np.nansum(obj) + tb.penalty[ch.r < 0].sum())


def greedy_order(tb: Tables) -> np.ndarray:
    """Rows by priority (high first), slack (least first), then size (largest first)."""
    min_dur = np.where(tb.dur > 0, tb.dur, 10**9).min(axis=1) if tb.J else np.zeros(0)
    slack = tb.dl - tb.rel - min_dur
    size = tb.g * min_dur
    return np.lexsort((-size, slack, -tb.prio))


def size_order(tb: Tables) -> np.ndarray:
    """Rows by priority (high first), then GPU-slots (largest first), then slack (least first)."""
    min_dur = np.where(tb.dur > 0, tb.dur, 10**9).min(axis=1) if tb.J else np.zeros(0)
    slack = tb.dl - tb.rel - min_dur
    return np.lexsort((slack, -(tb.g * min_dur), -tb.prio))


def place(
    tb: Tables,
    order: np.ndarray,
    *,
    m: Multipliers | None = None,
    nu: float = 0.0,
) -> Choice:
    """Place rows in ``order`` at their best feasible option (score = objective + prices of ``m``).

    Rows that fit nowhere are left out (``r == -1``).
    """
    ch = Choice.empty(tb.J)
    res = Residual(tb)
    scan = Scanner(tb, m, nu)
    for row in order:
        found = scan.best(int(row), res)
        if found is None:
            continue
        ch.set(row, found[2])
        res.apply(tb, ch, int(row), -1)
    return ch


def improve(tb: Tables, ch: Choice, *, nu: float = 0.0, time_limit_s: float = 5.0, seed: int = 0) -> Choice:
    """Local search: take each job out and put it back at its best feasible option; retry left-out jobs.

    Stops after a pass without improvement or at ``time_limit_s`` [s]. Never makes the objective worse.
    """
    t0 = time.perf_counter()
    ch = ch.copy()
    res = Residual(tb)
    for busy in np.flatnonzero(ch.r >= 0):
        res.apply(tb, ch, int(busy), -1)
    scan = Scanner(tb, None, nu)
    current = option_objective(tb, ch, nu)
    del seed  # deterministic: the visiting order depends on costs only
    while time.perf_counter() - t0 < time_limit_s:
        changed = 0.0
        # left-out jobs first, then the most expensive runs
        order = np.concatenate((np.flatnonzero(ch.r < 0), np.argsort(-np.nan_to_num(current, nan=-1.0))))
        for row_ in order:
            if time.perf_counter() - t0 > time_limit_s:
                break
            row = int(row_)
            old = ch.get(row)
            res.apply(tb, ch, row, +1)
            found = scan.best(row, res)
            was = current[row] if ch.r[row] >= 0 else tb.penalty[row]
            if found is not None and found[1] < was - 1e-9 * max(1.0, abs(was)):
                ch.set(row, found[2])
                current[row] = found[1]
                changed += was - found[1]
            else:
                ch.set(row, old)
            res.apply(tb, ch, row, -1)
        if changed <= 1e-9:
            break
    return ch
