"""Plans: the current plan for the Gantt view, past plans, a what-if preview of one job, and a manual re-plan.

A tenant sees only its own jobs' assignments and unplanned entries. An operator admin sees every assignment and
per-region totals over every tenant (left out for tenants: even a count would tell one tenant about another's work;
fleet-wide power per region and hour is on the overview).
"""

from __future__ import annotations

from typing import Any

from flask_smorest import Blueprint
from marshmallow import EXCLUDE, Schema, fields, validate

from app import extensions
from app.api import principal
from app.api.access import operator, writer
from app.api.schemas import JobIn, Text
from app.db import utcnow
from app.errors import ServiceError
from app.services import audit, jobs, plan_history
from app.services import replan as replan_service
from app.services.fleet import snapshot

blp = Blueprint("plans", __name__, url_prefix="/api/v1/plans", description="Plans, previews and re-planning")


class AssignmentOut(Schema):
    job_id = fields.Integer()
    job_name = fields.String()
    region = fields.String()
    hardware = fields.String()
    gpu_count = fields.Integer()
    start_at = fields.DateTime(format="iso")
    end_at = fields.DateTime(format="iso")
    chunks = fields.List(fields.List(fields.String()), allow_none=True)
    energy_kwh = fields.Float()
    cost = fields.Float()
    currency = fields.String()
    carbon_kg = fields.Float()
    run_now_energy_kwh = fields.Float(allow_none=True)
    run_now_cost = fields.Float(allow_none=True)
    run_now_carbon_kg = fields.Float(allow_none=True)


class UnplannedOut(Schema):
    job_id = fields.Integer()
    job_name = fields.String()
    reason = fields.String()
    detail = fields.String()


class RegionTotalOut(Schema):
    region = fields.String()
    jobs = fields.Integer()
    energy_kwh = fields.Float()
    cost = fields.Float()
    carbon_kg = fields.Float()


class PlanHeadOut(Schema):
    """When and why a plan was made and how well it was solved (shared by one plan and the history's rows)."""

    id = fields.Integer()
    created_at = fields.DateTime(format="iso")
    horizon_start = fields.DateTime(format="iso")
    horizon_end = fields.DateTime(format="iso")
    slot_minutes = fields.Integer()
    objective = fields.String()
    solver = fields.String()
    trigger = fields.String()
    status = fields.String()
    objective_value = fields.Float(allow_none=True)
    best_bound = fields.Float(allow_none=True)
    gap_pct = fields.Float(allow_none=True)
    is_current = fields.Boolean()
    pruned_at = fields.DateTime(format="iso", allow_none=True, metadata={
        "description": "when the retention clean-up deleted this superseded plan's assignment rows that no run "
                       "executed and that are not their job's newest; the assignments listed can then be incomplete"})
    problems = fields.List(fields.String(), metadata={
        "description": "why a failed plan failed (the constraints it broke, else the solver's notes); operator "
                       "admins only, empty for everyone else and for every plan that did not fail"})


class PlanOut(PlanHeadOut):
    assignments = fields.List(fields.Nested(AssignmentOut))
    unplanned = fields.List(fields.Nested(UnplannedOut))
    region_totals = fields.List(fields.Nested(RegionTotalOut),
                                metadata={"description": "every tenant, aggregated; operator admins only"})


class FleetTotalsOut(Schema):
    jobs_assigned = fields.Integer()
    jobs_unplanned = fields.Integer()
    energy_kwh = fields.Float(allow_none=True)
    cost = fields.Float(allow_none=True)
    carbon_kg = fields.Float(allow_none=True)
    run_now_energy_kwh = fields.Float(allow_none=True)
    run_now_cost = fields.Float(allow_none=True)
    run_now_carbon_kg = fields.Float(allow_none=True)
    currency = fields.String()


class PlanSummaryOut(PlanHeadOut):
    solve_s = fields.Float(allow_none=True, metadata={"description": "wall-clock time of the solve [s]"})
    fleet = fields.Nested(FleetTotalsOut, allow_none=True, metadata={
        "description": "every tenant's work in the plan, against running it now; operator admins only (null else)"})


class PlanPage(Schema):
    items = fields.List(fields.Nested(PlanSummaryOut))
    next_cursor = fields.String(allow_none=True)


class PlanQuery(Schema):
    class Meta:
        unknown = EXCLUDE

    trigger = Text(validate=validate.Length(min=1, max=32), metadata={
        "description": "nightly, hourly, new-work, fleet-change, manual, dispatch-failure, run-failure"})
    cursor = Text(validate=validate.Length(max=64))
    limit = fields.Integer(validate=validate.Range(min=1, max=200), load_default=50)


class PreviewFiguresOut(Schema):
    region = fields.String(allow_none=True)
    hardware = fields.String(allow_none=True)
    start_at = fields.DateTime(format="iso", allow_none=True)
    end_at = fields.DateTime(format="iso", allow_none=True)
    energy_kwh = fields.Float(allow_none=True)
    cost = fields.Float(allow_none=True)
    carbon_kg = fields.Float(allow_none=True)


class PreviewOut(Schema):
    feasible = fields.Boolean()
    reason = fields.String(allow_none=True)
    currency = fields.String()
    planned = fields.Nested(PreviewFiguresOut, allow_none=True)
    run_now = fields.Nested(PreviewFiguresOut, allow_none=True)
    saving_cost = fields.Float(allow_none=True)
    saving_carbon_kg = fields.Float(allow_none=True)
    note = fields.String(allow_none=True)


def _planning() -> Any:
    try:
        from app.services import planning
    except ImportError as exc:  # the optimizer's service is not installed in this build
        raise ServiceError("the planning service is not available", status=503, title="Service unavailable") from exc
    return planning


@blp.route("/current")
@blp.response(200, PlanOut)
def get_current() -> Any:
    """The current plan: the caller's assignments (all of them for an operator admin) and per-region totals."""
    session = extensions.db_session()
    return plan_history.plan_view(session, principal(), plan_history.current_plan(session))


@blp.route("", methods=["GET"])
@blp.arguments(PlanQuery, location="query")
@blp.response(200, PlanPage)
def list_plans(q: dict[str, Any]) -> Any:
    """Past plans, newest first: when and why each was made, how well it was solved, and (operator admins) the
    fleet's energy, cost and CO2 against running everything now. Follow ``next_cursor`` for older plans."""
    items, nxt = plan_history.list_plans(extensions.db_session(), principal(), extensions.settings(),
                                         limit=q["limit"], cursor=q.get("cursor"), trigger=q.get("trigger"))
    return {"items": items, "next_cursor": nxt}


@blp.route("/<int:plan_id>")
@blp.response(200, PlanOut)
def get_plan(plan_id: int) -> Any:
    """One plan by id, as ``/current`` shows the current one (the caller's assignments; all for an operator admin)."""
    session = extensions.db_session()
    return plan_history.plan_view(session, principal(), plan_history.get_plan(session, plan_id))


@blp.route("", methods=["POST"])
@blp.response(201, PlanOut)
def replan() -> Any:
    """Re-plan the fleet now (operator admin). Jobs that have not started may move. Answers with the new plan; one
    that failed (``status: failed``) is not made current."""
    p = operator()
    session = extensions.db_session()
    settings = extensions.settings()
    record = replan_service.replan(session, settings, "manual")
    audit.record(session, p, "plan.replan", "plan", record.plan_id, trigger="manual")
    session.commit()
    return plan_history.plan_view(session, p, plan_history.get_plan(session, record.plan_id))  # the new plan, even a failed one


@blp.route("/preview", methods=["POST"])
@blp.arguments(JobIn)
@blp.response(200, PreviewOut)
def preview(data: dict[str, Any]) -> Any:
    """Where and when the job would run, and its energy, cost and CO2, against running it now. Stores nothing."""
    writer()
    session = extensions.db_session()
    now = utcnow()
    (job,) = jobs.validate_batch([data], snapshot(session), now, prefix="",  # same checks and errors as submit
                                 slot_minutes=extensions.settings().slot_minutes)
    result = _planning().preview_job(session, extensions.settings(), job, now)
    session.rollback()  # a preview never writes
    return _preview_body(result)


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _preview_body(result: Any) -> dict[str, Any]:
    """The planning service's preview in this API's shape."""
    planned, run_now = _get(result, "planned"), _get(result, "run_now")

    def figures(f: Any) -> dict[str, Any] | None:
        if f is None:
            return None
        return {k: _get(f, k) for k in ("region", "hardware", "start_at", "end_at", "energy_kwh", "cost", "carbon_kg")}

    body = {"feasible": planned is not None, "reason": _get(result, "reason"),
            "currency": _get(result, "currency", extensions.settings().reporting_currency),
            "planned": figures(planned), "run_now": figures(run_now), "note": _get(result, "note")}
    if planned is not None and run_now is not None:
        body["saving_cost"] = _get(run_now, "cost") - _get(planned, "cost")
        body["saving_carbon_kg"] = _get(run_now, "carbon_kg") - _get(planned, "carbon_kg")
    return body
