"""Forecasts: the forecast in force per zone and kind, and the status of the latest refreshes."""

from __future__ import annotations

from typing import Any

from flask_smorest import Blueprint
from marshmallow import Schema, fields

from app import extensions
from app.api.schemas import SeriesRangeQuery
from app.enums import SERIES_UNITS
from app.services import forecasts

blp = Blueprint("forecasts", __name__, url_prefix="/api/v1/forecasts", description="Price and carbon forecasts")


class ForecastPointOut(Schema):
    ts = fields.DateTime(format="iso")
    value = fields.Float()
    quantiles = fields.Dict(keys=fields.String(), values=fields.Float(), allow_none=True)


class RunStatusOut(Schema):
    zone = fields.String()
    kind = fields.String()
    model = fields.String()
    status = fields.String()
    issued_at = fields.DateTime(format="iso")
    error = fields.String(allow_none=True)
    in_force_issued_at = fields.DateTime(format="iso", allow_none=True)
    in_force_run_id = fields.Integer(allow_none=True)


class ForecastOut(Schema):
    zone = fields.String()
    kind = fields.String()
    unit = fields.String()
    model = fields.String(allow_none=True)
    issued_at = fields.DateTime(format="iso", allow_none=True, metadata={"description": "issue time of the run in force"})
    latest_refresh = fields.Nested(RunStatusOut, allow_none=True,
                                   metadata={"description": "the latest refresh, failed ones included"})
    points = fields.List(fields.Nested(ForecastPointOut))


class StatusListOut(Schema):
    items = fields.List(fields.Nested(RunStatusOut))


@blp.route("")
@blp.arguments(SeriesRangeQuery, location="query")
@blp.response(200, ForecastOut)
def get_forecast(q: dict[str, Any]) -> Any:
    """Points in [from, to) of the latest succeeded forecast of a zone and kind, with the latest refresh's status
    (a failed refresh leaves the previous forecast in force)."""
    session = extensions.db_session()
    run, points = forecasts.forecast_points(session, q["zone"], q["kind"], q["from_"], q["to"])
    latest = forecasts.run_status(session, q["zone"], q["kind"])
    return {"zone": q["zone"], "kind": q["kind"].value, "unit": SERIES_UNITS[q["kind"]],
            "model": run.model if run else None, "issued_at": run.issued_at if run else None,
            "latest_refresh": latest, "points": points}


@blp.route("/status")
@blp.response(200, StatusListOut)
def get_status() -> Any:
    """Latest refresh per zone and kind: model, status, error, and which run is in force."""
    return {"items": forecasts.status_overview(extensions.db_session())}
