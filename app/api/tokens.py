"""Tenants and API tokens: an admin issues, lists and revokes its tenant's tokens; a token is shown once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from flask_smorest import Blueprint
from marshmallow import Schema, fields, validate

from app import extensions
from app.api import principal
from app.api.access import first, operator
from app.api.schemas import Text
from app.enums import Role
from app.errors import Forbidden
from app.services import audit, auth

blp = Blueprint("tokens", __name__, url_prefix="/api/v1", description="Tenants and API tokens")


class TokenIn(Schema):
    name = Text(required=True, validate=validate.Length(1, 100))
    role = fields.Enum(Role, by_value=True, load_default=Role.MEMBER)
    expires_in_days = fields.Integer(strict=True, validate=validate.Range(1, 3650), load_default=None)


class TokenOut(Schema):
    id = fields.Integer()
    name = fields.String()
    prefix = fields.String()
    role = fields.Enum(Role, by_value=True)
    created_at = fields.DateTime(format="iso")
    expires_at = fields.DateTime(format="iso", allow_none=True)
    revoked_at = fields.DateTime(format="iso", allow_none=True)
    last_used_at = fields.DateTime(format="iso", allow_none=True)


class NewTokenOut(TokenOut):
    token = fields.String(metadata={"description": "shown once; store it now"})


class TenantIn(Schema):
    slug = Text(required=True, validate=validate.Length(1, 63))
    name = Text(validate=validate.Length(1, 200))
    admin_token_name = Text(load_default="admin", validate=validate.Length(1, 100))


class MeOut(Schema):
    tenant = fields.String()
    role = fields.String()
    token = fields.String()
    is_operator = fields.Boolean()


def _admin() -> auth.Principal:
    p = principal()
    if p.role != Role.ADMIN:
        raise Forbidden("managing tokens needs an admin token")
    return p


@blp.route("/me")
@blp.response(200, MeOut)
def me() -> Any:
    """Who the caller is."""
    p = principal()
    return {"tenant": p.tenant_slug, "role": p.role.value, "token": p.token_name, "is_operator": p.is_operator}


@blp.route("/tokens")
@blp.response(200, TokenOut(many=True))
def list_tokens() -> Any:
    p = _admin()
    return auth.list_tokens(extensions.db_session(), p.tenant_id)


@blp.route("/tokens", methods=["POST"])
@first(_admin)
@blp.arguments(TokenIn)
@blp.response(201, NewTokenOut)
def create_token(data: dict[str, Any]) -> Any:
    """Issue a token for the caller's tenant; the secret is in this response only."""
    p = _admin()
    db = extensions.db_session()
    tenant = auth.get_tenant(db, p.tenant_slug)
    days = data.get("expires_in_days")
    row, plaintext = auth.issue_token(db, tenant, data["name"], data["role"],
                                      expires_in=timedelta(days=days) if days else None,
                                      max_live=extensions.settings().max_tokens_per_tenant)
    audit.record(db, p, "token.create", "token", row.id, role=row.role.value)
    db.commit()
    out = {name: getattr(row, name) for name in TokenOut().fields}  # dumped once, by the response schema
    out["token"] = plaintext
    return out


@blp.route("/tokens/<int:token_id>", methods=["DELETE"])
@blp.response(200, TokenOut)
def revoke_token(token_id: int) -> Any:
    p = _admin()
    db = extensions.db_session()
    row = auth.revoke_token(db, p.tenant_id, token_id)
    audit.record(db, p, "token.revoke", "token", token_id)
    db.commit()
    extensions.state().principals.forget(token_id)
    return row


@blp.route("/tenants", methods=["POST"])
@first(operator)
@blp.arguments(TenantIn)
@blp.response(201, NewTokenOut)
def create_tenant(data: dict[str, Any]) -> Any:
    """Create a tenant with its first admin token (operator admin)."""
    p = operator()
    db = extensions.db_session()
    tenant = auth.create_tenant(db, data["slug"], data.get("name"))
    row, plaintext = auth.issue_token(db, tenant, data["admin_token_name"], Role.ADMIN)
    audit.record(db, p, "tenant.create", "tenant", tenant.slug)
    db.commit()
    out = {name: getattr(row, name) for name in TokenOut().fields}  # dumped once, by the response schema
    out["token"] = plaintext
    return out
