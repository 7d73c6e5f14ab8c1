"""Engine, sessions and the column types every table shares. Only ``app`` holds a database session."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Engine, create_engine, event, exc
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker
from sqlalchemy.types import TypeDecorator

from app.config import Settings


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetime on every backend (SQLite stores naive UTC, PostgreSQL ``timestamptz``)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value.isoformat()} given where an aware UTC time is required")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


JSONType = JSON().with_variant(JSONB(), "postgresql")


# Timestamps are stored in UTC: a year near 1 or 9999 overflows the conversion, so input takes these years only.
FIRST_YEAR, LAST_YEAR = 1900, 2999


def utcnow() -> datetime:
    return datetime.now(UTC)


def is_postgresql(session: Session) -> bool:
    """Whether ``session`` talks to PostgreSQL (row locks, SKIP LOCKED, advisory locks) rather than SQLite."""
    return session.get_bind().dialect.name == "postgresql"


class Base(DeclarativeBase):
    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: JSONType, list[Any]: JSONType}


def make_engine(settings: Settings) -> Engine:
    url = settings.effective_database_url
    if url.startswith("sqlite"):
        settings.var_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # the database: never readable by jobs
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        return engine
    _fast_json_for_psycopg()
    engine = create_engine(url, pool_size=10, max_overflow=20)
    _ping_when_idle(engine)
    return engine


def _fast_json_for_psycopg() -> None:
    """Decode json/jsonb columns with orjson: a page of 50 jobs holds 200 JSON values, and the standard library's
    decoder was a quarter of that request's CPU. Same values, same types (orjson parses RFC 8259 JSON, which is
    all PostgreSQL stores)."""
    import orjson
    from psycopg.types.json import set_json_loads

    set_json_loads(orjson.loads)


IDLE_PING_S = 5.0


def _ping_when_idle(engine: Engine) -> None:
    """Check a pooled connection before use only if it sat idle for more than ``IDLE_PING_S`` seconds.

    SQLAlchemy's ``pool_pre_ping`` pings on every checkout: one extra round trip per request, about a third of
    the database cost of a simple read under load. A connection used a moment ago is almost surely alive; one that
    sat idle may have outlived a server restart, and is replaced before use. A restart under load still fails the
    requests in flight; SQLAlchemy then discards the whole pool, the API answers 503 with Retry-After (clients
    retry with their Idempotency-Key) and Celery tasks retry.
    """

    @event.listens_for(engine, "checkin")
    def _checked_in(_dbapi_conn: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.get("idle_since")
        if idle_since is None or time.monotonic() - idle_since <= IDLE_PING_S:
            return
        try:
            cur = dbapi_conn.cursor()
            cur.execute("SELECT 1")
            cur.close()
            dbapi_conn.rollback()
        except Exception as err:  # any failure means this connection is unusable: the pool opens a new one
            raise exc.DisconnectionError(f"stale pooled connection: {err}") from err


def read_engine(engine: Engine) -> Engine:
    """The engine for API reads: on PostgreSQL the same pool in autocommit mode, elsewhere ``engine`` itself.

    A read in a transaction costs three round trips (BEGIN, the query, the ROLLBACK when the connection returns to
    the pool); in autocommit it costs one. Under READ COMMITTED, PostgreSQL's default and ours, every statement
    takes its own snapshot inside a transaction too, so a read sees the same data either way. The one write a read
    may make, the coarse ``last_used_at`` of a bearer token, is a single UPDATE and stays atomic.
    """
    if engine.dialect.name != "postgresql":
        return engine
    return engine.execution_options(isolation_level="AUTOCOMMIT")


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False)


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One unit of work: commit on success, roll back on any error."""
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
