"""Run Alembic programmatically: ``gridshift db upgrade`` and the test fixtures use this; and check, before a command
or a server starts, that the database is at the revision this code expects (:func:`check_schema`)."""

from __future__ import annotations

import sys
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from app.config import Settings

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


def alembic_config(settings: Settings) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", settings.effective_database_url.replace("%", "%%"))
    if settings.is_sqlite:
        settings.var_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # the database: never readable by jobs
    return cfg


def upgrade(settings: Settings, revision: str = "head") -> None:
    command.upgrade(alembic_config(settings), revision)


def downgrade(settings: Settings, revision: str = "base") -> None:
    command.downgrade(alembic_config(settings), revision)


def heads(settings: Settings) -> list[str]:
    return list(ScriptDirectory.from_config(alembic_config(settings)).get_heads())


class SchemaNotReady(Exception):
    """The database is missing, unreachable, or not at the migrations' head; the message is one line saying what
    to do."""


def check_schema(settings: Settings) -> None:
    """Raise :class:`SchemaNotReady` unless the database exists and is at the revision this code expects.

    Read only: it creates nothing (not even an SQLite file) and never migrates; ``gridshift db upgrade`` does.
    """
    from sqlalchemy import create_engine, inspect, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError
    from sqlalchemy.pool import NullPool

    url = make_url(settings.effective_database_url)
    where = url.render_as_string(hide_password=True)
    script = ScriptDirectory(str(MIGRATIONS_DIR))
    expected = set(script.get_heads())
    upgrade_hint = "run `gridshift db upgrade`"
    local_file = url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:")
    if local_file and not Path(str(url.database)).is_file():
        raise SchemaNotReady(f"no database at {url.database}: {upgrade_hint} to create it")
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            # read directly (alembic's MigrationContext logs two INFO lines on every look)
            has_table = inspect(conn).has_table("alembic_version")
            current = set(conn.scalars(text("SELECT version_num FROM alembic_version"))) if has_table else set()
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise SchemaNotReady(f"cannot open the database {where}: {reason}") from None
    finally:
        engine.dispose()
    if current == expected:
        return
    want = ", ".join(sorted(expected))
    if not current:
        raise SchemaNotReady(f"the database {where} has no schema yet (code expects revision {want}): {upgrade_hint}")
    have = ", ".join(sorted(current))
    known = {rev.revision for rev in script.walk_revisions()}
    if current - known:
        raise SchemaNotReady(f"the database is at revision {have}, which this code does not know (it expects {want}):"
                             " it was migrated by newer code; run that version")
    raise SchemaNotReady(f"the database is at revision {have}, code expects {want}: {upgrade_hint}")


def require_schema(settings: Settings, role: str) -> None:
    """For a server's entry module (gunicorn's ``app.wsgi``, celery's ``app.worker``): exit with one line on stderr
    and status 3 (gunicorn's "worker failed to boot", which stops its master) unless :func:`check_schema` passes."""
    try:
        check_schema(settings)
    except SchemaNotReady as exc:
        print(f"gridshift {role}: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(3) from None
