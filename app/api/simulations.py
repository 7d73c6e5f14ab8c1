"""Simulations: replay a past period under a changed fleet, objective or carbon price, against the current settings.

Operator admins only (a replay reads every tenant's jobs). ``POST`` checks the request whole and answers 202 with
the simulation to poll (``Location``); a worker replays it; ``GET`` gives its progress (days replayed of the total)
and, once done, the comparison. docs/simulation.md describes the method and its limits.
"""

from __future__ import annotations

from typing import Any

from flask import current_app, url_for
from flask_smorest import Blueprint
from marshmallow import RAISE, Schema, fields

from app import extensions
from app.api.access import first, operator
from app.costs import costly
from app.db import utcnow
from app.errors import ServiceError
from app.services import audit
from app.services.simulation import runs

blp = Blueprint("simulations", __name__, url_prefix="/api/v1/simulations",
                description="What-if replays of a past period")


class SimulationIn(Schema):
    """Checked by the service, field by field (422 naming ``regions.<code>.gpus.<hardware>`` and the like)."""

    class Meta:
        unknown = RAISE

    from_ = fields.Raw(data_key="from", required=True, metadata={"description": "first day replayed, YYYY-MM-DD"})
    to = fields.Raw(required=True, metadata={
        "description": f"last day replayed (included), before today; at most {runs.MAX_DAYS} days from `from`"})
    objective = fields.Raw(metadata={"description": "cost, carbon or weighted (default: the configured one)"})
    carbon_price_per_tonne = fields.Raw(metadata={"description": "for the weighted objective [currency/tCO2eq]"})
    regions = fields.Raw(metadata={
        "description": "region code -> changes: power_budget_kw, pue, gpus {hardware: count}, removed, "
                       "like (add a new region as a copy of this one), zone (a zone with stored series)"})


class ProgressOut(Schema):
    days_done = fields.Integer()
    days_total = fields.Integer(metadata={"description": "2 x days: the current settings, then the scenario"})
    fraction = fields.Float()


class SimulationOut(Schema):
    id = fields.Integer()
    state = fields.String(metadata={"description": "queued, running, succeeded or failed"})
    phase = fields.String(metadata={"description": "queued, current, scenario or done"})
    progress = fields.Nested(ProgressOut)
    from_ = fields.String(data_key="from")
    to = fields.String()
    scenario = fields.Dict()
    requested_by = fields.String(allow_none=True)
    created_at = fields.DateTime(format="iso")
    started_at = fields.DateTime(format="iso", allow_none=True)
    finished_at = fields.DateTime(format="iso", allow_none=True)
    error = fields.String(allow_none=True)
    result = fields.Dict(allow_none=True, metadata={
        "description": "once succeeded: current, changed, difference (changed - current), percent, per_day, notes"})


@blp.route("", methods=["POST"])
@first(operator)
@costly("simulation")
@blp.arguments(SimulationIn)
@blp.response(202, SimulationOut, headers={"Location": {"description": "the simulation to poll",
                                                        "schema": {"type": "string"}}})
def create(data: dict[str, Any]) -> Any:
    """Replay a past period under a scenario against the current settings (operator admin): 202 with the simulation
    to poll (``Location``); a worker replays it."""
    p = operator()
    session = extensions.db_session()
    body = {("from" if k == "from_" else k): v for k, v in data.items()}
    sim = runs.create(session, body, requested_by=f"{p.tenant_slug}/{p.token_name}", today=utcnow().date())
    audit.record(session, p, "simulation.create", "simulation", sim.id)
    session.commit()
    try:
        current_app.extensions["celery"].signature(runs.TASK, args=(sim.id,)).delay()
    except Exception as exc:  # the broker is down: say so now rather than leave it queued for ever
        runs.fail(sim, f"could not queue the simulation: {exc}")
        session.commit()
        raise ServiceError("the task queue is not reachable; try again", status=503,
                           title="Service unavailable") from exc
    session.refresh(sim)
    return _out(runs.view(sim)), {"Location": url_for("simulations.get", sim_id=sim.id), "Retry-After": "2"}


@blp.route("/<int:sim_id>")
@blp.response(200, SimulationOut)
def get(sim_id: int) -> Any:
    """A simulation (operator admin): state, phase, progress and, once done, the comparison."""
    operator()
    sim = runs.get(extensions.db_session(), sim_id)
    return _out(runs.view(sim)), ({} if sim.finished_at else {"Retry-After": "2"})


def _out(view: dict[str, Any]) -> dict[str, Any]:
    return {("from_" if k == "from" else k): v for k, v in view.items()}
