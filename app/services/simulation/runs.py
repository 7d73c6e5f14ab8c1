"""Simulations asked for through the API (``POST /api/v1/simulations``): queued, replayed by a worker, polled.

A simulation is checked whole when it is asked for (period, scenario against the fleet; 422 naming the field), stored
queued, and replayed by the Celery task :data:`TASK`. Progress is the days replayed out of ``2 * days`` (the
current settings, then the scenario), each written in a short transaction of its own so a poller sees it.
"""

from __future__ import annotations

import logging
from datetime import UTC, date, datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import utcnow
from app.enums import PlanRunState
from app.errors import FieldError, NotFound, ServiceError, ValidationFailed
from app.models import Simulation
from app.services.fleet import snapshot
from app.services.simulation.engine import DAY, compare
from app.services.simulation.history import read_history, stored_zones
from app.services.simulation.scenario import Scenario, check, parse

#: Name of the Celery task that replays a queued simulation (declared in app.tasks.simulation).
TASK = "gridshift.simulation.run"
#: The longest period one simulation may replay [days]: a day costs two solves, so a quarter is ~180 solves.
MAX_DAYS = 92
#: At most this many simulations queued or running at once (each holds a worker for minutes): 429 beyond.
MAX_ACTIVE = 2
#: A running simulation whose worker has not reported for this long may be taken over [s].
STALE_S = 3600
log = logging.getLogger(__name__)


def _day(errors: list[FieldError], name: str, value: Any) -> date | None:
    if isinstance(value, datetime):
        return value.astimezone(UTC).date()
    if isinstance(value, date):
        return value
    try:
        return date.fromisoformat(str(value))
    except ValueError:
        errors.append(FieldError(name, f"expected a date YYYY-MM-DD, got {value!r}"))
        return None


def period(first: Any, last: Any, *, today: date) -> tuple[datetime, int]:
    """The period from day ``first`` to day ``last`` (both included, UTC) as (start, days); 422 naming ``from`` or
    ``to`` when a date is malformed, the period is empty, longer than :data:`MAX_DAYS` or not over yet."""
    errors: list[FieldError] = []
    if first is None:
        errors.append(FieldError("from", "required: the first day to replay (YYYY-MM-DD)"))
    if last is None:
        errors.append(FieldError("to", "required: the last day to replay (YYYY-MM-DD, included)"))
    a = _day(errors, "from", first) if first is not None else None
    b = _day(errors, "to", last) if last is not None else None
    if a is not None and b is not None:
        days = (b - a).days + 1
        if days < 1:
            errors.append(FieldError("to", f"{b} lies before from ({a})"))
        elif days > MAX_DAYS:
            errors.append(FieldError("to", f"the period holds {days} days; at most {MAX_DAYS} days per simulation"))
        if b >= today:
            errors.append(FieldError("to", f"the period must be over: the last day may be {today - timedelta(days=1)}"
                                           " at the latest (only realised series are replayed)"))
    if errors or a is None or b is None:
        raise ValidationFailed("invalid period", errors)
    return datetime(a.year, a.month, a.day, tzinfo=UTC), (b - a).days + 1


def checked(session: Session, data: dict[str, Any], *, today: date) -> tuple[datetime, int, Scenario]:
    """A request's period and scenario, checked against the fleet and the stored zones (422 naming each field)."""
    errors: list[FieldError] = []
    start = days = None
    try:
        start, days = period(data.get("from"), data.get("to"), today=today)
    except ValidationFailed as exc:
        errors += exc.errors
    scenario = None
    try:
        scenario = parse(data)
        check(scenario, snapshot(session), stored_zones(session))
    except ValidationFailed as exc:
        errors += exc.errors
    if errors or start is None or days is None or scenario is None:
        raise ValidationFailed("invalid simulation", errors)
    return start, days, scenario


def run_now(session: Session, settings: Settings, start: datetime, days: int, scenario: Scenario, *,
            on_day: Any = None) -> dict[str, Any]:
    """Replay the period now, in this process (``gridshift simulate``): the comparison of :func:`engine.compare`."""
    history = read_history(session, settings, start, start + days * DAY, zones=_zones(scenario))
    return compare(history, settings, start, days, scenario, on_day=on_day)


def _zones(scenario: Scenario) -> set[str]:
    return {c.zone for c in scenario.regions.values() if c.zone}


def create(session: Session, data: dict[str, Any], *, requested_by: str | None, today: date) -> Simulation:
    """Queue a simulation (flushed, not committed) once its request checks."""
    start, days, scenario = checked(session, data, today=today)
    active = session.scalar(select(func.count()).select_from(Simulation).where(
        Simulation.state.in_((PlanRunState.QUEUED, PlanRunState.RUNNING))))
    if (active or 0) >= MAX_ACTIVE:
        raise ServiceError(f"{active} simulations are queued or running (at most {MAX_ACTIVE}); retry when one is done",
                           status=429, title="Too many requests", extra={"retry_after_s": 30})
    sim = Simulation(requested_by=requested_by, state=PlanRunState.QUEUED, period_start=start, days=days,
                     days_done=0, scenario=scenario.as_dict(), created_at=utcnow())
    session.add(sim)
    session.flush()
    return sim


def get(session: Session, sim_id: int) -> Simulation:
    sim = session.get(Simulation, sim_id)
    if sim is None:
        raise NotFound(f"simulation {sim_id}")
    return sim


def fail(sim: Simulation, error: str) -> None:
    sim.state, sim.error, sim.finished_at = PlanRunState.FAILED, error[:2000], utcnow()


def execute(session: Session, settings: Settings, sim_id: int) -> Simulation | None:
    """Replay the queued simulation ``sim_id`` and store its result; None when another worker holds it. Any error
    fails it with its message instead of leaving it running."""
    now = utcnow()
    stale = now - timedelta(seconds=STALE_S)
    taken = session.execute(
        update(Simulation)
        .where(Simulation.id == sim_id, or_(Simulation.state == PlanRunState.QUEUED,
                                            (Simulation.state == PlanRunState.RUNNING) & (Simulation.started_at < stale)))
        .values(state=PlanRunState.RUNNING, started_at=now, days_done=0)
        .execution_options(synchronize_session=False))
    session.commit()
    if taken.rowcount != 1:  # type: ignore[attr-defined]
        return None
    sim = get(session, sim_id)
    bind = session.get_bind()

    def progress(done: int) -> None:
        with Session(bind=bind) as side:
            side.execute(update(Simulation).where(Simulation.id == sim_id).values(days_done=done))
            side.commit()

    try:
        result = run_now(session, settings, sim.period_start, sim.days, parse(sim.scenario), on_day=progress)
    except Exception as exc:  # recorded: a poller learns why instead of waiting for ever
        session.rollback()
        log.exception("simulation %s failed", sim_id)
        sim = get(session, sim_id)
        fail(sim, f"{type(exc).__name__}: {exc}")
        session.commit()
        return sim
    session.rollback()  # the replay only read; take the row fresh
    sim = get(session, sim_id)
    sim.result, sim.state, sim.days_done, sim.finished_at = result, PlanRunState.SUCCEEDED, 2 * sim.days, utcnow()
    session.commit()
    return sim


def view(sim: Simulation) -> dict[str, Any]:
    """The simulation as a poller sees it: phase, progress (days done of the total) and, when done, the result."""
    total = 2 * sim.days
    phase = {PlanRunState.QUEUED: "queued", PlanRunState.RUNNING: "current" if sim.days_done < sim.days
             else "scenario"}.get(sim.state, "done")
    first = sim.period_start.date()
    return {
        "id": sim.id, "state": sim.state.value, "phase": phase,
        "progress": {"days_done": sim.days_done, "days_total": total,
                     "fraction": round(sim.days_done / total, 3) if total else 1.0},
        "from": first.isoformat(), "to": (first + timedelta(days=sim.days - 1)).isoformat(),
        "scenario": sim.scenario, "requested_by": sim.requested_by, "created_at": sim.created_at,
        "started_at": sim.started_at, "finished_at": sim.finished_at, "error": sim.error, "result": sim.result,
    }
