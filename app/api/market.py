"""Market series: import a CSV upload, query a range."""

from __future__ import annotations

from typing import Any

from flask import request
from flask_smorest import Blueprint
from marshmallow import Schema, fields, validate

from app import extensions
from app.api.access import first, operator
from app.api.schemas import CODE, SeriesRangeQuery, Text
from app.errors import FieldError, ValidationFailed
from app.services import audit, market

blp = Blueprint("market", __name__, url_prefix="/api/v1/market-series", description="Prices, carbon, load")


class PointOut(Schema):
    ts = fields.DateTime(format="iso")
    value = fields.Float()
    unit = fields.String()
    source = fields.String()
    issued_at = fields.DateTime(format="iso", allow_none=True)


class SeriesOut(Schema):
    zone = fields.String()
    kind = fields.String()
    points = fields.List(fields.Nested(PointOut))


class ImportQuery(Schema):
    zone = fields.String(validate=CODE)
    source = Text(load_default="upload", validate=validate.Length(1, 64))


class ImportOut(Schema):
    imported = fields.Integer()


@blp.route("")
@blp.arguments(SeriesRangeQuery, location="query")
@blp.response(200, SeriesOut)
def get_series(q: dict[str, Any]) -> Any:
    """Points of one zone's series in [from, to) (at most 10,000)."""
    rows = market.query(extensions.db_session(), q["zone"], q["kind"], q["from_"], q["to"])
    return {"zone": q["zone"], "kind": q["kind"].value, "points": rows}


@blp.route("/import", methods=["POST"])
@first(operator)
@blp.arguments(ImportQuery, location="query")
@blp.response(201, ImportOut)
@blp.doc(requestBody={"content": {"text/csv": {"schema": {"type": "string"}},
                                  "multipart/form-data": {"schema": {"type": "object", "properties": {
                                      "file": {"type": "string", "format": "binary"}}}}}})
def import_csv(q: dict[str, Any]) -> Any:
    """Import a CSV (harmonized or long format; see the README). A bad line rejects the whole file."""
    p = operator()
    upload = request.files.get("file")
    data = upload.read() if upload else request.get_data()
    if not data:
        raise ValidationFailed("no file", [FieldError("file", "send the CSV as the body or as form field 'file'")])
    points = market.parse_upload(data, zone=q.get("zone"), source=q["source"])
    db = extensions.db_session()
    n = market.store(db, points)
    audit.record(db, p, "market.import", "market_series", q.get("zone"), points=n, source=q["source"])
    db.commit()
    return {"imported": n}
