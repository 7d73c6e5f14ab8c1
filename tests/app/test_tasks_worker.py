"""The full dispatch path with a real Celery worker process: embedded default and PostgreSQL + Redis.

The embedded variant uses a fresh SQLite database and Celery's SQLAlchemy transport (``sqla+sqlite``) under a
temporary directory: no server at all. The other needs PostgreSQL and Redis on loopback. The database is the suite's when it is PostgreSQL, else
``GRIDSHIFT_TEST_PG_URL`` (default ``postgresql+psycopg://postgres@127.0.0.1:5432/gs_dispatch_worker``, created
if missing; its schema is rebuilt). Redis is ``GRIDSHIFT_TEST_REDIS_URL``, else ``GRIDSHIFT_TEST_BROKER_URL`` when
it names Redis, else ``redis://127.0.0.1:6379/1``; the test flushes that logical database. Either one missing skips these tests with the reason.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app import create_app, migrate
from app.config import Settings
from app.enums import JobState, RunState
from app.models import Job
from app.services import auth
from tests.app.test_dispatch_support import (
    add_job,
    add_local_clusters,
    add_market,
    runs_of,
    utcnow,
    wait_for,
    write_plan,
)
from tests.conftest import REPO

PG_URL = os.environ.get("GRIDSHIFT_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/gs_dispatch_worker")
_BROKER = os.environ.get("GRIDSHIFT_TEST_BROKER_URL", "")
REDIS_URL = os.environ.get("GRIDSHIFT_TEST_REDIS_URL") or (_BROKER if _BROKER.startswith("redis") else "redis://127.0.0.1:6379/1")


def _prepare_pg(url: str) -> None:
    target = make_url(url)
    admin = create_engine(target.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            exists = conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": target.database}).scalar()
            if not exists:
                conn.execute(text(f'CREATE DATABASE "{target.database}"'))
    finally:
        admin.dispose()
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    engine.dispose()


def _pg_redis_settings(settings: Settings, tmp_path: Path) -> Settings:
    try:
        import redis

        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
        client.ping()
        client.flushdb()
    except Exception as exc:
        pytest.skip(f"needs Redis at {REDIS_URL}: {exc}")
    if settings.is_sqlite:
        try:
            _prepare_pg(PG_URL)
        except Exception as exc:
            pytest.skip(f"needs PostgreSQL at {PG_URL}: {exc}")
        settings = replace(settings, database_url=PG_URL)
        migrate.upgrade(settings)
    return replace(settings, broker_url=REDIS_URL, var_dir=tmp_path / "var", local_runtime_dir=tmp_path / "runs")


def _embedded_settings(settings: Settings, tmp_path: Path) -> Settings:
    embedded = replace(settings, var_dir=tmp_path / "var", database_url="", broker_url="",
                       local_runtime_dir=tmp_path / "runs")  # fmt: skip
    assert embedded.effective_broker_url.startswith("sqla+sqlite") and embedded.is_sqlite
    migrate.upgrade(embedded)
    return embedded


@pytest.fixture(params=["embedded", "postgres-redis"])
def worker_settings(request: pytest.FixtureRequest, settings: Settings, tmp_path: Path) -> Settings:
    (tmp_path / "var").mkdir()
    if request.param == "embedded":
        return _embedded_settings(settings, tmp_path)
    return _pg_redis_settings(settings, tmp_path)


def worker_env(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRIDSHIFT_")}
    env.update(
        GRIDSHIFT_DATABASE_URL=settings.effective_database_url, GRIDSHIFT_BROKER_URL=settings.effective_broker_url,
        GRIDSHIFT_VAR_DIR=str(settings.var_dir.resolve()), GRIDSHIFT_SECRET_KEY="test-secret",
        GRIDSHIFT_ENCRYPTION_KEYS=",".join(settings.encryption_keys),
        GRIDSHIFT_VISIBILITY_TIMEOUT_S=str(settings.visibility_timeout_s), PYTHONPATH=str(REPO),
    )  # fmt: skip
    return env


@contextlib.contextmanager
def celery_worker(settings: Settings, log: Path, concurrency: int = 2) -> Iterator[subprocess.Popen]:
    """A real ``celery worker`` process on the settings' broker and database; stopped (by its pid) on exit."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "app.worker", "worker", "-Q", "gridshift", "-c", str(concurrency),
             "--pool", "prefork", "-l", "info", "--without-mingle", "--without-gossip", "-n", f"test-{os.getpid()}@%h"],
            cwd=REPO, env=worker_env(settings), stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        wait_for(lambda: b"ready." in log.read_bytes() or proc.poll() is not None, timeout_s=60)
        assert proc.poll() is None, log.read_text()[-2000:]
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


def test_real_worker_dispatches_and_syncs(worker_settings, tmp_path):
    settings = worker_settings
    flask_app = create_app(settings)
    session = flask_app.extensions["gridshift"].sessions()
    try:
        _seed_fleet(session)
        add_local_clusters(session, tmp_path)
        add_market(session, "DE", 90.0, 350.0)
        tenant = auth.create_tenant(session, "team-a")
        session.commit()
        jobs = [add_job(session, tenant.id, command=f"sleep 0.{i}; echo {i}", name=f"j{i}") for i in range(4)]
        write_plan(session, [(j.id, ("de", "fi")[i % 2], ("h100", "a100")[i % 2], utcnow(), 30)
                             for i, j in enumerate(jobs)])  # fmt: skip
        celery = flask_app.extensions["celery"]
        with celery_worker(settings, tmp_path / "worker.log"):
            celery.send_task("gridshift.dispatch.tick")

            def all_done() -> bool:
                celery.send_task("gridshift.dispatch.sync")
                time.sleep(0.5)
                session.expire_all()
                return all(session.get(Job, j.id).state == JobState.SUCCEEDED for j in jobs)

            wait_for(all_done, timeout_s=45)
        for job in jobs:
            (run,) = runs_of(session, job.id)
            assert run.state == RunState.SUCCEEDED and run.energy_kwh > 0
            assert run.claimed_by and not run.claimed_by.endswith(f":{os.getpid()}")  # claimed by the worker
    finally:
        session.close()
        flask_app.extensions["gridshift"].engine.dispose()


def _seed_fleet(session) -> None:  # type: ignore[no-untyped-def]
    """The small_fleet fixture's fleet, on this test's own database when it differs from the suite's."""
    from app.models import Region
    from app.services import fleet

    if session.query(Region).count():
        return
    fleet.upsert_hardware(session, "h100", dict(vendor="nvidia", model="H100 SXM", memory_gb=80, tdp_w=700, idle_w=90,
                          relative_throughput={"default": 1.0}))  # fmt: skip
    fleet.upsert_hardware(session, "a100", dict(vendor="nvidia", model="A100 SXM", memory_gb=80, tdp_w=400, idle_w=60,
                          relative_throughput={"default": 0.4}))  # fmt: skip
    fleet.upsert_hardware(session, "l40s", dict(vendor="nvidia", model="L40S", memory_gb=48, tdp_w=350, idle_w=40,
                          relative_throughput={"default": 0.35}))  # fmt: skip
    fleet.upsert_region(session, "de", dict(name="Frankfurt", zone="DE", power_budget_kw=500, pue=1.2))
    fleet.upsert_region(session, "fi", dict(name="Hamina", zone="FI", power_budget_kw=300, pue=1.1))
    for region, hw, n in [("de", "h100", 16), ("de", "a100", 8), ("fi", "a100", 16), ("fi", "l40s", 8)]:
        fleet.set_inventory(session, region, hw, n)
    session.commit()
