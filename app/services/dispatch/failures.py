"""What happens to a job whose run failed or was lost: re-planned elsewhere, or failed for good.

Exclusion rule (kept deliberately simple, and visible to the user): the job's own ``allowed_regions`` is
narrowed to leave out the region of the failed run when another allowed region can still hold the job;
otherwise its ``allowed_hardware`` is narrowed to leave out the failed hardware type. The planner
(``app.services.planning.plan_fleet``) already honours both fields, so no other interface is needed. The job
goes back to ``pending`` with ``state_reason`` (and a job event) saying what was excluded and why, and the
caller triggers a re-plan. After ``MAX_ATTEMPTS`` failed or lost runs, or when nothing is left to exclude, the job
fails; the runs of an interruptible job's chunks that succeeded use none of that budget.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.enums import TERMINAL_JOB_STATES, JobState, RunState
from app.models import Assignment, HardwareType, Job, Region, Run
from app.services.fleet import snapshot
from app.services.job_states import move_job

#: Failed or lost runs a job may have before it fails for good [count].
MAX_ATTEMPTS = 3


def failed_placement(session: Session, run: Run) -> tuple[str | None, str | None]:
    """(region code, hardware code) of a run, from its assignment, else its cluster and its own hardware."""
    region = hardware = None
    assignment = session.get(Assignment, run.assignment_id) if run.assignment_id else None
    if assignment is not None:
        region = session.scalar(select(Region.code).where(Region.id == assignment.region_id))
        hardware = session.scalar(select(HardwareType.code).where(HardwareType.id == assignment.hardware_type_id))
    if region is None and run.cluster is not None:
        region = run.cluster.region.code
    return region, hardware or run.hardware_code


def requeue_after_failure(session: Session, run: Run, reason: str, *, now: datetime, state: RunState) -> bool:
    """Close ``run`` in ``state`` (failed or lost) and send its job back to planning; no commit.

    Returns
    -------
    bool
        True when the job is ``pending`` again and a re-plan should be triggered.
    """
    run.state, run.finished_at = state, run.finished_at or now
    run.error = reason
    job = run.job
    if job.state in TERMINAL_JOB_STATES:
        return False  # cancelled (or finished) meanwhile: nothing to re-plan
    attempts = session.scalar(  # this run included (flushed): only failures count, not the chunks that succeeded
        select(func.count()).select_from(Run).where(Run.job_id == job.id, Run.state.in_((RunState.FAILED, RunState.LOST)))
    ) or 0  # fmt: skip
    if attempts >= MAX_ATTEMPTS:
        move_job(session, job, JobState.FAILED,
                 f"run {run.run_key} {state.value}: {reason}; gave up after {attempts} failed runs", at=now)  # fmt: skip
        return False
    region, hardware = failed_placement(session, run)
    exclusion = _exclusion(session, job, region, hardware)
    if exclusion is None:
        move_job(session, job, JobState.FAILED,
                 f"run {run.run_key} {state.value} on {region}/{hardware}: {reason}; no other region or hardware left",
                 at=now)  # fmt: skip
        return False
    excluded, field, allowed = exclusion
    if not move_job(session, job, JobState.PENDING,
                    f"run {run.run_key} {state.value} on {region}/{hardware}: {reason}; re-planning without {excluded}",
                    at=now):  # fmt: skip
        return False  # cancelled through the API meanwhile: it stays cancelled
    setattr(job, field, allowed)
    return True


def _exclusion(session: Session, job: Job, region: str | None,
               hardware: str | None) -> tuple[str, str, list[str]] | None:  # fmt: skip
    """What to leave out next time: (description, job field, its narrowed value), region preferred; or None."""
    fleet = snapshot(session)
    regions = list(job.allowed_regions or sorted(fleet.regions))
    hw_all = list(job.allowed_hardware or sorted(fleet.hardware))
    if job.durations_minutes:  # explicit durations name the only hardware the job can use
        hw_all = [h for h in hw_all if h in job.durations_minutes]

    def placeable(rs: list[str], hws: list[str]) -> bool:
        return any(fleet.regions[r].inventory.get(h, 0) >= job.gpu_count for r in rs if r in fleet.regions for h in hws)

    other_regions = [r for r in regions if r != region]
    if region is not None and other_regions and placeable(other_regions, hw_all):
        return f"region {region}", "allowed_regions", other_regions
    other_hw = [h for h in hw_all if h != hardware]
    if hardware is not None and other_hw and placeable(regions, other_hw):
        return f"hardware {hardware}", "allowed_hardware", other_hw
    return None
