"""Status sync: poll the runtimes of active runs and record what happened.

For each ``submitted``/``running`` run: a job cancelled through the API has its runtime job cancelled; the
runtime's state moves the run and its job on (with a job event per change); a finished run gets its actual
start and end, exit code, metered energy (``connector.energy``: NVML, accounting or estimate), and its cost
and carbon from the market series of its region's zone over the hours it ran. A failed run sends its job
back to planning (:mod:`app.services.dispatch.failures`). A runtime that does not answer is simply asked
again next time; a run the runtime says it does not know is ``lost`` and its job is re-planned; a run still
pending a minute after its planned start is submitted again (idempotent), which completes a submission the
runtime left half-done. A chunk run that succeeds with more chunks to come leaves its job ``paused`` until the
next chunk is due (:mod:`app.services.dispatch.claim`).

Cost and carbon use facility energy (metered IT energy times the region's PUE), like the planner's figures:
``cost = sum_h E_h * PUE * price_h / 1000`` [EUR, price in EUR/MWh] and
``carbon_kg = sum_h E_h * PUE * ci_h / 1000`` [kg, ci in gCO2eq/kWh], with ``E_h`` the share of the run's
energy in hour ``h`` (constant power assumed). Hours without a published value take the mean of the others.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import is_postgresql
from app.enums import JobState, RunState, SeriesKind
from app.models import Assignment, Cluster, Job, Region, Run
from app.services.assignments import running_intervals
from app.services.dispatch.failures import requeue_after_failure
from app.services.dispatch.submit import build_spec, connector_for
from app.services.job_states import move_job, reread_job
from app.services.series import hour_weights, hourly_series, slot_values
from connectors.base import ClusterConnector, ConnectorError, RunStatus, RuntimeState

#: A run still pending on its runtime this long after its planned start is submitted again (idempotent).
REASSERT_AFTER = timedelta(seconds=60)


@dataclass(frozen=True, slots=True)
class SyncResult:
    """What one status sync saw and changed (run ids)."""

    polled: int = 0
    started: tuple[int, ...] = ()
    succeeded: tuple[int, ...] = ()
    failed: tuple[int, ...] = ()
    cancelled: tuple[int, ...] = ()
    lost: tuple[int, ...] = ()
    unreachable: tuple[int, ...] = ()
    replan: bool = False


@dataclass
class _Acc:
    polled: int = 0
    lists: dict[str, list[int]] = field(default_factory=dict)
    replan: bool = False

    def add(self, kind: str, run_id: int) -> None:
        self.lists.setdefault(kind, []).append(run_id)

    def result(self) -> SyncResult:
        get = lambda k: tuple(self.lists.get(k, ()))  # noqa: E731
        return SyncResult(self.polled, get("started"), get("succeeded"), get("failed"), get("cancelled"),
                          get("lost"), get("unreachable"), self.replan)  # fmt: skip


def sync(session: Session, settings: Settings, *, now: datetime, limit: int = 2000) -> SyncResult:
    """Poll every active run once; each run is its own transaction (commits)."""
    acc = _Acc()
    _cancel_unsubmitted(session, now, acc)
    ids = list(
        session.scalars(
            select(Run.id)
            .where(Run.state.in_((RunState.SUBMITTED, RunState.RUNNING)), Run.runtime_job_id.is_not(None))
            .order_by(Run.id)
            .limit(limit)
        )
    )
    session.rollback()
    connectors: dict[int, ClusterConnector] = {}
    for run_id in ids:
        kind = _sync_one(session, settings, run_id, now, connectors)
        if kind is None:
            continue
        acc.polled += 1
        if kind == "replan":
            acc.replan = True
            acc.add("failed", run_id)
        elif kind == "replan-lost":
            acc.replan = True
            acc.add("lost", run_id)
        elif kind != "unchanged":
            acc.add(kind, run_id)
    return acc.result()


def _cancel_unsubmitted(session: Session, now: datetime, acc: _Acc) -> None:
    """Runs still claimed but not submitted, of jobs cancelled through the API, are closed here."""
    q = (
        select(Run.id)
        .join(Job, Job.id == Run.job_id)
        .where(Run.state == RunState.DISPATCHING, Run.runtime_job_id.is_(None), Job.state == JobState.CANCELLED)
    )
    for run_id in list(session.scalars(q)):
        won = session.execute(
            update(Run)
            .where(Run.id == run_id, Run.state == RunState.DISPATCHING, Run.runtime_job_id.is_(None))
            .values(state=RunState.CANCELLED, finished_at=now, error="job cancelled before submission")
        )
        if won.rowcount == 1:  # type: ignore[attr-defined]
            acc.add("cancelled", run_id)
    session.commit()


def _sync_one(
    session: Session, settings: Settings, run_id: int, now: datetime, connectors: dict[int, ClusterConnector]
) -> str | None:
    q = select(Run).where(Run.id == run_id)
    if is_postgresql(session):
        q = q.with_for_update(skip_locked=True)  # an overlapping sync skips this run
    run = session.scalar(q)
    if run is None or run.state not in (RunState.SUBMITTED, RunState.RUNNING) or not run.runtime_job_id:
        session.rollback()
        return None
    if run.cluster is None:
        replan = requeue_after_failure(session, run, "its cluster was deleted", now=now, state=RunState.LOST)
        session.commit()
        return "replan-lost" if replan else "lost"
    try:
        connector = connectors.get(run.cluster.id) or connector_for(run.cluster, settings)
        connectors[run.cluster.id] = connector
        job = reread_job(session, run.job)
        state = None if job.state == JobState.CANCELLED else connector.poll(run.runtime_job_id)
        if state is not None:
            # what the runtime said is applied to the job as committed now (locked on PostgreSQL until this
            # commit): a cancel made during the poll must neither be re-planned nor paused for a next chunk
            job = reread_job(session, job, lock=True)
        if state is None or (job.state == JobState.CANCELLED and not state.status.terminal):
            state = _cancel_on_runtime(connector, run.runtime_job_id, now)
    except ConnectorError as exc:
        if exc.retryable:
            session.rollback()
            return "unreachable"
        replan = requeue_after_failure(session, run, f"runtime lost it: {exc}", now=now, state=RunState.LOST)
        session.commit()
        return "replan-lost" if replan else "lost"
    kind = _apply(session, run, state, connector, now, settings.encryption_keys)
    session.commit()
    return kind


def _cancel_on_runtime(connector: ClusterConnector, runtime_job_id: str, now: datetime) -> RuntimeState:
    """Cancel the runtime job of a job cancelled through the API; its state as the run will record it."""
    connector.cancel(runtime_job_id)
    try:
        polled = connector.poll(runtime_job_id)
    except ConnectorError:
        return RuntimeState(runtime_job_id, RunStatus.CANCELLED, finished_at=now, message="cancelled")
    return RuntimeState(runtime_job_id, RunStatus.CANCELLED, polled.started_at, polled.finished_at or now,
                        polled.exit_code, "cancelled through the API")  # fmt: skip


def _apply(session: Session, run: Run, state: RuntimeState, connector: ClusterConnector, now: datetime,
           keys: tuple[str, ...] = ()) -> str:
    job = run.job
    if state.status in (RunStatus.PENDING, RunStatus.UNKNOWN):
        _reassert_if_overdue(session, run, connector, now, keys)
        return "unchanged"
    if state.status == RunStatus.RUNNING:
        if run.state == RunState.RUNNING:
            return "unchanged"
        run.state, run.started_at = RunState.RUNNING, state.started_at or now
        move_job(session, job, JobState.RUNNING, f"run {run.run_key} started", at=run.started_at,
                 only_from=(JobState.SUBMITTED, JobState.DISPATCHING, JobState.PLANNED, JobState.PENDING))  # fmt: skip
        return "started"
    # Close the run with a conditional UPDATE: on SQLite (no row lock) an overlapping sync that polled the same
    # run waits for this write and then finds nothing to close, so a run is finished (or re-queued) once.
    finished_at = state.finished_at or now
    won = session.execute(
        update(Run)
        .where(Run.id == run.id, Run.state.in_((RunState.SUBMITTED, RunState.RUNNING)))
        .values(finished_at=finished_at)
        .execution_options(synchronize_session=False)
    )
    if won.rowcount != 1:  # type: ignore[attr-defined]
        return "unchanged"
    run.started_at = state.started_at or run.started_at
    run.finished_at = finished_at
    run.exit_code = state.exit_code
    _record_energy(session, run, connector)
    if state.status == RunStatus.SUCCEEDED:
        run.state = RunState.SUCCEEDED
        following = _next_chunk(session, run)
        if following is None:
            move_job(session, job, JobState.SUCCEEDED, f"run {run.run_key} succeeded; {_figures(run)}",
                     at=run.finished_at)  # fmt: skip
        elif move_job(session, job, JobState.PAUSED,
                      f"run {run.run_key} (chunk {int(run.chunk_index or 0) + 1}) done; {_figures(run)}; "
                      f"next chunk at {following.isoformat()}", at=run.finished_at):  # fmt: skip
            job.resume_at = following
        return "succeeded"
    if state.status == RunStatus.CANCELLED:
        run.state, run.error = RunState.CANCELLED, state.message or "cancelled"
        move_job(session, job, JobState.CANCELLED, f"run {run.run_key} cancelled on the runtime: {state.message}",
                 at=run.finished_at)  # fmt: skip
        return "cancelled"
    reason = state.message or f"exit code {state.exit_code}"
    return "replan" if requeue_after_failure(session, run, reason, now=now, state=RunState.FAILED) else "failed"


def _next_chunk(session: Session, run: Run) -> datetime | None:
    """Start of the chunk after ``run``'s, or None when the run was not a chunk or was the last one."""
    if run.chunk_index is None or run.assignment_id is None:
        return None
    assignment = session.get(Assignment, run.assignment_id)
    bounds = running_intervals(assignment) if assignment is not None else []
    return bounds[run.chunk_index + 1][0] if run.chunk_index + 1 < len(bounds) else None


def _reassert_if_overdue(session: Session, run: Run, connector: ClusterConnector, now: datetime,
                         keys: tuple[str, ...] = ()) -> None:
    """Submit again (idempotent) a run still pending ``REASSERT_AFTER`` past its planned start.

    This completes a submission interrupted half-way on the runtime's side, e.g. a Slurm job left held when
    the controller died between sbatch and release. A submitted run's ``claimed_at`` records the last time
    its submission was asserted, so this happens at most once per ``REASSERT_AFTER``.
    """
    due = (run.planned_start_at or run.submitted_at or now) + REASSERT_AFTER
    last = run.claimed_at or run.submitted_at or now
    if now < due or now - last < REASSERT_AFTER:
        return
    try:
        connector.submit(build_spec(session, run, keys))
    except ConnectorError:
        return  # the runtime is unwell: the next sync tries again
    run.claimed_at = now


def _record_energy(session: Session, run: Run, connector: ClusterConnector) -> None:
    try:
        reading = connector.energy(run.runtime_job_id or "")
    except ConnectorError:
        reading = None
    if reading is None:
        return
    run.energy_kwh, run.avg_power_w, run.energy_source = reading.energy_kwh, reading.avg_power_w, reading.source.value
    region = session.get(Region, run.cluster.region_id) if run.cluster else None
    if region is not None and run.started_at and run.finished_at:
        run.cost, run.carbon_kg = cost_and_carbon(session, region, run.started_at, run.finished_at, reading.energy_kwh)


def _figures(run: Run) -> str:
    if run.energy_kwh is None:
        return "no energy reading"
    parts = [f"{run.energy_kwh:.4g} kWh ({run.energy_source})", f"{run.avg_power_w or 0:.0f} W average"]
    if run.cost is not None:
        parts.append(f"cost {run.cost:.4g}")
    if run.carbon_kg is not None:
        parts.append(f"{run.carbon_kg:.4g} kg CO2eq")
    return ", ".join(parts)


def cost_and_carbon(
    session: Session, region: Region, started: datetime, finished: datetime, energy_kwh: float
) -> tuple[float | None, float | None]:
    """Cost [EUR] and carbon [kg CO2eq] of ``energy_kwh`` of IT energy used from ``started`` to ``finished``.

    Each part of the run counts at the value of the series point that holds it: an hour of an hourly series, a
    quarter-hour of a quarter-hourly one (``app.services.series.slot_values``). Returns None for a figure whose series
    has no value anywhere in the run's hours.
    """
    hours = hour_weights(started, finished)
    first, last = min(hours), max(hours) + timedelta(hours=1)
    facility_kwh = energy_kwh * (region.pue or 1.0)
    out: list[float | None] = []
    for kind in (SeriesKind.PRICE, SeriesKind.CARBON_INTENSITY):
        points = hourly_series(session, region.zone, kind, first, last)
        if not points:
            out.append(None)
            continue
        fallback = sum(p.value for p in points) / len(points)
        step = timedelta(minutes=max(1, min(p.minutes for p in points)))
        starts = [first + step * k for k in range(int((last - first) / step))]
        values = slot_values(session, region.zone, kind, starts, forecasts=False)
        total = (finished - started).total_seconds()
        per_kwh = 0.0  # [unit per MWh or g per kWh]
        for t, v in zip(starts, values, strict=True):
            share = ((min(t + step, finished) - max(t, started)).total_seconds() / total if total > 0
                     else float(t <= started < t + step))
            if share > 0:
                per_kwh += share * (v if math.isfinite(v) else fallback)
        out.append(facility_kwh * per_kwh / 1000.0)
    return out[0], out[1]


def cluster_connectors(session: Session, settings: Settings) -> dict[int, ClusterConnector]:
    """Connectors of every enabled cluster by cluster id (for health views and benches)."""
    return {c.id: connector_for(c, settings) for c in session.scalars(select(Cluster).where(Cluster.enabled.is_(True)))}
