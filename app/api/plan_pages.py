"""A plan at fleet scale: its aggregated overview, and its assignments page by page (filtered and sorted)."""

from __future__ import annotations

from typing import Any

from flask_smorest import Blueprint
from marshmallow import EXCLUDE, Schema, fields, validate

from app import extensions
from app.api import principal
from app.api.plans import AssignmentOut, PlanHeadOut
from app.api.schemas import CODE, Aware, Text
from app.models import Plan
from app.services import plan_history, plan_pages

blp = Blueprint("plan_pages", __name__, url_prefix="/api/v1/plans",
                description="A plan's overview and paginated assignments, for plans of any size")


class LaneOut(Schema):
    region = fields.String()
    hardware = fields.String()
    inventory_gpus = fields.Integer()
    gpus_in_use = fields.List(fields.Float(), metadata={"description": "mean GPUs in use per bucket"})


class RegionPowerOut(Schema):
    region = fields.String()
    budget_kw = fields.Float()
    power_kw = fields.List(fields.Float(), metadata={"description": "mean planned facility power per bucket [kW]"})


class PlanOverviewOut(PlanHeadOut):
    assignments_total = fields.Integer()
    bucket_start = fields.DateTime(format="iso")
    bucket_minutes = fields.Integer()
    buckets = fields.Integer()
    lanes = fields.List(fields.Nested(LaneOut))
    regions = fields.List(fields.Nested(RegionPowerOut))
    states = fields.Dict(keys=fields.String(), values=fields.Integer())
    tenants = fields.List(fields.String())


class AssignmentQuery(Schema):
    class Meta:
        unknown = EXCLUDE

    region = fields.String(validate=CODE)
    hardware = fields.String(validate=CODE)
    tenant = Text(validate=validate.Length(1, 63), metadata={"description": "operators: one tenant's jobs"})
    state = Text(validate=validate.Length(1, 32))
    q = Text(validate=validate.Length(1, 200), metadata={"description": "part of a job's name, or its id"})
    start_from = Aware(data_key="from", metadata={"description": "runs at some time at or after this"})
    start_to = Aware(data_key="to", metadata={"description": "runs at some time before this"})
    sort = fields.String(load_default="start_at", validate=validate.Length(1, 32), metadata={
        "description": "start_at, end_at, job_id, job_name, tenant, state, region, hardware, gpu_count, cost, "
                       "energy_kwh, carbon_kg; '-' in front for descending"})
    page = fields.Integer(load_default=1, validate=validate.Range(min=1, max=1_000_000))
    per_page = fields.Integer(load_default=50, validate=validate.Range(min=1, max=500))


class AssignmentRowOut(AssignmentOut):
    """A plan's assignment as the paginated table shows it: with its tenant, state and expected saving."""

    tenant = fields.String()
    state = fields.String()
    expected_saving_cost = fields.Float(allow_none=True, metadata={"description": "planned: expected, not claimed"})


class AssignmentPageOut(Schema):
    items = fields.List(fields.Nested(AssignmentRowOut))
    total = fields.Integer()
    page = fields.Integer()
    per_page = fields.Integer()
    pages = fields.Integer()


def _plan(plan_id: int | None) -> Plan:
    session = extensions.db_session()
    return plan_history.current_plan(session) if plan_id is None else plan_history.get_plan(session, plan_id)


def _page(q: dict[str, Any], plan_id: int | None) -> dict[str, Any]:
    flt = plan_pages.AssignmentFilter(region=q.get("region"), hardware=q.get("hardware"), tenant=q.get("tenant"),
                                      state=q.get("state"), text=q.get("q"), start_from=q.get("start_from"),
                                      start_to=q.get("start_to"))
    return plan_pages.assignment_page(extensions.db_session(), principal(), _plan(plan_id), flt, sort=q["sort"],
                                      page=q["page"], per_page=q["per_page"])


@blp.route("/current/overview")
@blp.response(200, PlanOverviewOut)
def current_overview() -> Any:
    """The current plan summed per region and hardware over time: GPUs in use against inventory, power against
    budget (the caller's jobs; every tenant's for operators)."""
    return plan_pages.plan_overview(extensions.db_session(), principal(), _plan(None))


@blp.route("/<int:plan_id>/overview")
@blp.response(200, PlanOverviewOut)
def overview(plan_id: int) -> Any:
    """Plan ``plan_id`` summed per region and hardware over time."""
    return plan_pages.plan_overview(extensions.db_session(), principal(), _plan(plan_id))


@blp.route("/current/assignments")
@blp.arguments(AssignmentQuery, location="query")
@blp.response(200, AssignmentPageOut)
def current_assignments(q: dict[str, Any]) -> Any:
    """One page of the current plan's assignments, filtered and sorted."""
    return _page(q, None)


@blp.route("/<int:plan_id>/assignments")
@blp.arguments(AssignmentQuery, location="query")
@blp.response(200, AssignmentPageOut)
def assignments(q: dict[str, Any], plan_id: int) -> Any:
    """One page of plan ``plan_id``'s assignments, filtered and sorted."""
    return _page(q, plan_id)
