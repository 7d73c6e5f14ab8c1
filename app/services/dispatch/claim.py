"""Dispatch, the claim half: turn due assignments of the current plan (and due chunks of paused jobs) into runs.

Guards 1 and 3 of :mod:`app.services.dispatch` live here: a due assignment is claimed by a conditional
``UPDATE jobs SET state='dispatching' WHERE state='planned'`` (on PostgreSQL after ``SELECT ... FOR UPDATE SKIP
LOCKED``) and its ``runs`` row, with the run key the runtime will know it by, commits with the claim; a claim that
went stale unsubmitted is taken over. The submit half (:mod:`app.services.dispatch.submit`) sends each run id to its
runtime.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import is_postgresql
from app.enums import ACTIVE_RUN_STATES, JobState, RunState
from app.models import Assignment, Cluster, HardwareType, Job, Region, Run, Tenant
from app.services.assignments import current_plan_id, next_chunk, running_intervals
from app.services.dispatch.failures import requeue_after_failure
from app.services.dispatch.run_keys import new_run_key
from app.services.job_states import set_state
from app.services.tenancy import dispatch_hold
from connectors.registry import accepts_tenant


@dataclass(frozen=True, slots=True)
class TickResult:
    """What one dispatch tick did.

    Attributes
    ----------
    claimed : tuple of int
        Runs created for due assignments (to be submitted).
    recovered : tuple of int
        Runs whose stale claim was taken over (to be submitted again).
    failed_jobs : tuple of int
        Jobs that could not be dispatched (no cluster in the region, a paused job with no chunk to continue) and
        were re-queued or failed; the caller triggers a re-plan.
    """

    claimed: tuple[int, ...] = ()
    recovered: tuple[int, ...] = ()
    failed_jobs: tuple[int, ...] = ()

    @property
    def to_submit(self) -> tuple[int, ...]:
        """Every run id a submit task must be sent for."""
        return self.claimed + self.recovered


def tick(session: Session, settings: Settings, *, now: datetime, worker: str, limit: int = 500) -> TickResult:
    """Claim due assignments and recover stale claims; commits. The caller sends one submit per run id.

    Parameters
    ----------
    now : datetime
        Current time [UTC]. Assignments starting before ``now + dispatch_interval_s`` are due: they are
        submitted one tick ahead with ``begin_at`` = planned start, so the runtime starts them on time.
    worker : str
        Claimant recorded on the runs.
    limit : int
        Most assignments claimed in one tick [count].
    """
    recovered = recover_stale(session, settings, now=now, worker=worker)
    claimed, failed = claim_due(session, settings, now=now, worker=worker, limit=limit)
    return TickResult(claimed=claimed, recovered=recovered, failed_jobs=failed)


def claim_due(
    session: Session, settings: Settings, *, now: datetime, worker: str, limit: int = 500
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Create a ``dispatching`` run for every due assignment of the current plan; commits.

    Returns
    -------
    (run ids, ids of jobs that could not be dispatched)
    """
    due_before = now + timedelta(seconds=settings.dispatch_interval_s)
    # paused jobs resume on the assignment their chunks came from, whatever plan is current
    claimed, failed = _claim_resumable(session, due_before=due_before, now=now, worker=worker, limit=limit)
    plan_id = current_plan_id(session)
    if plan_id is None:
        session.commit()
        return tuple(claimed), tuple(failed)
    q = (
        select(Job, Assignment)
        .join(Assignment, Assignment.job_id == Job.id)
        .where(Assignment.plan_id == plan_id, Job.state == JobState.PLANNED, Assignment.start_at <= due_before)
        .order_by(Assignment.start_at, Assignment.id)
        .limit(limit)
    )
    if is_postgresql(session):
        q = q.with_for_update(of=Job, skip_locked=True)  # a concurrent tick skips the rows this one holds
    seen: set[int] = set()
    for job, assignment in session.execute(q).all():
        if job.id in seen:
            continue  # one run per job, even if a plan holds two assignments for it
        seen.add(job.id)
        won = session.execute(
            update(Job).where(Job.id == job.id, Job.state == JobState.PLANNED).values(state=JobState.DISPATCHING)
        )
        if won.rowcount != 1:  # type: ignore[attr-defined]
            continue  # another tick claimed it first (SQLite path)
        session.refresh(job)
        active = session.scalar(select(Run).where(Run.job_id == job.id, Run.state.in_(ACTIVE_RUN_STATES)).limit(1))
        if active is not None:
            # The job already runs (a re-plan reset its state): keep the job on the run's state, never a twin.
            job.state = JobState(active.state.value)
            continue
        hold = dispatch_hold(session, job, assignment, now=now)
        if hold is not None:
            # its tenant's quota or budget does not cover it now (runs metered since the plan used it up): it waits
            set_state(session, job, JobState.PENDING, hold, at=now)
            failed.append(job.id)
            continue
        run = _new_run(session, job, assignment, now=now, worker=worker, chunk_index=0 if assignment.chunks else None)
        if run is None:
            failed.append(job.id)
            continue
        claimed.append(run.id)
    session.commit()
    return tuple(claimed), tuple(failed)


def _claim_resumable(
    session: Session, *, due_before: datetime, now: datetime, worker: str, limit: int
) -> tuple[list[int], list[int]]:
    """Claim the next chunk of every paused job whose ``resume_at`` is due (no commit).

    Returns
    -------
    (run ids, ids of jobs that could not be dispatched)
    """
    q = (
        select(Job)
        .where(Job.state == JobState.PAUSED, Job.resume_at.is_not(None), Job.resume_at <= due_before)
        .order_by(Job.resume_at, Job.id)
        .limit(limit)
    )
    if is_postgresql(session):
        q = q.with_for_update(skip_locked=True)
    claimed: list[int] = []
    failed: list[int] = []
    for job in list(session.scalars(q)):
        won = session.execute(
            update(Job).where(Job.id == job.id, Job.state == JobState.PAUSED).values(state=JobState.DISPATCHING)
        )
        if won.rowcount != 1:  # type: ignore[attr-defined]
            continue
        session.refresh(job)
        job.resume_at = None
        following = next_chunk(session, job.id)
        if following is None:  # its chunk run or assignment is gone: plan the whole job again (a re-plan is due)
            set_state(session, job, JobState.PENDING, "paused without a chunk to continue", at=now)
            failed.append(job.id)
            continue
        assignment, chunk_index = following
        run = _new_run(session, job, assignment, now=now, worker=worker, chunk_index=chunk_index)
        if run is None:
            failed.append(job.id)
        else:
            claimed.append(run.id)
    return claimed, failed


def _new_run(
    session: Session, job: Job, assignment: Assignment, *, now: datetime, worker: str, chunk_index: int | None = None
) -> Run | None:
    """Add the run for a claimed job (or chunk), or re-queue the job when its region has no usable cluster."""
    hardware = session.get(HardwareType, assignment.hardware_type_id)
    region = session.get(Region, assignment.region_id)
    assert hardware is not None and region is not None
    tenant = session.get(Tenant, job.tenant_id)
    cluster = pick_cluster(session, region.id, tenant.slug if tenant else None)
    attempt = 1 + (session.scalar(select(func.count()).select_from(Run).where(Run.job_id == job.id)) or 0)
    run = Run(
        job_id=job.id, assignment_id=assignment.id, cluster_id=cluster.id if cluster else None, attempt=attempt,
        hardware_type_id=hardware.id,
        run_key=new_run_key(job.id, attempt, hardware.code), state=RunState.DISPATCHING, claimed_by=worker,
        claimed_at=now, chunk_index=chunk_index, created_at=now,
        planned_start_at=running_intervals(assignment)[chunk_index or 0][0],
    )  # fmt: skip
    session.add(run)
    session.flush()
    if cluster is None:
        reason = f"region {region.code} has no enabled cluster for tenant {tenant.slug if tenant else '-'}"
        requeue_after_failure(session, run, reason, now=now, state=RunState.FAILED)
        return None
    part = f"chunk {chunk_index + 1}/{len(assignment.chunks or ())} " if chunk_index is not None else ""
    set_state(
        session, job, JobState.DISPATCHING,
        f"run {run.run_key} ({part}on cluster {cluster.name}, {region.code}/{hardware.code}), "
        f"planned start {run.planned_start_at.isoformat() if run.planned_start_at else '-'}", at=now,
    )  # fmt: skip
    return run


def pick_cluster(session: Session, region_id: int, tenant: str | None = None) -> Cluster | None:
    """The enabled cluster of a region that may run ``tenant``'s jobs: one bound to that tenant first (config
    ``tenant``), else an unbound one that accepts it, the oldest first; never a cluster bound to another tenant, nor an
    unbound one whose connector refuses unbound tenants (a Ray cluster not ``shared_between_tenants``)."""
    q = select(Cluster).where(Cluster.region_id == region_id, Cluster.enabled.is_(True)).order_by(Cluster.id)
    usable = [c for c in session.scalars(q) if accepts_tenant(c.kind, c.config or {}, tenant)]
    return next((c for c in usable if (c.config or {}).get("tenant") == tenant), usable[0] if usable else None)


def recover_stale(session: Session, settings: Settings, *, now: datetime, worker: str) -> tuple[int, ...]:
    """Take over ``dispatching`` runs whose claim is older than ``claim_stale_s`` and unsubmitted; commits."""
    cutoff = now - timedelta(seconds=settings.claim_stale_s)
    stale = session.execute(
        select(Run.id, Run.claimed_at).where(
            Run.state == RunState.DISPATCHING, Run.runtime_job_id.is_(None), Run.claimed_at < cutoff
        )
    ).all()
    taken: list[int] = []
    for run_id, claimed_at in stale:
        won = session.execute(
            update(Run)
            .where(Run.id == run_id, Run.state == RunState.DISPATCHING, Run.claimed_at == claimed_at)
            .values(claimed_at=now, claimed_by=worker)
        )
        if won.rowcount == 1:  # type: ignore[attr-defined]
            taken.append(run_id)
    session.commit()
    return tuple(taken)
