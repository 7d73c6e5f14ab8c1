"""Job profiles: the throughput and power planning uses per (workload class, hardware type).

Everyone may read them; a measurement is recorded by an admin token of the operator tenant and audited.
Hardware types themselves are edited through PUT /api/v1/hardware/<code> (app/api/fleet.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from flask_smorest import Blueprint
from marshmallow import Schema, fields, validate

from app import extensions
from app.api.access import operator
from app.api.schemas import CODE, Aware, Text
from app.enums import WorkloadClass
from app.services import audit, profiles

blp = Blueprint("profiles", __name__, url_prefix="/api/v1", description="Job profiles: estimated and measured")

CLASS = validate.OneOf([w.value for w in WorkloadClass])


class ProfileOut(Schema):
    id = fields.Integer(allow_none=True)
    workload_class = fields.String()
    hardware = fields.String()
    relative_throughput = fields.Float(metadata={"description": "work per hour x the reference hardware"})
    power_w = fields.Float(metadata={"description": "average draw of one GPU [W]"})
    utilisation = fields.Float(allow_none=True)
    steps_per_s = fields.Float(allow_none=True)
    energy_per_step_j = fields.Float(allow_none=True)
    source = fields.String(metadata={"description": "estimate or measured"})
    method = fields.String()
    measured_at = fields.DateTime(format="iso", allow_none=True)
    deviation_pct = fields.Float(allow_none=True, metadata={"description": "change against the profile replaced [%]"})
    flagged = fields.Boolean(metadata={"description": f"the measurement moved the profile by > {profiles.FLAG_PCT:g} %"})


class ProfileQuery(Schema):
    hardware = fields.String(validate=CODE)
    workload_class = fields.String(validate=CLASS)
    flagged = fields.Boolean()


class MeasurementIn(Schema):
    workload_class = fields.String(required=True, validate=CLASS)
    hardware = fields.String(required=True, validate=CODE)
    steps_per_s = fields.Float(required=True, allow_nan=False, validate=validate.Range(min=0, min_inclusive=False))
    power_w = fields.Float(required=True, allow_nan=False, validate=validate.Range(min=0, min_inclusive=False))
    energy_per_step_j = fields.Float(allow_nan=False, validate=validate.Range(min=0, min_inclusive=False))
    relative_throughput = fields.Float(allow_nan=False, validate=validate.Range(min=0, min_inclusive=False))
    reference_steps_per_s = fields.Float(allow_nan=False, validate=validate.Range(min=0, min_inclusive=False))
    method = Text(load_default="", validate=validate.Length(max=2000))
    measured_at = Aware()


@blp.route("/profiles")
@blp.arguments(ProfileQuery, location="query")
@blp.response(200, ProfileOut(many=True))
def list_profiles(query: dict[str, Any]) -> Any:
    """The profile in force for every (hardware, class): measured where measured, else the catalog estimate."""
    return profiles.effective(extensions.db_session(), hardware=query.get("hardware"),
                              workload_class=query.get("workload_class"), flagged=query.get("flagged"))  # fmt: skip


@blp.route("/profiles/flagged")
@blp.response(200, ProfileOut(many=True))
def flagged_profiles() -> Any:
    """Profiles whose measurement disproved the profile it replaced by more than 20 %."""
    return profiles.effective(extensions.db_session(), flagged=True)


@blp.route("/profiles/<hardware>/<workload_class>")
@blp.response(200, ProfileOut)
def get_profile(hardware: str, workload_class: str) -> Any:
    return profiles.current(extensions.db_session(), hardware, workload_class)


def _operator_first(view: Callable[..., Any]) -> Callable[..., Any]:
    """Refuse a non-operator before the body is parsed: a read-only token gets 403 whatever it sends."""

    @functools.wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        operator()
        return view(*args, **kwargs)

    return wrapper


@blp.route("/profiles", methods=["POST"])
@_operator_first
@blp.arguments(MeasurementIn)
@blp.response(201, ProfileOut)
def post_measurement(data: dict[str, Any]) -> Any:
    """Record a measurement; it becomes the profile in force (operator admin). Bad input changes nothing."""
    p = operator()
    db = extensions.db_session()
    row = profiles.record_measurement(db, profiles.Measurement(**data))
    audit.record(db, p, "profile.measured", "profile", f"{data['hardware']}/{data['workload_class']}",
                 power_w=data["power_w"], steps_per_s=data["steps_per_s"], flagged=row.flagged)  # fmt: skip
    db.commit()
    return profiles.current(db, data["hardware"], data["workload_class"])
