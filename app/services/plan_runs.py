"""Plan runs: every plan made, asked for now (``POST /api/v1/plans``, ``gridshift plan``) or by the schedule (the
nightly, hourly and new-work tasks, re-plans after a failure), run by a worker and polled.

A run is queued in one transaction, executed by the Celery task :data:`TASK` (or in the CLI's own process), and
reports its phase as it goes (``problem``, ``solve``, ``store``), each written in a short transaction of its own so
that a poller sees it while the plan's transaction is still open. Its result is a summary of the plan against
running every job now: cost, carbon, energy, jobs planned and left out, the optimality gap.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, or_, select, update
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import utcnow
from app.enums import PlanRunState
from app.errors import FieldError, NotFound, ValidationFailed
from app.models import Plan, PlanRun
from app.services import replan as replan_service
from app.services.pages import decode_cursor, encode_cursor
from optimizer import ObjectiveKind

#: Name of the Celery task that executes a queued run (declared in app.tasks.planning).
TASK = "gridshift.plan.run"

#: Where each phase starts on a 0..1 progress scale; the solve's share advances with its time limit.
PHASES = {"queued": 0.0, "problem": 0.05, "solve": 0.2, "store": 0.9, "done": 1.0}
log = logging.getLogger(__name__)


def settings_for(settings: Settings, objective: str | None) -> Settings:
    """``settings`` with ``objective`` in force (None: the configured one); an unknown name is a 422 naming it."""
    if not objective:
        return settings
    try:
        return replace(settings, objective=ObjectiveKind(objective))
    except ValueError as exc:
        valid = ", ".join(k.value for k in ObjectiveKind)
        detail = str(exc) if "COST_CAP" in str(exc) else f"{objective!r} is not an objective; valid: {valid}"
        raise ValidationFailed("invalid objective", [FieldError("objective", detail)]) from None


def create(session: Session, settings: Settings, *, trigger: str = "manual", objective: str | None = None,
           requested_by: str | None = None) -> PlanRun:
    """Queue a run (flushed, not committed); the objective is checked now, not when a worker takes it."""
    settings_for(settings, objective)
    run = PlanRun(trigger=trigger, objective=objective or None, requested_by=requested_by,
                  state=PlanRunState.QUEUED, phase="queued", progress=0.0, created_at=utcnow())
    session.add(run)
    session.flush()
    return run


def list_runs(session: Session, *, limit: int, cursor: str | None = None, trigger: str | None = None,
              state: str | None = None) -> tuple[list[PlanRun], str | None]:
    """Plan runs newest first (every plan: asked for or scheduled), optionally of one trigger or state; the page
    and the cursor of the next one (None at the end)."""
    q = select(PlanRun)
    if trigger:
        q = q.where(PlanRun.trigger == trigger)
    if state:
        q = q.where(PlanRun.state == PlanRunState(state))
    if cursor:
        q = q.where(PlanRun.id < decode_cursor(cursor, kind="r"))
    runs = list(session.scalars(q.order_by(PlanRun.id.desc()).limit(limit + 1)))
    nxt = encode_cursor(runs[limit - 1].id, kind="r") if len(runs) > limit else None
    return runs[:limit], nxt


def prune(session: Session, settings: Settings, *, now: datetime) -> int:
    """Delete finished runs older than ``plan_run_retention_days`` (0: keep all); queued and running runs stay, and
    so do the plans they made. Returns how many went; no commit."""
    if settings.plan_run_retention_days <= 0:
        return 0
    cutoff = now - timedelta(days=settings.plan_run_retention_days)
    gone = session.execute(
        delete(PlanRun)
        .where(PlanRun.state.in_((PlanRunState.SUCCEEDED, PlanRunState.FAILED)),
               PlanRun.created_at < cutoff, PlanRun.finished_at.is_not(None), PlanRun.finished_at < cutoff)
        .execution_options(synchronize_session=False)
    )
    return int(gone.rowcount or 0)  # type: ignore[attr-defined]


def get(session: Session, run_id: int) -> PlanRun:
    run = session.get(PlanRun, run_id)
    if run is None:
        raise NotFound(f"plan run {run_id}")
    return run


def fail(session: Session, run: PlanRun, error: str) -> None:
    """Mark ``run`` failed with ``error`` (the caller commits)."""
    run.state, run.phase, run.error, run.finished_at = PlanRunState.FAILED, "done", error[:2000], utcnow()


def _claim(session: Session, run_id: int, settings: Settings, now: datetime) -> bool:
    """Take a queued run (or one whose worker died mid-solve) for this process; False when another holds it."""
    stale = now - timedelta(seconds=3 * settings.nightly_plan_time_limit_s + 300)
    result = session.execute(
        update(PlanRun)
        .where(PlanRun.id == run_id, or_(PlanRun.state == PlanRunState.QUEUED,
                                         (PlanRun.state == PlanRunState.RUNNING) & (PlanRun.started_at < stale)))
        .values(state=PlanRunState.RUNNING, phase="problem", progress=PHASES["problem"], started_at=now)
        .execution_options(synchronize_session=False)
    )
    session.commit()
    return result.rowcount == 1  # type: ignore[attr-defined]


def _phase_writer(session: Session, run_id: int) -> Callable[[str], None]:
    """A callback writing the run's phase in its own short transaction (visible while the plan's is open)."""
    bind = session.get_bind()

    def write(name: str) -> None:
        with Session(bind=bind) as side:
            side.execute(update(PlanRun).where(PlanRun.id == run_id)
                         .values(phase=name, progress=PHASES.get(name, 0.0)))
            side.commit()

    return write


def execute(session: Session, settings: Settings, run_id: int, *, on_phase: Callable[[str], None] | None = None,
            now: datetime | None = None) -> PlanRun | None:
    """Run the queued plan ``run_id`` to its end and record the outcome; None when another worker holds it.

    The plan itself goes through ``replan.replan`` (one plan at a time on PostgreSQL). Any error fails the run
    with its message instead of leaving it running.
    """
    now = now or utcnow()
    if not _claim(session, run_id, settings, now):
        log.info("plan run %s is not queued; left alone", run_id, extra={"run_id": run_id})
        return None
    run = get(session, run_id)
    write = _phase_writer(session, run_id)

    def phase(name: str) -> None:
        write(name)
        if on_phase is not None:
            on_phase(name)

    log.info("plan run %s started (%s)", run_id, run.trigger, extra={"run_id": run_id})
    try:
        record = replan_service.replan(session, settings_for(settings, run.objective), run.trigger,
                                       now=now, on_phase=phase)
        session.commit()
    except Exception as exc:  # recorded on the run: a poller learns why instead of waiting forever
        session.rollback()
        log.exception("plan run %s failed", run_id, extra={"run_id": run_id})
        run = get(session, run_id)
        fail(session, run, f"{type(exc).__name__}: {exc}")
        session.commit()
        return run
    run = get(session, run_id)
    plan = session.get(Plan, record.plan_id)
    run.plan_id = plan.id if plan is not None else None  # a planner that stored no plan leaves nothing to point at
    run.summary = summary(plan) if plan is not None else None
    run.state = PlanRunState.FAILED if str(record.status) == "failed" else PlanRunState.SUCCEEDED
    if run.state is PlanRunState.FAILED:
        run.error = "the plan failed (kept for the record, not made current): see the plan's problems"
    run.phase, run.progress, run.finished_at = "done", 1.0, utcnow()
    session.commit()
    log.info("plan run %s %s: plan %s", run_id, run.state.value, record.plan_id,
             extra={"run_id": run_id, "plan_id": record.plan_id})
    return run


def dry_run(session: Session, settings: Settings, *, objective: str | None = None,
            on_phase: Callable[[str], None] | None = None, now: datetime | None = None) -> dict[str, Any]:
    """Plan the fleet as a re-plan would and return its :func:`summary`, then roll back: nothing is stored, no job
    changes state (``gridshift plan --dry-run``)."""
    try:
        record = replan_service.replan(session, settings_for(settings, objective), "dry-run", now=now or utcnow(),
                                       on_phase=on_phase)
        plan = session.get(Plan, record.plan_id)
        assert plan is not None  # flushed in this transaction
        out = {**summary(plan), "plan_id": None, "is_current": False, "dry_run": True}
    finally:
        session.rollback()
    return out


def summary(plan: Plan) -> dict[str, Any]:
    """A stored plan against running every job now: cost, carbon, energy, jobs, gap and solve time."""
    stats = plan.stats or {}
    run_now = stats.get("run_now") or {}
    jobs = stats.get("jobs") or {}
    out: dict[str, Any] = {
        "plan_id": plan.id, "status": plan.status.value, "objective": plan.objective, "trigger": plan.trigger,
        "is_current": plan.is_current, "currency": stats.get("currency"),
        "jobs_planned": jobs.get("assigned"), "jobs_left_out": jobs.get("unplanned"),
        "gap_pct": plan.gap_pct, "solve_s": (stats.get("solve") or {}).get("wall_s"),
        "cost": stats.get("cost"), "carbon_kg": stats.get("carbon_kg"), "energy_kwh": stats.get("energy_kwh"),
        "run_now_cost": run_now.get("cost"), "run_now_carbon_kg": run_now.get("carbon_kg"),
        "run_now_energy_kwh": run_now.get("energy_kwh"),
    }
    for key in ("cost", "carbon_kg", "energy_kwh"):
        planned, baseline = out[key], out[f"run_now_{key}"]
        out[f"saving_{key}"] = baseline - planned if planned is not None and baseline is not None else None
    return out


def view(run: PlanRun, settings: Settings, *, now: datetime | None = None) -> dict[str, Any]:
    """The run as a poller sees it. During the solve, progress advances with the solver's time limit."""
    progress = run.progress
    if run.state is PlanRunState.RUNNING and run.phase == "solve" and run.started_at is not None:
        limit = settings.nightly_plan_time_limit_s if run.trigger == "nightly" else settings.plan_time_limit_s
        elapsed = ((now or utcnow()) - run.started_at).total_seconds()
        progress = PHASES["solve"] + (PHASES["store"] - PHASES["solve"]) * min(1.0, elapsed / max(limit, 0.1))
    return {
        "id": run.id, "state": run.state.value, "phase": run.phase, "progress": round(progress, 3),
        "trigger": run.trigger, "objective": run.objective or settings.objective.value,
        "requested_by": run.requested_by, "created_at": run.created_at, "started_at": run.started_at,
        "finished_at": run.finished_at, "plan_id": run.plan_id, "error": run.error, "summary": run.summary,
    }
