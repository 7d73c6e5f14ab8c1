"""Alembic migrations on SQLite and PostgreSQL, with data present.

- one head; upgrade from empty builds exactly the schema the models declare (autogenerate finds no difference);
- with data in the tables, each revision steps down and back up again without losing rows of the tables it keeps;
- downgrade to base drops everything; upgrade again from there works.

PostgreSQL runs in a scratch database created next to ``GRIDSHIFT_TEST_DATABASE_URL`` (or on
``GRIDSHIFT_TEST_MIGRATIONS_PG_URL``, a server URL); the test is skipped with the reason when neither names one.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, func, inspect, select, text
from sqlalchemy.engine import make_url

from app import migrate
from app.config import Settings
from app.db import Base, make_engine, make_session_factory
from app.enums import Role
from app.models import ApiToken, Job, Region
from app.services import auth, fleet, jobs
from app.services.auth import principal_for


def _pg_server_url() -> str | None:
    url = os.environ.get("GRIDSHIFT_TEST_MIGRATIONS_PG_URL") or os.environ.get(
        "GRIDSHIFT_TEST_DATABASE_URL", ""
    )
    return url if url.startswith("postgresql") else None


@pytest.fixture(params=["sqlite", "postgresql"])
def scratch(request, tmp_path) -> Iterator[Settings]:  # type: ignore[no-untyped-def]
    """Settings on an empty scratch database of each kind."""
    if request.param == "sqlite":
        yield Settings(var_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'mig.db'}", secret_key="x")
        return
    server = _pg_server_url()
    if server is None:
        pytest.skip(
            "PostgreSQL migrations need GRIDSHIFT_TEST_DATABASE_URL or GRIDSHIFT_TEST_MIGRATIONS_PG_URL"
        )
    name = f"gs_mig_{uuid.uuid4().hex[:10]}"
    admin = create_engine(make_url(server).set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(server).set(database=name).render_as_string(hide_password=False)
    try:
        yield Settings(var_dir=tmp_path, database_url=url, secret_key="x")
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _tables(settings: Settings) -> set[str]:
    engine = make_engine(settings)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def _seed(settings: Settings) -> int:
    """A tenant, a token, a small fleet and three jobs through the services; returns the job count."""
    engine = make_engine(settings)
    with make_session_factory(engine)() as s:
        tenant = auth.create_tenant(s, "mig")
        row, _ = auth.issue_token(s, tenant, "mig", Role.MEMBER)
        fleet.upsert_hardware(
            s, "h100", dict(vendor="nvidia", model="H100", memory_gb=80, tdp_w=700, idle_w=90)
        )
        fleet.upsert_region(s, "de", dict(zone="DE", power_budget_kw=100, residency_tags=["eu"]))
        fleet.set_inventory(s, "de", "h100", 8)
        now = datetime(2030, 1, 1, tzinfo=UTC)
        item = {
            "name": "j",
            "gpu_count": 1,
            "reference_gpu_hours": 1.0,
            "release_at": now,
            "deadline_at": now + timedelta(hours=6),
        }
        jobs.submit_jobs(s, principal_for(row), [item] * 3, now=now)
        s.commit()
    engine.dispose()
    return 3


def _count(settings: Settings, model) -> int | None:  # type: ignore[no-untyped-def]
    engine = make_engine(settings)
    try:
        if model.__tablename__ not in inspect(engine).get_table_names():
            return None
        with engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(model)).scalar_one())
    finally:
        engine.dispose()


def test_one_head():
    assert len(migrate.heads(Settings())) == 1


def test_upgrade_from_empty_matches_the_models(scratch):
    migrate.upgrade(scratch)
    assert _tables(scratch) == set(Base.metadata.tables)
    engine = make_engine(scratch)
    with engine.connect() as conn:
        diffs = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    engine.dispose()
    assert diffs == [], diffs


def test_each_revision_steps_down_and_up_with_data(scratch):
    migrate.upgrade(scratch)
    n_jobs = _seed(scratch)
    script = ScriptDirectory.from_config(migrate.alembic_config(scratch))
    for rev in script.walk_revisions():  # newest first
        if rev.down_revision is None:
            continue  # stepping below the first revision is the base test below
        assert isinstance(rev.down_revision, str)  # one parent: the history has no merge revisions
        migrate.downgrade(scratch, rev.down_revision)
        kept = _count(scratch, Job)
        assert kept in (None, n_jobs), f"downgrade below {rev.revision} lost jobs: {kept} of {n_jobs}"
        migrate.upgrade(scratch, rev.revision)
        assert _count(scratch, Job) == n_jobs, f"re-upgrade to {rev.revision} lost jobs"
    assert _count(scratch, Region) == 1 and _count(scratch, ApiToken) == 1


def test_downgrade_to_base_with_data_then_upgrade_again(scratch):
    migrate.upgrade(scratch)
    _seed(scratch)
    migrate.downgrade(scratch, "base")
    assert _tables(scratch) == set()
    migrate.upgrade(scratch)
    assert _tables(scratch) == set(Base.metadata.tables)
    assert _count(scratch, Job) == 0
    assert _seed(scratch) == _count(scratch, Job)  # the rebuilt schema takes the same data again


def test_runs_stored_before_the_hardware_column_keep_their_hardware(scratch):
    """Runs dispatched before ``runs.hardware_type_id`` had their hardware only inside the run key; the upgrade reads
    it from there once, and a key it cannot read leaves the column empty."""
    migrate.upgrade(scratch)
    _seed(scratch)
    engine = make_engine(scratch)
    with engine.begin() as conn:
        job_ids = list(conn.execute(text("SELECT id FROM jobs ORDER BY id")).scalars())
        hw_id = conn.execute(text("SELECT id FROM hardware_types WHERE code = 'h100'")).scalar_one()
        for job_id, key in zip(job_ids, (f"gs-{job_ids[0]}-1-h100-3fa9c2", "someone-elses-key"), strict=False):
            conn.execute(text("INSERT INTO runs (job_id, attempt, run_key, state, created_at) "
                              "VALUES (:job, 1, :key, 'succeeded', :at)"),
                         {"job": job_id, "key": key, "at": datetime(2030, 1, 1, tzinfo=UTC)})
    script = ScriptDirectory.from_config(migrate.alembic_config(scratch))
    below = script.get_revision("0004").down_revision
    assert isinstance(below, str)
    migrate.downgrade(scratch, below)  # the schema those runs were stored under
    migrate.upgrade(scratch)
    with engine.connect() as conn:
        got = {key: hw for key, hw in conn.execute(text("SELECT run_key, hardware_type_id FROM runs"))}
    engine.dispose()
    assert got == {f"gs-{job_ids[0]}-1-h100-3fa9c2": hw_id, "someone-elses-key": None}


def test_simulations_table_steps_down_to_0009_and_back_keeping_the_jobs(scratch):
    """0010 adds ``simulations`` only: going down to 0009 drops it and keeps every job; up again it stores one."""
    from app.enums import PlanRunState
    from app.models import Simulation

    migrate.upgrade(scratch)
    n_jobs = _seed(scratch)
    engine = make_engine(scratch)

    def store() -> None:
        with make_session_factory(engine)() as s:
            s.add(Simulation(state=PlanRunState.QUEUED, period_start=datetime(2029, 1, 1, tzinfo=UTC), days=3,
                             days_done=0, scenario={"regions": {"de": {"gpus": {"h100": 16}}}}))
            s.commit()

    store()
    assert _count(scratch, Simulation) == 1
    migrate.downgrade(scratch, "0009")
    assert "simulations" not in _tables(scratch) and _count(scratch, Job) == n_jobs
    migrate.upgrade(scratch)
    assert _count(scratch, Simulation) == 0
    store()
    with make_session_factory(engine)() as s:
        row = s.scalars(select(Simulation)).one()
        assert row.scenario == {"regions": {"de": {"gpus": {"h100": 16}}}} and row.period_start.tzinfo is not None
    engine.dispose()
