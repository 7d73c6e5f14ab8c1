"""Liveness and readiness: answers without a token."""

from __future__ import annotations

from flask_smorest import Blueprint
from sqlalchemy import text

from app import extensions

blp = Blueprint("health", __name__, url_prefix="/api/v1/health", description="Service health")


@blp.route("")
@blp.doc(security=[])
@blp.response(200)
def health() -> dict[str, object]:
    """Database reachable and migrated."""
    db = extensions.db_session()
    revision = db.execute(text("SELECT version_num FROM alembic_version")).scalar()
    return {"status": "ok", "database": db.bind.dialect.name if db.bind else "?", "schema_revision": revision}
