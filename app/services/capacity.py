"""Capacity already held by dispatched work, for the planner: which GPUs and power are not free to plan."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from app.enums import ACTIVE_RUN_STATES, JobState
from app.models import Assignment, Job, Run
from app.services.dispatch_claim import next_chunk
from app.services.overview import running_intervals

#: Job states whose work holds capacity: dispatched, running, or paused between the chunks of its assignment.
HOLDING_STATES = (JobState.DISPATCHING, JobState.SUBMITTED, JobState.RUNNING, JobState.PAUSED)


def held_intervals(session: Session, now_slot_end: datetime) -> list[tuple[Assignment, list[tuple[datetime, datetime]]]]:
    """Dispatched work and the intervals it still holds, from the assignments its runs execute.

    A job leaves the open set once dispatched, so later plans hold no assignment for it: its capacity comes from
    the assignment its run records, whichever plan that came from. An active run holds the rest of its
    assignment (from its chunk on, for a chunk run), and at least until ``now_slot_end`` when it runs late; a
    paused job holds the chunks still to come.
    """
    out: list[tuple[Assignment, list[tuple[datetime, datetime]]]] = []
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
