"""Fleet overview: per region forecasts vs realised, planned power vs budget, GPUs in use per hardware type.

Aggregates only (no job names or ids), so every tenant may read it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from flask_smorest import Blueprint
from marshmallow import Schema, fields, validate

from app import extensions
from app.api import principal
from app.db import utcnow
from app.services import overview, provenance

blp = Blueprint("overview", __name__, url_prefix="/api/v1/overview", description="The fleet at a glance")


class OverviewQuery(Schema):
    hours_back = fields.Integer(load_default=24, validate=validate.Range(0, 24 * 14))
    hours_ahead = fields.Integer(load_default=48, validate=validate.Range(1, 24 * 14))


class OverviewSeriesOut(Schema):
    kind = fields.String()
    unit = fields.String()
    realised_ts = fields.List(fields.DateTime(format="iso"))
    realised = fields.List(fields.Float())
    forecast_ts = fields.List(fields.DateTime(format="iso"))
    forecast = fields.List(fields.Float())
    lower = fields.List(fields.Float(allow_none=True))
    upper = fields.List(fields.Float(allow_none=True))
    model = fields.String(allow_none=True)
    issued_at = fields.DateTime(format="iso", allow_none=True)


class OverviewGpuOut(Schema):
    hardware = fields.String()
    inventory = fields.Integer()
    in_use_now = fields.Integer()
    peak_planned = fields.Integer()


class OverviewRegionOut(Schema):
    code = fields.String()
    name = fields.String()
    zone = fields.String()
    timezone = fields.String()
    power_budget_kw = fields.Float()
    series = fields.List(fields.Nested(OverviewSeriesOut))
    slots = fields.List(fields.DateTime(format="iso"))
    planned_kw = fields.List(fields.Float())
    budget_kw = fields.List(fields.Float())
    gpus = fields.List(fields.Nested(OverviewGpuOut))


class OverviewOut(Schema):
    now = fields.DateTime(format="iso")
    tenant = fields.String()
    regions = fields.List(fields.Nested(OverviewRegionOut))
    market_data = fields.String(metadata={"description": "real, replayed, synthetic or mixed market data"})
    data_notice = fields.String(allow_none=True, metadata={
        "description": "what is not live market data about the series shown (replayed or synthetic); null if real"})


@blp.route("")
@blp.arguments(OverviewQuery, location="query")
@blp.response(200, OverviewOut)
def get_overview(q: dict[str, Any]) -> Any:
    """Per region, hourly over [now - hours_back, now + hours_ahead)."""
    now = utcnow()
    session = extensions.db_session()
    regions = overview.regions_overview(session, now, hours_back=q["hours_back"], hours_ahead=q["hours_ahead"])
    origin = provenance.market_provenance(session, now - timedelta(hours=q["hours_back"]),
                                          now + timedelta(hours=q["hours_ahead"]))
    return {"now": now, "tenant": principal().tenant_slug, "regions": regions, "market_data": origin.kind,
            "data_notice": origin.notice}
