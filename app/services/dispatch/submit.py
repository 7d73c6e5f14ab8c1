"""Dispatch, the submit half: send one claimed run to its cluster's runtime, or give it up safely.

Guard 2 of :mod:`app.services.dispatch` lives here: the run key is stored before anything reaches the runtime, and
a redelivered submit first asks ``connector.find(run_key)`` and adopts the job it already submitted. A submit that
keeps failing is given up only when the runtime can say that it holds no job with that key; otherwise the run waits
in ``dispatching`` for the tick's stale-claim recovery (:mod:`app.services.dispatch.claim`).
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import is_postgresql
from app.enums import TERMINAL_RUN_STATES, JobState, RunState
from app.models import Assignment, Cluster, Run, Tenant
from app.services.assignments import running_intervals
from app.services.dispatch.failures import requeue_after_failure
from app.services.fleet import snapshot
from app.services.job_states import move_job, reread_job
from connectors.base import ClusterConnector, ConfigError, ConnectorError, JobSpec
from connectors.registry import get_connector

#: Extra wall-clock time a run gets beyond its planned duration before the runtime stops it [fraction].
TIME_LIMIT_MARGIN = 0.5
#: ... and at least this much [min].
TIME_LIMIT_MIN_MARGIN_MINUTES = 30
#: A chunk that more chunks follow may overrun its planned end by this much before the runtime stops it [min]:
#: the plan gave the slots after it to other work.
CHUNK_GRACE_MINUTES = 5


@dataclass(frozen=True, slots=True)
class SubmitOutcome:
    """Result of one submit attempt.

    Attributes
    ----------
    run_id : int
        The run.
    state : str
        Run state afterwards (``submitted``, ``failed``, ``cancelled``, ...), or ``skipped`` when there was
        nothing to do (already submitted, locked by another worker).
    runtime_job_id : str or None
        The runtime's id for the job.
    adopted : bool
        True when the runtime already held a job with the run key (a redelivered or recovered submit).
    replan : bool
        True when the job went back to ``pending`` and a re-plan should run.
    """

    run_id: int
    state: str
    runtime_job_id: str | None = None
    adopted: bool = False
    replan: bool = False


def worker_id() -> str:
    """``host:pid`` of this process, recorded as the claimant of a run."""
    return f"{socket.gethostname()}:{os.getpid()}"


def connector_for(cluster: Cluster, settings: Settings) -> ClusterConnector:
    """The connector of a cluster: its kind, its config and its decrypted credentials (if any)."""
    config = dict(cluster.config or {})
    if cluster.secrets_encrypted:
        from app.services import fleet

        config.update(fleet.cluster_secrets(cluster, settings.encryption_keys))
    return get_connector(cluster.kind, config)


def build_spec(session: Session, run: Run, keys: tuple[str, ...] = ()) -> JobSpec:
    """The runtime spec of a run: command, GPUs, ``begin_at`` = planned start, time limit, profile power, and the
    tenant (its trust domain: the runtime keeps it apart from other tenants' jobs, or refuses it).

    A chunk's run is limited to its chunk and told which chunk it is (module docstring).

    Raises
    ------
    ConfigError
        When the job cannot be expressed (no command and no image); ``field`` names it.
    """
    job = run.job
    assignment = session.get(Assignment, run.assignment_id) if run.assignment_id else None
    hardware = run.hardware_code or ""
    planned_minutes = 60
    env = {str(k): str(v) for k, v in (job.env or {}).items()}
    if job.secret_env_encrypted:  # decrypted only here, on its way to the job's process
        from app import crypto

        env.update({str(k): str(v) for k, v in crypto.decrypt_json(keys, job.secret_env_encrypted).items()})
    margin = None
    if assignment is not None:
        bounds = running_intervals(assignment)
        first, last = bounds[run.chunk_index] if run.chunk_index is not None else (assignment.start_at, assignment.end_at)
        planned_minutes = max(1, math.ceil((last - first).total_seconds() / 60))
        if run.chunk_index is not None:
            env.update(GRIDSHIFT_CHUNK_INDEX=str(run.chunk_index), GRIDSHIFT_CHUNK_COUNT=str(len(bounds)),
                       GRIDSHIFT_CHUNK_END=last.isoformat())  # fmt: skip
            if run.chunk_index < len(bounds) - 1:
                margin = CHUNK_GRACE_MINUTES
    if margin is None:
        margin = max(TIME_LIMIT_MIN_MARGIN_MINUTES, math.ceil(planned_minutes * TIME_LIMIT_MARGIN))
    fleet = snapshot(session)
    tenant = session.get(Tenant, job.tenant_id)
    power_w = fleet.power_w(hardware, job.workload_class.value) if hardware in fleet.hardware else 0.0
    return JobSpec(
        run_key=run.run_key, name=job.name, command=job.command, image=job.image, env=env, gpu_count=job.gpu_count,
        hardware=hardware, begin_at=run.planned_start_at, time_limit_minutes=planned_minutes + margin,
        power_w_per_gpu=power_w, tenant=tenant.slug if tenant else None,
    )  # fmt: skip


def submit_run(
    session: Session, settings: Settings, run_id: int, *, now: datetime, worker: str, fresh: bool = False
) -> SubmitOutcome:
    """Submit one claimed run to its runtime (or adopt the job a previous attempt submitted); commits.

    ``fresh`` says this is the first delivery of the first submit message of a just-claimed run: no earlier
    attempt can have reached the runtime, so the ``find(run_key)`` round trip is skipped. Otherwise ``find``
    tells whether an earlier attempt reached the runtime (``adopted``); ``submit`` is called either way, being
    idempotent by the connector contract, so a half-finished earlier submission is completed, not duplicated.

    Raises
    ------
    ConnectorError
        When the runtime failed with ``retryable=True``; the caller retries with backoff and finally calls
        :func:`give_up`. Non-retryable errors fail the run and re-queue the job here.
    """
    q = select(Run).where(Run.id == run_id)
    if is_postgresql(session):
        q = q.with_for_update(skip_locked=True)  # held across the runtime call; released if this worker dies
    run = session.scalar(q)
    if run is None or run.state != RunState.DISPATCHING or run.runtime_job_id:
        session.rollback()
        return SubmitOutcome(run_id, "skipped")
    job = reread_job(session, run.job)
    if job.state == JobState.CANCELLED:
        return _finish_unsubmitted(session, run, RunState.CANCELLED, "job cancelled before submission", now)
    if run.cluster is None or not run.cluster.enabled:
        return _fail(session, run, "cluster removed or disabled before submission", now)
    try:
        spec = build_spec(session, run, settings.encryption_keys)
    except ConfigError as exc:
        return _finish_unsubmitted(session, run, RunState.FAILED, f"cannot dispatch: {exc}", now, fail_job=True)
    connector = connector_for(run.cluster, settings)
    found: str | None = None
    try:
        found = None if fresh and run.error is None else connector.find(run.run_key)
        # Submit even when found: submit is idempotent and completes a submission an earlier attempt left
        # half-done (a Slurm job still held when its worker died between sbatch and release).
        runtime_id = connector.submit(spec)
        adopted = found is not None
    except ConnectorError as exc:
        session.rollback()
        if exc.retryable:
            _note_error(session, run_id, str(exc))
            raise
        # A refusal fails the run only when the runtime confirms it holds no job under this key: an earlier
        # attempt may have landed, and failing would re-plan (and run) the job a second time.
        try:
            held = found if found is not None else connector.find(spec.run_key)
        except ConnectorError as find_exc:
            _note_error(session, run_id, str(exc))
            raise ConnectorError(f"{exc}; runtime could not say whether it holds the job ({find_exc})",
                                 retryable=True, kind=find_exc.kind) from exc  # fmt: skip
        if held is not None:
            return _mark_submitted(session, run_id, held, adopted=True, now=now, connector=connector)
        run = session.get(Run, run_id)
        assert run is not None
        return _fail(session, run, f"runtime refused the job: {exc}", now)
    return _mark_submitted(session, run_id, runtime_id, adopted=adopted, now=now, connector=connector)


def _mark_submitted(
    session: Session, run_id: int, runtime_id: str, *, adopted: bool, now: datetime, connector: ClusterConnector
) -> SubmitOutcome:
    won = session.execute(
        update(Run)
        .where(Run.id == run_id, Run.state == RunState.DISPATCHING)
        .values(state=RunState.SUBMITTED, runtime_job_id=runtime_id, submitted_at=now, error=None)
    )
    run = session.get(Run, run_id)
    assert run is not None
    session.refresh(run)
    if won.rowcount != 1:  # type: ignore[attr-defined]
        # The run was closed while we talked to the runtime (cancelled, or failed by another worker's give_up,
        # which re-planned the job): the job we submitted belongs to no run, so it must not run.
        orphan = run.state in TERMINAL_RUN_STATES and run.runtime_job_id != runtime_id
        if orphan and run.runtime_job_id is None:
            run.runtime_job_id = runtime_id  # recorded first: a cancel that fails must not lose the id
        session.commit()
        if orphan:
            try:
                connector.cancel(runtime_id)
            except ConnectorError as exc:
                run.error = f"{run.error or run.state.value}; runtime job {runtime_id} could not be cancelled: {exc}"
                session.commit()
        return SubmitOutcome(run_id, run.state.value, runtime_id, adopted)
    # The job as committed now, locked on PostgreSQL until this commit: a cancel the API made during the
    # runtime call must win over "submitted" (the stale read of the job before that call cannot tell).
    job = reread_job(session, run.job, lock=True)
    how = "found on the runtime (earlier attempt)" if adopted else "submitted"
    if job.state != JobState.CANCELLED:
        move_job(session, job, JobState.SUBMITTED, f"run {run.run_key} {how} as {runtime_id}", at=now,
                 only_from=(JobState.DISPATCHING, JobState.PLANNED, JobState.PENDING))  # fmt: skip
    session.commit()  # the runtime id first: the status sync cancels the job of a cancelled job if we cannot
    if job.state == JobState.CANCELLED:
        with contextlib.suppress(ConnectorError):  # when this fails, the next status sync cancels it
            connector.cancel(runtime_id)  # cancelled through the API during the submit
    return SubmitOutcome(run_id, RunState.SUBMITTED.value, runtime_id, adopted)


def _note_error(session: Session, run_id: int, message: str) -> None:
    session.execute(update(Run).where(Run.id == run_id, Run.state == RunState.DISPATCHING).values(error=message))
    session.commit()


def _close_unsubmitted(session: Session, run: Run, state: RunState, reason: str, now: datetime) -> bool:
    """Close a run that has not reached its runtime; no commit. False when it meanwhile has (or is closed).

    A conditional UPDATE: a give-up that asked the runtime just before another worker's submit landed must not
    fail the run that submit has recorded, or the job would be planned and run a second time.
    """
    won = session.execute(
        update(Run)
        .where(Run.id == run.id, Run.state == RunState.DISPATCHING, Run.runtime_job_id.is_(None))
        .values(state=state, error=reason, finished_at=now)
        .execution_options(synchronize_session=False)
    )
    session.refresh(run)
    return won.rowcount == 1  # type: ignore[attr-defined]


def _fail(session: Session, run: Run, reason: str, now: datetime) -> SubmitOutcome:
    if not _close_unsubmitted(session, run, RunState.FAILED, reason, now):
        session.commit()
        return SubmitOutcome(run.id, "skipped", run.runtime_job_id)
    replan = requeue_after_failure(session, run, reason, now=now, state=RunState.FAILED)
    session.commit()
    return SubmitOutcome(run.id, RunState.FAILED.value, replan=replan)


def _finish_unsubmitted(
    session: Session, run: Run, state: RunState, reason: str, now: datetime, *, fail_job: bool = False
) -> SubmitOutcome:
    if not _close_unsubmitted(session, run, state, reason, now):
        session.commit()
        return SubmitOutcome(run.id, "skipped", run.runtime_job_id)
    if fail_job:
        move_job(session, run.job, JobState.FAILED, f"run {run.run_key}: {reason}", at=now)
    session.commit()
    return SubmitOutcome(run.id, state.value)


def give_up(session: Session, settings: Settings, run_id: int, error: str, *, now: datetime) -> SubmitOutcome:
    """After the last retry: fail the run only if the runtime confirms it holds no job with its key; commits.

    When the runtime cannot answer, the run stays ``dispatching`` and the tick's stale-claim recovery tries
    it again later: giving up blindly could start the job twice (the first submit may have landed).
    """
    run = session.get(Run, run_id, populate_existing=True)
    if run is None or run.state != RunState.DISPATCHING or run.runtime_job_id or run.cluster is None:
        session.rollback()
        return SubmitOutcome(run_id, "skipped")
    try:
        runtime_id = connector_for(run.cluster, settings).find(run.run_key)
    except (ConnectorError, OSError) as exc:
        _note_error(session, run_id, f"{error}; runtime unreachable ({exc}); will retry after "
                                     f"{settings.claim_stale_s:.0f} s")  # fmt: skip
        return SubmitOutcome(run_id, RunState.DISPATCHING.value)
    if runtime_id is not None:
        return _mark_submitted(
            session, run_id, runtime_id, adopted=True, now=now, connector=connector_for(run.cluster, settings)
        )
    return _fail(session, run, f"submission failed after retries: {error}", now)


def is_terminal(run: Run) -> bool:
    """True once a run can no longer change state."""
    return run.state in TERMINAL_RUN_STATES
