"""Job state changes, one event each: the unconditional one (:func:`set_state`) for the owner of the row, and
the conditional one (:func:`move_job`) for dispatch, which must never overwrite a cancel the API committed meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from app.db import is_postgresql, utcnow
from app.enums import TERMINAL_JOB_STATES, JobState
from app.models import Job, JobEvent


def set_state(session: Session, job: Job, state: JobState, message: str = "", *, at: datetime | None = None) -> None:
    job.state = state
    job.state_reason = message or None
    session.add(JobEvent(job_id=job.id, at=at or utcnow(), state=state.value, message=message))


def reread_job(session: Session, job: Job, *, lock: bool = False) -> Job:
    """``job`` as committed now, not as this session first read it: the API may have cancelled it meanwhile.

    With ``lock`` on PostgreSQL the row stays locked until the caller commits, so a cancel arriving now waits
    for this decision and is applied after it instead of being overwritten by it.
    """
    session.refresh(job, with_for_update=True if lock and is_postgresql(session) else None)
    return job


def move_job(
    session: Session, job: Job, state: JobState, message: str, *, at: datetime,
    only_from: Iterable[JobState] | None = None,
) -> bool:  # fmt: skip
    """Set a job's state, with a job event, unless it is finished (or not in ``only_from``); no commit.

    A conditional UPDATE: a state the API committed after ``job`` was read (a cancel) is never overwritten.

    Returns
    -------
    bool
        True when the job moved.
    """
    allowed = [s for s in (JobState if only_from is None else only_from) if s not in TERMINAL_JOB_STATES]
    won = session.execute(
        update(Job)
        .where(Job.id == job.id, Job.state.in_(allowed))
        .values(state=state, state_reason=message or None)
        .execution_options(synchronize_session=False)
    )
    if won.rowcount != 1:  # type: ignore[attr-defined]
        session.expire(job, ["state", "state_reason"])
        return False
    set_committed_value(job, "state", state)
    set_committed_value(job, "state_reason", message or None)
    session.add(JobEvent(job_id=job.id, at=at, state=state.value, message=message))
    return True
