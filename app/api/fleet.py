"""Fleet administration: regions and power budgets, hardware types, inventory, clusters.

Everyone may read the fleet; changes need an admin token of the operator tenant, and each is audited.
"""

from __future__ import annotations

from typing import Any

from flask import Response, jsonify
from flask_smorest import Blueprint
from marshmallow import Schema, ValidationError, fields, validate

from app import extensions
from app.api.access import first, operator
from app.api.schemas import CODE, Aware, Text
from app.errors import FieldError, ValidationFailed
from app.services import audit, fleet

blp = Blueprint("fleet", __name__, url_prefix="/api/v1", description="Regions, hardware, inventory, clusters")


class OverrideOut(Schema):
    id = fields.Integer()
    start_at = fields.DateTime(format="iso")
    end_at = fields.DateTime(format="iso")
    power_kw = fields.Float()
    reason = fields.String()


class InventoryOut(Schema):
    hardware = fields.Function(lambda i: i.hardware_type.code)
    gpu_count = fields.Integer()


class RegionIn(Schema):
    name = Text(validate=validate.Length(1, 200))
    zone = fields.String(validate=CODE)
    timezone = Text(validate=validate.Length(1, 64))
    currency = Text(validate=validate.Length(3, 3))
    pue = fields.Float(validate=validate.Range(1.0, 3.0), allow_nan=False)
    power_budget_kw = fields.Float(validate=validate.Range(min=0, min_inclusive=False), allow_nan=False)
    residency_tags = fields.List(fields.String(validate=CODE))


class RegionOut(RegionIn):
    code = fields.String()
    overrides = fields.List(fields.Nested(OverrideOut))
    inventory = fields.List(fields.Nested(InventoryOut))


class OverrideIn(Schema):
    start_at = Aware(required=True)
    end_at = Aware(required=True)
    power_kw = fields.Float(required=True, validate=validate.Range(min=0), allow_nan=False)
    reason = Text(load_default="", validate=validate.Length(max=200))


class HardwareIn(Schema):
    vendor = Text(validate=validate.Length(1, 32))
    model = Text(validate=validate.Length(1, 100))
    memory_gb = fields.Float(validate=validate.Range(min=0, min_inclusive=False), allow_nan=False)
    memory_bandwidth_gbs = fields.Float(validate=validate.Range(min=0), allow_nan=False, allow_none=True)
    bf16_tflops = fields.Float(validate=validate.Range(min=0), allow_nan=False, allow_none=True)
    tdp_w = fields.Float(validate=validate.Range(min=0, min_inclusive=False), allow_nan=False)
    idle_w = fields.Float(validate=validate.Range(min=0), allow_nan=False)
    resource_name = Text(validate=validate.Length(1, 64))
    relative_throughput = fields.Dict(keys=Text(), values=fields.Float(allow_nan=False))
    sources = fields.Dict(keys=fields.String(), values=fields.Raw())


class HardwareOut(HardwareIn):
    code = fields.String()


class InventoryIn(Schema):
    gpu_count = fields.Integer(required=True, strict=True, validate=validate.Range(min=0, max=1_000_000))


class ClusterIn(Schema):
    region = fields.String(required=True, validate=CODE)
    kind = fields.String(required=True, validate=CODE)
    config = fields.Dict(load_default=dict)
    enabled = fields.Boolean(load_default=True)
    secrets = fields.Dict(keys=Text(validate=validate.Length(1, 100)), load_only=True, load_default=None,
                          metadata={"description": "credentials, stored encrypted and never returned"})


def _redacted(kind: str, config: dict[str, Any]) -> dict[str, Any]:
    from connectors.registry import credential_fields

    hidden = set(credential_fields(kind, config))
    return {k: ("***" if k in hidden else v) for k, v in config.items()}


class ClusterOut(Schema):
    name = fields.String()
    region = fields.Function(lambda c: c.region.code)
    kind = fields.String()
    # a credential stored in config before config refused them is never echoed
    config = fields.Function(lambda c: _redacted(c.kind, c.config or {}), metadata={"type": "object"})
    enabled = fields.Boolean()
    has_secrets = fields.Function(lambda c: c.secrets_encrypted is not None, dump_only=True)


CLUSTER_NAME = validate.Regexp(r"^[^\x00]{1,100}$", error="1-100 characters, no NUL")  # the column's length


def _path(value: str, name: str, check: validate.Validator = CODE) -> str:
    """A name from the URL that is about to be stored, checked as a body's field would be (422 naming it)."""
    try:
        check(value)
    except ValidationError as exc:
        raise ValidationFailed(f"bad {name}", [FieldError(name, "; ".join(map(str, exc.messages)))]) from None
    return value


@blp.route("/regions")
@blp.response(200, RegionOut(many=True))
def list_regions() -> Response:
    """Every region with its power-budget overrides and inventory."""
    return jsonify(fleet.regions_json(extensions.db_session()))


@blp.route("/regions/<code>")
@blp.response(200, RegionOut)
def get_region(code: str) -> Any:
    return fleet.region_details(extensions.db_session(), code)


@blp.route("/regions/<code>", methods=["PUT"])
@first(operator)
@blp.arguments(RegionIn)
@blp.response(200, RegionOut)
def put_region(data: dict[str, Any], code: str) -> Any:
    """Create or update a region (operator admin)."""
    p = operator()
    _path(code, "code")
    db = extensions.db_session()
    cfg = extensions.settings()
    fleet.upsert_region(db, code, data, currencies={cfg.reporting_currency, *cfg.exchange_rates})
    audit.record(db, p, "region.put", "region", code, **{k: str(v) for k, v in data.items()})
    db.commit()
    return fleet.region_details(extensions.db_session(), code)


@blp.route("/regions/<code>/overrides", methods=["POST"])
@first(operator)
@blp.arguments(OverrideIn)
@blp.response(201, OverrideOut)
def add_override(data: dict[str, Any], code: str) -> Any:
    """Add a time window with another power budget, e.g. a demand-response curtailment (operator admin)."""
    p = operator()
    db = extensions.db_session()
    row = fleet.add_override(db, code, **data)
    audit.record(db, p, "region.budget_override", "region", code, power_kw=data["power_kw"],
                 start_at=data["start_at"].isoformat(), end_at=data["end_at"].isoformat())
    db.commit()
    return row


@blp.route("/hardware")
@blp.response(200, HardwareOut(many=True))
def list_hardware() -> Any:
    return fleet.list_hardware(extensions.db_session())


@blp.route("/hardware/<code>")
@blp.response(200, HardwareOut)
def get_hardware(code: str) -> Any:
    return fleet.get_hardware(extensions.db_session(), code)


@blp.route("/hardware/<code>", methods=["PUT"])
@first(operator)
@blp.arguments(HardwareIn)
@blp.response(200, HardwareOut)
def put_hardware(data: dict[str, Any], code: str) -> Any:
    """Create or update a hardware type (operator admin)."""
    p = operator()
    _path(code, "code")
    db = extensions.db_session()
    hw = fleet.upsert_hardware(db, code, data)
    audit.record(db, p, "hardware.put", "hardware", code)
    db.commit()
    return hw


@blp.route("/regions/<code>/inventory/<hw>", methods=["PUT"])
@first(operator)
@blp.arguments(InventoryIn)
@blp.response(200, InventoryOut)
def put_inventory(data: dict[str, Any], code: str, hw: str) -> Any:
    """Set how many GPUs of a hardware type a region has (operator admin)."""
    p = operator()
    db = extensions.db_session()
    row = fleet.set_inventory(db, code, hw, data["gpu_count"])
    audit.record(db, p, "inventory.put", "region", code, hardware=hw, gpu_count=data["gpu_count"])
    db.commit()
    return row


@blp.route("/clusters")
@blp.response(200, ClusterOut(many=True))
def list_clusters() -> Any:
    operator()
    return fleet.list_clusters(extensions.db_session())


@blp.route("/clusters/<name>", methods=["PUT"])
@first(operator)
@blp.arguments(ClusterIn)
@blp.response(200, ClusterOut)
def put_cluster(data: dict[str, Any], name: str) -> Any:
    """Create or update a cluster: a region's runtime reached through a connector (operator admin)."""
    p = operator()
    _path(name, "name", CLUSTER_NAME)
    db = extensions.db_session()
    row = fleet.upsert_cluster(db, name, data["region"], data["kind"], data["config"], data["enabled"],
                               secrets=data.get("secrets"), keys=extensions.settings().encryption_keys)
    audit.record(db, p, "cluster.put", "cluster", name, kind=data["kind"], region=data["region"])
    db.commit()
    return row
