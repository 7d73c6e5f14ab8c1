"""The time grid: one definition of "now", of slots, and of how a job's real times map onto them.

Planner, dispatch, the submission check and the dashboard all ask :class:`TimeGrid` how a moment maps to a slot, so
they agree on what "now" is and on which slots a job may use:

* slot 0 is the slot that holds ``now`` (``start`` is ``now`` floored to the slot); it is plannable, and work placed
  in it starts at ``now`` (or at its release, if later), not at the next slot boundary;
* a job may start in the slot that holds its earliest start ``max(release, now)``; the run is counted from there,
  so it occupies ``ceil((offset + minutes) / slot_minutes)`` slots where ``offset`` is how far into its slot the
  earliest start lies (:meth:`TimeGrid.slots_needed`). Starting later, at a slot boundary, the run needs
  ``ceil(minutes / slot_minutes)``; the planner keeps the first count for every start (never less room than the run
  needs, at most one slot more than a later start would);
* a job must end by the boundary at or before its deadline (:meth:`TimeGrid.deadline_slot`), so a planned run always
  ends by the deadline in real time.

Durations as they are: the optimizer places whole slots, but what a run uses is computed on its real interval
(:func:`interval_figures`): a 20-second job draws power for 20 seconds, and its cost is its 20 seconds at the price
of the slot it runs in.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np

from optimizer.bound import Choice
from optimizer.problem import ObjectiveKind
from optimizer.tables import Tables, power_mw

#: Slot lengths the grid accepts [min]: 5 to 60 minutes, dividing the hour (so slots align to market hours).
SLOT_MINUTES_CHOICES = tuple(m for m in range(5, 61) if 60 % m == 0)


def check_slot_minutes(slot_minutes: int) -> int:
    """``slot_minutes`` if it is a divisor of 60 from 5 to 60, else ``ValueError`` listing the valid lengths."""
    if slot_minutes not in SLOT_MINUTES_CHOICES:
        valid = ", ".join(str(m) for m in SLOT_MINUTES_CHOICES)
        raise ValueError(f"slot_minutes must divide 60 and lie in 5..60 (one of {valid}), got {slot_minutes!r}")
    return slot_minutes


@dataclass(frozen=True, slots=True)
class TimeGrid:
    """Slots of ``slot_minutes`` from ``start`` (a slot boundary), ``n_slots`` of them, seen at ``now``.

    Parameters
    ----------
    start : datetime
        Start of slot 0, aware UTC, on a boundary of the slot length counted from the hour.
    slot_minutes : int
        Slot length [min]; a divisor of 60.
    n_slots : int
        Horizon [slots].
    now : datetime
        The moment the grid is seen at (aware UTC), inside slot 0 or at its start.
    """

    start: datetime
    slot_minutes: int
    n_slots: int
    now: datetime

    def __post_init__(self) -> None:
        for name in ("start", "now"):
            value = getattr(self, name)
            if value.tzinfo is None or value.utcoffset() != timedelta(0):
                raise ValueError(f"TimeGrid.{name} must be a timezone-aware UTC datetime")
        if self.n_slots <= 0:
            raise ValueError("TimeGrid.n_slots must be positive")
        if not self.start <= self.now < self.slot_start(1):
            raise ValueError("TimeGrid.now must lie in slot 0")

    @classmethod
    def at(cls, now: datetime, slot_minutes: int, horizon_minutes: float) -> TimeGrid:
        """The grid seen at ``now``: slot 0 holds ``now``; enough slots to cover ``horizon_minutes`` from ``start``."""
        check_slot_minutes(slot_minutes)
        now = now.astimezone(UTC)
        start = now.replace(minute=now.minute - now.minute % slot_minutes, second=0, microsecond=0)
        n = max(1, math.ceil(horizon_minutes / slot_minutes - 1e-9))
        return cls(start, slot_minutes, n, now)

    @property
    def end(self) -> datetime:
        """End of the last slot."""
        return self.slot_start(self.n_slots)

    def slot_start(self, slot: int) -> datetime:
        """Start of ``slot`` (may lie outside the horizon)."""
        return self.start + timedelta(minutes=self.slot_minutes * slot)

    def slot_starts(self) -> list[datetime]:
        """Start of every slot of the horizon."""
        return [self.slot_start(k) for k in range(self.n_slots)]

    def minutes_from_start(self, when: datetime) -> float:
        """Minutes from ``start`` to ``when`` (aware) [min]."""
        if when.tzinfo is None:
            raise ValueError("TimeGrid needs timezone-aware datetimes")
        return (when - self.start).total_seconds() / 60.0

    def slot_of(self, when: datetime) -> int:
        """The slot holding ``when`` (floor; may lie outside the horizon)."""
        return math.floor(self.minutes_from_start(when) / self.slot_minutes + 1e-9)

    def earliest_start(self, release: datetime) -> datetime:
        """When a job released at ``release`` can start at the soonest: not before ``now``."""
        return max(release, self.now)

    def release_slot(self, release: datetime) -> int:
        """The slot a job released at ``release`` may start in first: the one holding its earliest start."""
        return self.slot_of(self.earliest_start(release))

    def release_offset_minutes(self, release: datetime) -> float:
        """How far into its release slot the earliest start lies [min] (0 at a boundary)."""
        earliest = self.earliest_start(release)
        return max(0.0, self.minutes_from_start(earliest) - self.slot_minutes * self.slot_of(earliest))

    def slots_needed(self, minutes: float, release: datetime) -> int:
        """Slots a run of ``minutes`` occupies when counted from its earliest start (at least one) [slots]."""
        offset = self.release_offset_minutes(release)
        return max(1, math.ceil((offset + minutes) / self.slot_minutes - 1e-9))

    def deadline_slot(self, deadline: datetime) -> int:
        """The boundary at or before ``deadline`` [slot]: a run ending there ends by the deadline."""
        return self.slot_of(deadline)

    def earliest_deadline(self, minutes: float, release: datetime) -> datetime:
        """The earliest deadline at which a run of ``minutes`` released at ``release`` fits the grid's rule."""
        return self.slot_start(self.release_slot(release) + self.slots_needed(minutes, release))

    def start_at(self, slot: int, release: datetime) -> datetime:
        """When a run planned to start in ``slot`` starts: the slot's start, or the job's earliest start if later."""
        return max(self.slot_start(slot), self.earliest_start(release))


def run_intervals(
    grid: TimeGrid, chunks: Sequence[tuple[int, int]], release: datetime, minutes: float, overhead_minutes: float = 0.0,
    after_minutes: float = 0.0,
) -> list[tuple[datetime, datetime]]:
    """The real running intervals of a run the planner placed on slot ``chunks`` (``[start, end)`` slots).

    The run starts at :meth:`TimeGrid.start_at` of its first slot (now, or its release, when that lies inside the
    slot), ``after_minutes`` later when it follows others on the same GPUs (``optimizer.bundle``); a single run lasts
    its ``minutes``; chunks keep their slot boundaries, the last one ending when the work and ``overhead_minutes`` per
    resume are done.
    """
    first = grid.start_at(chunks[0][0], release) + timedelta(minutes=after_minutes)
    if len(chunks) == 1:
        return [(first, first + timedelta(minutes=minutes))]
    out: list[tuple[datetime, datetime]] = []
    left = minutes + overhead_minutes * (len(chunks) - 1)
    for i, (s, e) in enumerate(chunks):
        a = first if i == 0 else grid.slot_start(s)
        b = grid.slot_start(e)
        if i == len(chunks) - 1 and left > 0:
            b = min(b, a + timedelta(minutes=left))
        left -= (b - a).total_seconds() / 60.0
        out.append((a, b))
    return out


@dataclass(frozen=True, slots=True)
class RunFigures:
    """What a run uses [kWh], costs [currency] and emits [kgCO2eq] over its real intervals."""

    energy_kwh: float
    cost: float
    carbon_kg: float


def interval_figures(
    grid: TimeGrid,
    power_kw: float,
    intervals: Sequence[tuple[datetime, datetime]],
    price_per_mwh: Sequence[float],
    carbon_g_per_kwh: Sequence[float],
    fx: float = 1.0,
) -> RunFigures:
    """Energy, cost and carbon of drawing ``power_kw`` over ``intervals``, each slot's share at that slot's curves.

    Parameters
    ----------
    grid : TimeGrid
        The grid the curves are on.
    power_kw : float
        Facility power while running [kW].
    intervals : sequence of (datetime, datetime)
        The real running intervals [start, end).
    price_per_mwh, carbon_g_per_kwh : sequence of float
        Per slot [region currency/MWh], [gCO2eq/kWh]; a missing value (NaN), or a slot outside the horizon, counts 0
        for its figure (the energy counts whole).
    fx : float
        Units of the reported currency per unit of the region's [-].
    """
    energy = cost = carbon = 0.0
    for first, last in intervals:
        a, b = grid.minutes_from_start(first), grid.minutes_from_start(last)
        if b <= a:
            continue
        energy += power_kw * (b - a) / 60.0
        k_lo = max(0, math.floor(a / grid.slot_minutes))
        k_hi = min(grid.n_slots, math.ceil(b / grid.slot_minutes))
        for k in range(k_lo, k_hi):
            lo, hi = max(a, k * grid.slot_minutes), min(b, (k + 1) * grid.slot_minutes)
            if hi <= lo:
                continue
            kwh = power_kw * (hi - lo) / 60.0
            price, intensity = float(price_per_mwh[k]), float(carbon_g_per_kwh[k])
            cost += kwh * price * fx / 1000.0 if math.isfinite(price) else 0.0
            carbon += kwh * intensity / 1000.0 if math.isfinite(intensity) and intensity >= 0 else 0.0
    return RunFigures(energy, cost, carbon)


def prefer_earliest(tb: Tables, ch: Choice, *, until: float = math.inf) -> Choice:
    """``ch`` with every single run moved to its earliest start that costs no more and fits beside the others.

    Hourly prices held over the quarter-hours of a 15-minute grid make equal-cost starts common, and which of them a
    solver returns is arbitrary; the earliest serves the user (work that is cheapest now starts now) and leaves the
    later slots free. Runs are taken earliest first, each on its own (region, hardware), over starts from its release
    with the same objective (and, under a cost cap, no higher cost) and room for its GPUs and power beside every other
    run. The objective never rises (a tie is equal within 1e-9 relative). Stops at ``until`` (``time.perf_counter``).
    """
    ch = ch.copy()
    rows = np.flatnonzero((ch.r >= 0) & (ch.l2 == 0) & (ch.s1 > tb.rel))
    if len(rows) == 0:
        return ch
    T = tb.T
    use_g = np.zeros((tb.R, tb.H, T + 1), dtype=np.int64)
    use_kw = np.zeros((tb.R, T + 1), dtype=np.int64)
    placed = np.flatnonzero(ch.r >= 0)
    pw = np.zeros(tb.J, dtype=np.int64)
    pw[placed] = power_mw(tb.g[placed] * tb.pkw[placed, ch.h[placed]] * tb.pue[ch.r[placed]])
    for starts, lengths in ((ch.s1, ch.l1), (ch.s2, ch.l2)):
        on = placed[lengths[placed] > 0]  # difference arrays: +at the start, -at the end
        ends = starts[on] + lengths[on]
        np.add.at(use_g, (ch.r[on], ch.h[on], starts[on]), tb.g[on])
        np.add.at(use_g, (ch.r[on], ch.h[on], ends), -tb.g[on])
        np.add.at(use_kw, (ch.r[on], starts[on]), pw[on])
        np.add.at(use_kw, (ch.r[on], ends), -pw[on])
    use_g, use_kw = np.cumsum(use_g, axis=-1)[..., :T], np.cumsum(use_kw, axis=-1)[..., :T]
    kw_cap = tb.kw_cap_mw()
    obj = tb.problem.objective
    costs = [_cum(np.where(tb.valid, tb.weights(), 0.0))]
    if obj.kind is ObjectiveKind.CARBON_WITH_COST_CAP:
        costs.append(_cum(tb.known_price()))
    invalid = _cum((~tb.valid).astype(float))
    for row in rows[np.argsort(ch.s1[rows], kind="stable")]:
        if time.perf_counter() > until:
            break
        r, h, s, ln = int(ch.r[row]), int(ch.h[row]), int(ch.s1[row]), int(ch.l1[row])
        lo = int(tb.rel[row])
        g, p = int(tb.g[row]), int(pw[row])
        free_g = tb.cap[r, h, lo : s + ln] - use_g[r, h, lo : s + ln]
        free_kw = kw_cap[r, lo : s + ln] - use_kw[r, lo : s + ln]
        free_g[s - lo :] += g  # the run's own use is free for its move
        free_kw[s - lo :] += p
        fits = (_window_min(free_g, ln) >= g) & (_window_min(free_kw, ln) >= p)
        fits = fits[: s - lo] & (invalid[r, lo + ln : s + ln] - invalid[r, lo:s] == 0)
        for cum in costs:
            here = cum[r, s + ln] - cum[r, s]
            fits &= cum[r, lo + ln : s + ln] - cum[r, lo:s] <= here + 1e-9 * max(1.0, abs(here))
        hit = np.flatnonzero(fits)
        if len(hit) == 0:
            continue
        t = lo + int(hit[0])
        use_g[r, h, s : s + ln] -= g
        use_kw[r, s : s + ln] -= p
        use_g[r, h, t : t + ln] += g
        use_kw[r, t : t + ln] += p
        ch.s1[row] = t
    return ch


def _cum(w: np.ndarray) -> np.ndarray:
    """Prefix sums of ``w`` along slots with a leading zero."""
    return np.concatenate((np.zeros((w.shape[0], 1)), np.cumsum(w, axis=-1)), axis=-1)


def _window_min(x: np.ndarray, length: int) -> np.ndarray:
    """``out[s] = min(x[s:s+length])``."""
    if len(x) < length:
        return np.zeros(0, dtype=x.dtype)
    return np.lib.stride_tricks.sliding_window_view(x, length).min(axis=-1)
