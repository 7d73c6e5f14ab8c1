"""Shared set-up for the API benches: a PostgreSQL database at head with the demo fleet, tokens, job payloads.

The database is ``--database-url`` (default ``postgresql+psycopg://postgres@127.0.0.1:5432/gs_sec_bench``); it is
created when missing and its schema is rebuilt from the migrations on every run, so a bench never touches the
test databases. Market data is the seeded synthetic scenario (the API benches do not read prices).
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app import migrate
from app.config import Settings
from app.db import make_engine, make_session_factory
from app.enums import Role
from app.services import auth, demo

DEFAULT_DB = "postgresql+psycopg://postgres@127.0.0.1:5432/gs_sec_bench"
DEFAULT_REDIS = "redis://127.0.0.1:6379/2"
CLASSES = ("training", "fine_tuning", "rendering", "batch_inference")


@dataclass(frozen=True, slots=True)
class BenchEnv:
    settings: Settings
    tokens: tuple[str, ...]  # member tokens of one tenant, for spreading load over rate-limit buckets
    regions: tuple[str, ...]
    operator_token: str = ""  # the demo operator's admin token (fleet changes, re-planning)


def prepare(
    database_url: str, *, redis_url: str = DEFAULT_REDIS, n_tokens: int = 1, rate_limit: str = ""
) -> BenchEnv:
    """Rebuild the bench database at head, seed the demo fleet and issue ``n_tokens`` member tokens."""
    url = make_url(database_url)
    if url.get_backend_name() == "postgresql":
        admin = create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            exists = conn.execute(
                text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": url.database}
            ).first()
            if not exists:
                conn.execute(text(f'CREATE DATABASE "{url.database}"'))
        admin.dispose()
    var = Path(tempfile.mkdtemp(prefix="gs-bench-"))
    settings = Settings(
        var_dir=var,
        database_url=database_url,
        broker_url=redis_url,
        secret_key="bench",
        rate_limit=rate_limit or Settings().rate_limit,
        # a bench that lifts the request limit measures throughput: the per-tenant cost budget is lifted with it
        cost_budget="" if rate_limit else Settings().cost_budget,
        cost_concurrency=1000 if rate_limit else Settings().cost_concurrency,
        rate_limit_storage_url=redis_url,
        local_runtime_dir=var / "runs",
    )
    engine = make_engine(settings)
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    engine.dispose()
    migrate.upgrade(settings)
    engine = make_engine(settings)
    with make_session_factory(engine)() as session:
        seeded = demo.seed(session, settings, data_dir=None, n_jobs=0)
        tenant = auth.create_tenant(session, "bench")
        tokens = tuple(
            auth.issue_token(session, tenant, f"bench-{i}", Role.MEMBER)[1] for i in range(n_tokens)
        )
        regions = tuple(sorted(r for (r,) in session.execute(text("SELECT code FROM regions"))))
        session.commit()
    engine.dispose()
    return BenchEnv(settings, tokens, regions, seeded.tokens.get("ops", ""))


def job_items(n: int, seed: int = 11, now: datetime | None = None) -> list[dict[str, Any]]:
    """``n`` valid, varied job payloads (JSON-ready) that fit the demo fleet."""
    rng = random.Random(seed)
    now = (now or datetime.now(UTC)).replace(microsecond=0)
    out = []
    for i in range(n):
        release = now + timedelta(hours=rng.randint(0, 24))
        gpus = rng.choice((1, 2, 4, 8))
        out.append(
            {
                "name": f"bench-{i}",
                "workload_class": rng.choice(CLASSES),
                "gpu_count": gpus,
                "reference_gpu_hours": round(rng.uniform(0.5, 6.0) * gpus, 2),
                "memory_gb_per_gpu": rng.choice((0, 16, 40)),
                "release_at": release.isoformat(),
                "deadline_at": (release + timedelta(hours=rng.randint(48, 96))).isoformat(),
                "priority": rng.randint(0, 5),
                "interruptible": rng.random() < 0.3,
                "command": "python train.py --epochs 3",
                "env": {"RUN": str(i)},
            }
        )
    return out


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(sorted(values), n=1000, method="inclusive")[
        max(0, min(998, round(q * 10) - 1))
    ]
