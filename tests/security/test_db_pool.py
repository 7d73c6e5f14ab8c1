"""The connection pool survives a database that dropped its connections (a restart, a failover, an idle timeout)."""

from __future__ import annotations

import pytest
from sqlalchemy import text

import app.db as db_module
from app.db import make_engine


def test_idle_connection_killed_by_the_server_is_replaced_before_use(settings, monkeypatch):
    if settings.is_sqlite:
        pytest.skip("needs a database server that can drop a client's connection (PostgreSQL)")
    engine = make_engine(settings)
    try:
        with engine.connect() as conn:
            first_pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        with make_engine(settings).connect() as admin:  # the "restart": the server ends that backend
            assert admin.execute(text("SELECT pg_terminate_backend(:p)"), {"p": first_pid}).scalar_one()
            admin.commit()
        monkeypatch.setattr(db_module, "IDLE_PING_S", 0.0)  # the pooled connection now counts as idle
        with engine.connect() as conn:
            second_pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        assert second_pid != first_pid  # checked, found dead, replaced: the caller saw no error
    finally:
        engine.dispose()


def test_busy_connection_is_not_pinged(settings):
    """Within IDLE_PING_S of its last use a pooled connection goes straight back into service (no extra query)."""
    engine = make_engine(settings)
    statements: list[str] = []
    from sqlalchemy import event

    @event.listens_for(engine, "before_cursor_execute")
    def _seen(_c, _cur, statement, *_a):  # type: ignore[no-untyped-def]
        statements.append(statement)

    try:
        for _ in range(3):
            with engine.connect() as conn:
                conn.execute(text("SELECT 42"))
        assert statements == ["SELECT 42"] * 3
    finally:
        engine.dispose()
