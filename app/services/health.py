"""Service health: the database answers and carries a schema revision."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session


def database_status(session: Session) -> dict[str, object]:
    """The database's dialect and the Alembic revision its schema is at (None before the first migration)."""
    revision = session.execute(text("SELECT version_num FROM alembic_version")).scalar()
    return {"database": session.bind.dialect.name if session.bind else "?", "schema_revision": revision}
