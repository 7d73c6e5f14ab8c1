"""Plans: the current plan for the Gantt view, past plans, a what-if preview of one job, and a manual re-plan.

A tenant sees only its own jobs' assignments and unplanned entries. An operator admin sees every assignment and
per-region totals over every tenant (left out for tenants: even a count would tell one tenant about another's work;
fleet-wide power per region and hour is on the overview).
"""

from __future__ import annotations

from typing import Any

from flask import current_app, url_for
from flask_smorest import Blueprint
from marshmallow import EXCLUDE, Schema, fields, validate

from app import extensions
from app.api import principal
from app.api.access import first, operator, writer
from app.api.schemas import JobIn, Text
from app.costs import costly
from app.db import utcnow
from app.errors import ServiceError
from app.services import audit, jobs, plan_history, plan_runs
from app.services.fleet import snapshot
from optimizer import ObjectiveKind

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
    objective_value = fields.Float(allow_none=True, metadata={
        "description": "operator admins: the plan's objective over the fleet; anyone else: over their own jobs "
                       "(their cost, or CO2 [kg] for a carbon objective; null for a weighted one)"})
    best_bound = fields.Float(allow_none=True, metadata={"description": "the fleet's bound; operator admins only"})
    gap_pct = fields.Float(allow_none=True, metadata={"description": "the fleet's gap; operator admins only"})
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


class PlanRunIn(Schema):
    class Meta:
        unknown = EXCLUDE

    objective = Text(validate=validate.OneOf([k.value for k in ObjectiveKind]), metadata={
        "description": "this run only (default: GRIDSHIFT_OBJECTIVE); carbon_cost_cap needs GRIDSHIFT_COST_CAP"})


class PlanRunSummaryOut(Schema):
    plan_id = fields.Integer()
    status = fields.String()
    objective = fields.String()
    trigger = fields.String()
    is_current = fields.Boolean()
    currency = fields.String(allow_none=True)
    jobs_planned = fields.Integer(allow_none=True)
    jobs_left_out = fields.Integer(allow_none=True)
    gap_pct = fields.Float(allow_none=True)
    solve_s = fields.Float(allow_none=True)
    cost = fields.Float(allow_none=True)
    carbon_kg = fields.Float(allow_none=True)
    energy_kwh = fields.Float(allow_none=True)
    run_now_cost = fields.Float(allow_none=True)
    run_now_carbon_kg = fields.Float(allow_none=True)
    run_now_energy_kwh = fields.Float(allow_none=True)
    saving_cost = fields.Float(allow_none=True)
    saving_carbon_kg = fields.Float(allow_none=True)
    saving_energy_kwh = fields.Float(allow_none=True)


class PlanRunOut(Schema):
    id = fields.Integer()
    state = fields.String(metadata={"description": "queued, running, succeeded or failed"})
    phase = fields.String(metadata={"description": "queued, problem, solve, store, done"})
    progress = fields.Float(metadata={"description": "0..1; during the solve, estimated from its time limit"})
    trigger = fields.String()
    objective = fields.String()
    requested_by = fields.String(allow_none=True)
    created_at = fields.DateTime(format="iso")
    started_at = fields.DateTime(format="iso", allow_none=True)
    finished_at = fields.DateTime(format="iso", allow_none=True)
    plan_id = fields.Integer(allow_none=True)
    error = fields.String(allow_none=True)
    summary = fields.Nested(PlanRunSummaryOut, allow_none=True)


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
@first(operator)
@costly("replan")
@blp.arguments(PlanRunIn)
@blp.response(202, PlanRunOut, headers={"Location": {"description": "the run to poll", "schema": {"type": "string"}}})
def replan(data: dict[str, Any]) -> Any:
    """Re-plan the fleet (operator admin): answers 202 at once with the run to poll (``Location``); a worker solves.
    Jobs that have not started may move. A plan that fails (``state: failed``) is not made current."""
    p = operator()
    session = extensions.db_session()
    settings = extensions.settings()
    run = plan_runs.create(session, settings, trigger="manual", objective=data.get("objective"),
                           requested_by=f"{p.tenant_slug}/{p.token_name}")
    audit.record(session, p, "plan.replan", "plan_run", run.id, trigger="manual")
    session.commit()
    try:
        current_app.extensions["celery"].signature(plan_runs.TASK, args=(run.id,)).delay()
    except Exception as exc:  # the broker is down: say so now rather than leave the run queued for ever
        plan_runs.fail(session, run, f"could not queue the plan run: {exc}")
        session.commit()
        raise ServiceError("the task queue is not reachable; try again", status=503,
                           title="Service unavailable") from exc
    session.refresh(run)
    location = url_for("plans.get_run", run_id=run.id)
    return plan_runs.view(run, settings), {"Location": location, "Retry-After": "2"}


class PlanRunPage(Schema):
    items = fields.List(fields.Nested(PlanRunOut))
    next_cursor = fields.String(allow_none=True)


class PlanRunQuery(PlanQuery):
    state = Text(validate=validate.OneOf(["queued", "running", "succeeded", "failed"]))


@blp.route("/runs", methods=["GET"])
@first(operator)
@blp.arguments(PlanRunQuery, location="query")
@blp.response(200, PlanRunPage)
def list_runs(q: dict[str, Any]) -> Any:
    """Plan runs, newest first (operator admin): every plan made or tried, whether asked for (``manual``) or
    scheduled (``nightly``, ``hourly``, ``new-work``, ...), with its state and outcome. Follow ``next_cursor``."""
    runs, nxt = plan_runs.list_runs(extensions.db_session(), limit=q["limit"], cursor=q.get("cursor"),
                                    trigger=q.get("trigger"), state=q.get("state"))
    settings = extensions.settings()
    return {"items": [plan_runs.view(run, settings) for run in runs], "next_cursor": nxt}


@blp.route("/runs/<int:run_id>")
@blp.response(200, PlanRunOut)
def get_run(run_id: int) -> Any:
    """A plan run asked for with ``POST /api/v1/plans`` (operator admin): state, phase, progress and, once done, the
    plan's summary against running every job now; ``plan_id`` leads to the plan itself."""
    operator()
    run = plan_runs.get(extensions.db_session(), run_id)
    headers = {} if run.finished_at else {"Retry-After": "2"}
    return plan_runs.view(run, extensions.settings()), headers


@blp.route("/preview", methods=["POST"])
@first(writer)
@costly("preview")
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
