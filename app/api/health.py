"""Liveness and readiness: answers without a token."""

from __future__ import annotations

from flask_smorest import Blueprint

from app import extensions
from app.services import health as health_service

blp = Blueprint("health", __name__, url_prefix="/api/v1/health", description="Service health")


@blp.route("")
@blp.doc(security=[])
@blp.response(200)
def health() -> dict[str, object]:
    """Database reachable and migrated."""
    return {"status": "ok", **health_service.database_status(extensions.db_session())}
