"""Tenants' fair-share weights, quotas and budgets: each tenant reads its own burn-down, the operator reads every
tenant's and sets them (audited)."""

from __future__ import annotations

from typing import Any

from flask import Response, jsonify
from flask_smorest import Blueprint
from marshmallow import Schema, fields, validate

from app import extensions
from app.api import principal
from app.api.access import operator
from app.api.schemas import CODE
from app.db import utcnow
from app.errors import Forbidden
from app.services import audit, tenancy

blp = Blueprint("tenancy", __name__, url_prefix="/api/v1", description="Fair share, quotas and budgets per tenant")

def _amount(description: str = "") -> fields.Float:
    """A non-negative amount, null for no cap."""
    return fields.Float(allow_none=True, allow_nan=False, validate=validate.Range(min=0),
                        metadata={"description": description})


class PolicyIn(Schema):
    weight = fields.Float(allow_nan=False, validate=validate.Range(min=0, min_inclusive=False, max=1e6),
                          metadata={"description": "share of scarce capacity against other tenants' weights"})
    max_gpus = fields.Dict(keys=fields.String(validate=CODE),
                           values=fields.Integer(strict=True, validate=validate.Range(0, 1_000_000)),
                           metadata={"description": "GPUs of a hardware type at once, per hardware code"})
    max_gpu_hours_per_day = _amount()
    max_gpu_hours_per_month = _amount()
    max_queued_jobs = fields.Integer(strict=True, allow_none=True, validate=validate.Range(0, 10_000_000))
    budget_period = fields.String(validate=validate.OneOf(tenancy.PERIODS))
    cost_budget = _amount("electricity cost per period [reporting currency]")
    energy_budget_kwh = _amount()
    carbon_budget_kg = _amount("location-based kg CO2eq per period")


def _view(slug: str) -> dict[str, Any]:
    db = extensions.db_session()
    return tenancy.burn_down(db, tenancy.tenant_by_slug(db, slug), now=utcnow(),
                             currency=extensions.settings().reporting_currency)


def _json_doc(kind: str, description: str) -> dict[str, Any]:
    """OpenAPI for an answer built with jsonify: its media type and top-level shape (``array`` or ``object``)."""
    schema: dict[str, Any] = {"type": "object"} if kind == "object" else {"type": "array", "items": {"type": "object"}}
    return {"responses": {"200": {"description": description, "content": {"application/json": {"schema": schema}}}}}


@blp.route("/tenancy")
@blp.doc(**_json_doc("array", "one burn-down per tenant the caller may see"))
def list_tenancy() -> Response:
    """Weight, quota use and budget burn-down: the caller's tenant, or every tenant for the operator."""
    p = principal()
    db = extensions.db_session()
    slugs = tenancy.tenant_slugs(db) if p.is_operator else [p.tenant_slug]
    return jsonify([_view(s) for s in slugs])


@blp.route("/tenancy/<slug>")
@blp.doc(**_json_doc("object", "the tenant's weight, quota use and budget burn-down"))
def get_tenancy(slug: str) -> Response:
    """One tenant's weight, quota use and budget burn-down (its own tokens, or the operator's)."""
    p = principal()
    if slug != p.tenant_slug and not p.is_operator:
        raise Forbidden("a tenant reads its own quotas and budgets only")
    return jsonify(_view(slug))


@blp.route("/tenancy/<slug>", methods=["PUT"])
@blp.doc(**_json_doc("object", "the tenant's burn-down with the new policy"))
@blp.arguments(PolicyIn)
def put_tenancy(data: dict[str, Any], slug: str) -> Response:
    """Set a tenant's weight, quotas and budgets; fields left out keep their value, null removes a cap (operator
    admin, audited)."""
    p = operator()
    db = extensions.db_session()
    tenancy.set_policy(db, slug, data)
    audit.record(db, p, "tenant.policy_put", "tenant", slug, **{k: v for k, v in data.items()})
    db.commit()
    return jsonify(_view(slug))
