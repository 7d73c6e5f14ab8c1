"""A database behind the code (or missing) stops every command and server with one line saying what to run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from click.testing import CliRunner, Result
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app import migrate
from app.cli import main
from app.config import Settings
from tests.conftest import REPO

SCRIPT = ScriptDirectory(str(migrate.MIGRATIONS_DIR))
(HEAD,) = SCRIPT.get_heads()
BEFORE_HEAD = str(SCRIPT.get_revision(HEAD).down_revision)

#: Commands a user runs against the database, each with arguments it accepts.
COMMANDS = [("plan", "--dry-run"), ("jobs", "list", "--tenant", "acme"), ("tenant", "create", "acme"),
            ("report", "--month", "2026-11", "--format", "table"), ("hardware", "list"), ("keys", "status")]


def gs(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def one_clear_line(res: Result, *words: str) -> None:
    assert res.exit_code != 0
    assert "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception  # no error escaped
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1, res.output
    for word in words:
        assert word in lines[0], res.output


@pytest.fixture
def embedded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Settings:
    """The embedded default in tmp_path, with no database yet."""
    for var in ("GRIDSHIFT_DATABASE_URL", "GRIDSHIFT_BROKER_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GRIDSHIFT_VAR_DIR", str(tmp_path))
    return Settings.from_env()


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_a_database_one_migration_behind_names_both_revisions_and_the_command(embedded: Settings, args) -> None:
    migrate.upgrade(embedded, BEFORE_HEAD)
    one_clear_line(gs(*args), f"revision {BEFORE_HEAD}", f"expects {HEAD}", "gridshift db upgrade")


def test_after_the_upgrade_the_same_command_runs(embedded: Settings) -> None:
    migrate.upgrade(embedded, BEFORE_HEAD)
    assert gs("tenant", "create", "acme").exit_code != 0
    upgraded = gs("db", "upgrade")  # the command the line names works on the old database
    assert upgraded.exit_code == 0, upgraded.output
    res = gs("tenant", "create", "acme")
    assert res.exit_code == 0 and "tenant acme created" in res.output, res.output


def test_a_missing_database_is_not_created_by_a_command(embedded: Settings) -> None:
    db_file = Path(str(make_url(embedded.effective_database_url).database))
    one_clear_line(gs("plan", "--dry-run"), "no database", str(db_file), "gridshift db upgrade")
    assert not db_file.exists()


def test_help_and_key_generation_need_no_database(embedded: Settings) -> None:
    assert gs("plan", "--help").exit_code == 0
    assert gs("keys", "generate").exit_code == 0


def test_a_database_migrated_by_newer_code_is_named_as_such(embedded: Settings) -> None:
    migrate.upgrade(embedded)
    engine = create_engine(embedded.effective_database_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'f00dbeef'"))
    engine.dispose()
    one_clear_line(gs("jobs", "list", "--tenant", "acme"), "f00dbeef", "does not know", f"expects {HEAD}")


def test_an_unreachable_database_is_one_line_naming_it_without_its_password() -> None:
    base = os.environ.get("GRIDSHIFT_TEST_DATABASE_URL", "")
    if not base.startswith("postgresql"):
        pytest.skip("needs PostgreSQL (GRIDSHIFT_TEST_DATABASE_URL)")
    url = make_url(base).set(database="gridshift_no_such_database", password="s3cret")
    with pytest.raises(migrate.SchemaNotReady) as err:
        migrate.check_schema(Settings(database_url=url.render_as_string(hide_password=False)))
    message = str(err.value)
    assert "gridshift_no_such_database" in message and "s3cret" not in message and "\n" not in message


@pytest.mark.parametrize("module", ["app.wsgi", "app.worker"])
def test_web_and_worker_refuse_to_start_on_an_old_database_with_one_line(embedded: Settings, module: str) -> None:
    migrate.upgrade(embedded, BEFORE_HEAD)
    env = {**os.environ, "GRIDSHIFT_VAR_DIR": str(embedded.var_dir)}
    env.pop("GRIDSHIFT_DATABASE_URL", None)
    res = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert res.returncode == 3  # gunicorn's "worker failed to boot": its master stops instead of re-forking
    assert "Traceback" not in res.stderr
    assert f"revision {BEFORE_HEAD}, code expects {HEAD}: run `gridshift db upgrade`" in res.stderr.strip()
