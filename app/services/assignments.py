"""The floor under planning, dispatch and the dashboard: what the assignments of plans hold.

Every service that asks "which plan is current", "when does this assignment run", "how much power does it draw",
"which capacity is already taken" or "which slots does this interval cover" asks here, so each question has one
answer. Nothing in this module imports another service.

Power of an assignment: one formula, :func:`assignment_power_kw` = planned facility energy / running hours. The
optimizer computes an assignment's energy as GPUs x profile power per GPU x the region's PUE x running hours
(``optimizer.check``), so the quotient is the facility power the plan placed the work with. It is preferred over
recomputing GPUs x profile power x PUE from today's profiles because capacity already given to work must stay what
the plan that gave it assumed (a profile re-measured since would otherwise move the power budget of work that is
already running), and because it needs only the assignment's own columns (the dashboard reads plain rows).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from app.enums import ACTIVE_RUN_STATES, JobState
from app.models import Assignment, Job, Plan, Run

#: Job states whose work holds capacity: dispatched, running, or paused between the chunks of its assignment.
HOLDING_STATES = (JobState.DISPATCHING, JobState.SUBMITTED, JobState.RUNNING, JobState.PAUSED)

Interval = tuple[datetime, datetime]


class Placed(Protocol):
    """An assignment, or a row holding its ``start_at``, ``end_at``, ``chunks`` and ``energy_kwh`` columns."""

    start_at: datetime
    end_at: datetime
    chunks: Any
    energy_kwh: float


def running_intervals(a: Placed) -> list[Interval]:
    """The intervals an assignment (or a row with its columns) runs in: its chunks, else [start, end)."""
    if a.chunks:
        return [(datetime.fromisoformat(s), datetime.fromisoformat(e)) for s, e in a.chunks]
    return [(a.start_at, a.end_at)]


def running_hours(a: Placed) -> float:
    """Hours an assignment runs, its chunks summed [h]."""
    return sum((e - s).total_seconds() for s, e in running_intervals(a)) / 3600.0


def assignment_power_kw(a: Placed) -> float:
    """Facility power of an assignment while it runs [kW] = planned energy / running hours (module docstring)."""
    hours = running_hours(a)
    return a.energy_kwh / hours if hours > 0 else 0.0


def slot_index(start: datetime, slot_minutes: int, at: datetime, *, up: bool) -> int:
    """The slot boundary at or after (``up``) or at or before ``at``, counted from ``start`` [slots]."""
    minutes = (at - start).total_seconds() / 60.0
    return math.ceil(minutes / slot_minutes - 1e-9) if up else math.floor(minutes / slot_minutes + 1e-9)


def slots_of(first: datetime, last: datetime, *, start: datetime, slot_minutes: int, n_slots: int) -> range:
    """Indices of the slots (of ``slot_minutes`` from ``start``, ``n_slots`` of them) that [first, last) touches."""
    lo = max(0, slot_index(start, slot_minutes, first, up=False))
    hi = min(n_slots, slot_index(start, slot_minutes, last, up=True))
    return range(lo, hi)


def current_plan(session: Session) -> Plan | None:
    """The plan marked current (the newest if several are), or None before the first good plan."""
    return session.scalar(select(Plan).where(Plan.is_current.is_(True)).order_by(Plan.id.desc()).limit(1))


def current_plan_id(session: Session) -> int | None:
    """Id of :func:`current_plan` without loading the row."""
    return session.scalar(select(Plan.id).where(Plan.is_current.is_(True)).order_by(Plan.id.desc()).limit(1))


def next_chunk(session: Session, job_id: int) -> tuple[Assignment, int] | None:
    """A paused job's assignment and the index of its chunk to run next, from its latest (chunk) run."""
    last = session.scalar(select(Run).where(Run.job_id == job_id).order_by(Run.id.desc()).limit(1))
    if last is None or last.chunk_index is None or last.assignment_id is None:
        return None
    assignment = session.get(Assignment, last.assignment_id)
    return None if assignment is None else (assignment, last.chunk_index + 1)


def held_intervals(session: Session, now_slot_end: datetime) -> list[tuple[Assignment, list[Interval]]]:
    """Dispatched work and the intervals it still holds, from the assignments its runs execute.

    A job leaves the open set once dispatched, so later plans hold no assignment for it: its capacity comes from
    the assignment its run records, whichever plan that came from. An active run holds the rest of its
    assignment (from its chunk on, for a chunk run), and at least until ``now_slot_end`` when it runs late; a
    paused job holds the chunks still to come.
    """
    out: list[tuple[Assignment, list[Interval]]] = []
    opts = (selectinload(Assignment.job), selectinload(Assignment.region), selectinload(Assignment.hardware_type))
    active = session.execute(
        select(Run.chunk_index, Assignment).join(Assignment, Assignment.id == Run.assignment_id)
        .join(Job, Job.id == Run.job_id)
        .where(Run.state.in_(ACTIVE_RUN_STATES), Job.state.in_(HOLDING_STATES)).options(*opts)
    ).all()
    for chunk_index, a in active:
        rest = running_intervals(a)[chunk_index or 0 :]
        if rest:
            rest[0] = (rest[0][0], max(rest[0][1], now_slot_end))  # still going past its planned end
        out.append((a, rest))
    for job_id in list(session.scalars(select(Job.id).where(Job.state == JobState.PAUSED))):
        following = next_chunk(session, job_id)
        if following is not None:
            then, chunk_index = following
            out.append((then, running_intervals(then)[chunk_index:]))
    return out


def planned_intervals(session: Session) -> list[tuple[Assignment, list[Interval]]]:
    """The current plan's assignments of jobs still waiting to run (state planned), with their intervals."""
    plan_id = current_plan_id(session)
    if plan_id is None:
        return []
    rows = session.scalars(
        select(Assignment).join(Job, Job.id == Assignment.job_id)
        .where(Assignment.plan_id == plan_id, Job.state == JobState.PLANNED)
        .options(selectinload(Assignment.job), selectinload(Assignment.region), selectinload(Assignment.hardware_type))
    )
    return [(a, running_intervals(a)) for a in rows]


def per_slot_use(
    held: list[tuple[Assignment, list[Interval]]], *, start: datetime, slot_minutes: int, n_slots: int,
) -> tuple[dict[tuple[str, str], list[int]], dict[str, list[float]]]:
    """GPUs per (region, hardware) and facility power per region [kW] that ``held`` takes, slot by slot.

    Each interval counts in every slot it touches, wholly: a slot a job uses for a minute is not free for another.
    """
    gpus: dict[tuple[str, str], list[int]] = {}
    power: dict[str, list[float]] = {}
    for a, intervals in held:
        r, h = a.region.code, a.hardware_type.code
        kw, count = assignment_power_kw(a), a.job.gpu_count
        g = gpus.setdefault((r, h), [0] * n_slots)
        p = power.setdefault(r, [0.0] * n_slots)
        for k in _touched(intervals, start=start, slot_minutes=slot_minutes, n_slots=n_slots):
            g[k] += count
            p[k] += kw
    return gpus, power


def _touched(intervals: list[Interval], *, start: datetime, slot_minutes: int, n_slots: int) -> Iterator[int]:
    for first, last in intervals:
        yield from slots_of(first, last, start=start, slot_minutes=slot_minutes, n_slots=n_slots)
