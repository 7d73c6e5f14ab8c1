"""Shared fixtures: settings on the database under test, the app and its client, a session, tenants and a fleet.

The database under test is SQLite (a file per session) unless GRIDSHIFT_TEST_DATABASE_URL names another, e.g.
postgresql+psycopg://postgres@127.0.0.1:5432/test. The schema is built by the Alembic migrations, once per
session; every test starts from empty tables.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from app import create_app, migrate
from app.config import Settings
from app.db import Base, make_engine
from app.enums import Role
from app.services import auth, fleet

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("GRIDSHIFT_SHARED_DATA", REPO.parent / "shared" / "data"))


def shared_data(sub: str = "") -> Path:
    """Path under ../shared/data, or skip the test with the reason when it is absent."""
    path = SHARED_DATA / sub
    if not path.exists():
        pytest.skip(f"needs {path} (the shared real-data folder), which is absent on this machine")
    return path


@pytest.fixture(scope="session")
def _db_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    var = tmp_path_factory.mktemp("var")
    url = os.environ.get("GRIDSHIFT_TEST_DATABASE_URL") or f"sqlite:///{var / 'test.db'}"
    broker = os.environ.get("GRIDSHIFT_TEST_BROKER_URL") or f"sqla+sqlite:///{var / 'broker.db'}"
    settings = Settings(
        var_dir=var, database_url=url, broker_url=broker, secret_key="test-secret", testing=True,
        local_runtime_dir=var / "runs", encryption_keys=("0rJ4bG3xQy1yYlqv5ZyN0VvXk9l7e2JmW4d8kq3c1Xo=",),
    )
    if not settings.is_sqlite:
        engine = make_engine(settings)
        with engine.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
        engine.dispose()
    migrate.upgrade(settings)
    return settings


def empty_tables(settings: Settings) -> None:
    """Empty every table, keeping the migrated schema."""
    engine = make_engine(settings)
    tables = [t.name for t in reversed(Base.metadata.sorted_tables)]
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE"))
        else:
            for name in tables:
                conn.execute(text(f"DELETE FROM {name}"))
    engine.dispose()


@pytest.fixture
def settings(_db_settings: Settings) -> Iterator[Settings]:
    yield _db_settings
    empty_tables(_db_settings)


@pytest.fixture
def app(settings: Settings):  # type: ignore[no-untyped-def]
    application = create_app(settings)
    yield application
    application.extensions["gridshift"].engine.dispose()


@pytest.fixture
def client(app):  # type: ignore[no-untyped-def]
    return app.test_client()


@pytest.fixture
def session(app) -> Iterator[Session]:  # type: ignore[no-untyped-def]
    s = app.extensions["gridshift"].sessions()
    yield s
    s.close()


@pytest.fixture
def job_writable() -> Iterator[Path]:
    """A directory that local jobs may write to. As root the local runtime runs jobs as unprivileged pool users,
    who cannot reach pytest's own (0700) temporary directories: a job's marker files go here instead."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="gs-test-jobs-"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def now() -> datetime:
    return datetime(2030, 1, 1, tzinfo=UTC)


def make_token(session: Session, slug: str, role: Role = Role.MEMBER, *, operator: bool = False) -> str:
    try:
        tenant = auth.get_tenant(session, slug)
    except Exception:
        tenant = auth.create_tenant(session, slug, is_operator=operator)
    _row, token = auth.issue_token(session, tenant, f"{slug}-{role.value}", role)
    session.commit()
    return token


@pytest.fixture
def small_fleet(session: Session) -> None:
    """Two regions, three hardware types: enough for validation and planning tests."""
    fleet.upsert_hardware(session, "h100", dict(vendor="nvidia", model="H100 SXM", memory_gb=80, tdp_w=700, idle_w=90,
                          relative_throughput={"default": 1.0}))
    fleet.upsert_hardware(session, "a100", dict(vendor="nvidia", model="A100 SXM", memory_gb=80, tdp_w=400, idle_w=60,
                          relative_throughput={"default": 0.4}))
    fleet.upsert_hardware(session, "l40s", dict(vendor="nvidia", model="L40S", memory_gb=48, tdp_w=350, idle_w=40,
                          relative_throughput={"default": 0.35}, resource_name="nvidia.com/gpu"))
    fleet.upsert_region(session, "de", dict(name="Frankfurt", zone="DE", power_budget_kw=500, pue=1.2,
                        residency_tags=["eu", "de"]))
    fleet.upsert_region(session, "fi", dict(name="Hamina", zone="FI", power_budget_kw=300, pue=1.1,
                        residency_tags=["eu"]))
    for region, hw, n in [("de", "h100", 16), ("de", "a100", 8), ("fi", "a100", 16), ("fi", "l40s", 8)]:
        fleet.set_inventory(session, region, hw, n)
    session.commit()


def job_payload(now: datetime, **over: object) -> dict[str, object]:
    body: dict[str, object] = {
        "name": "train-llm",
        "workload_class": "training",
        "gpu_count": 4,
        "reference_gpu_hours": 8.0,
        "release_at": now.isoformat(),
        "deadline_at": (now + timedelta(hours=24)).isoformat(),
        "command": "python train.py",
    }
    body.update(over)
    return body


def replan_via_api(client, app, headers: dict[str, str], **body: object):  # type: ignore[no-untyped-def]
    """``POST /api/v1/plans`` (202 with a Location), the queued run executed as the worker's task does, then the run
    as polled at its Location (200); returns ``(run, plan)``, the plan as ``GET /api/v1/plans/<id>`` shows it."""
    from app.services import plan_runs

    resp = client.post("/api/v1/plans", json=body, headers=headers)
    assert resp.status_code == 202, resp.get_data(as_text=True)[:500]
    location = resp.headers["Location"]
    assert location == f"/api/v1/plans/runs/{resp.json['id']}" and resp.json["state"] == "queued"
    with app.extensions["gridshift"].sessions() as worker_session:
        plan_runs.execute(worker_session, app.extensions["gridshift"].settings, resp.json["id"])
    run = client.get(location, headers=headers)
    assert run.status_code == 200, run.get_data(as_text=True)[:500]
    plan = client.get(f"/api/v1/plans/{run.json['plan_id']}", headers=headers) if run.json["plan_id"] else None
    return run.json, (plan.json if plan is not None else None)
