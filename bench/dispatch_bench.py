"""Dispatch throughput and punctuality against one local Slurm cluster.

Measures, through the real dispatch service (claim -> submit -> status sync) and a real one-node Slurm
cluster on loopback (tests/runtimes/slurm.py; needs root and Debian's slurm-wlm):

* **submissions/s**: N claimed runs submitted by ``--workers`` threads (each like one Celery worker process:
  its own database session; first deliveries, as the tick sends them), from the first submit call to the
  last commit. Target >= 20/s.
* **lateness**: actual start reported by Slurm minus planned start, for jobs whose planned starts are spread
  over ``--spread-s`` seconds beginning ``--lead-s`` seconds after the claim. Target p99 <= 60 s.

Usage::

    python bench/dispatch_bench.py [--jobs 200] [--workers 4] [--mode cli|rest] [--database-url URL] [--json]

Prints a table; with ``--json`` the last line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import select

from app import migrate
from app.config import Settings
from app.db import make_engine, make_session_factory
from app.enums import TERMINAL_RUN_STATES, JobState, PlanStatus
from app.models import Assignment, HardwareType, Job, Plan, Region, Run
from app.services import auth, fleet
from app.services.dispatch import claim as dispatch_claim
from app.services.dispatch import submit as dispatch_submit
from app.services.dispatch import sync as dispatch_sync
from bench.dispatch_env import temp_base


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


def seed(session, slurm_config: dict[str, Any], n_jobs: int, start: datetime, spread_s: float) -> list[int]:  # type: ignore[no-untyped-def]
    fleet.upsert_hardware(session, "h100", dict(vendor="nvidia", model="H100 SXM", memory_gb=80, tdp_w=700,
                                                idle_w=90, relative_throughput={"default": 1.0}))  # fmt: skip
    fleet.upsert_region(session, "bench", dict(name="Bench", zone="BENCH", power_budget_kw=10_000, pue=1.2))
    fleet.set_inventory(session, "bench", "h100", 16)
    fleet.upsert_cluster(session, "bench-slurm", "bench", "slurm", slurm_config)
    tenant = auth.create_tenant(session, "bench")
    now = datetime.now(UTC)
    jobs = [Job(tenant_id=tenant.id, name=f"bench-{i}", workload_class="batch_inference", gpu_count=1,
                reference_gpu_hours=0.01, reference_hardware="h100", release_at=now, deadline_at=now + timedelta(hours=2),
                command="true", state=JobState.PLANNED, env={}) for i in range(n_jobs)]  # fmt: skip
    session.add_all(jobs)
    session.flush()
    plan = Plan(horizon_start=now, horizon_end=now + timedelta(hours=2), slot_minutes=60, objective="cost",
                solver="bench", trigger="bench", status=PlanStatus.OPTIMAL, is_current=True)  # fmt: skip
    session.add(plan)
    session.flush()
    region_id = session.scalar(select(Region.id).where(Region.code == "bench"))
    hw_id = session.scalar(select(HardwareType.id).where(HardwareType.code == "h100"))
    for i, job in enumerate(jobs):
        at = start + timedelta(seconds=spread_s * i / max(1, n_jobs - 1))
        session.add(Assignment(plan_id=plan.id, job_id=job.id, region_id=region_id, hardware_type_id=hw_id,
                               start_at=at, end_at=at + timedelta(minutes=5), energy_kwh=0.0, cost=0.0, carbon_kg=0.0))  # fmt: skip
    session.commit()
    return [j.id for j in jobs]


def run(args: argparse.Namespace) -> dict[str, Any]:
    from tests.runtimes.slurm import SlurmLab

    base = temp_base("gs-dispatch-bench-")
    lab = SlurmLab({"gs-bench": {"h100": 16}}, rest=args.mode == "rest")
    clusters = lab.start()
    try:
        url = args.database_url or f"sqlite:///{base / 'bench.db'}"
        window_s = args.lead_s + args.spread_s + 60
        settings = Settings(var_dir=base, database_url=url, dispatch_interval_s=window_s, claim_stale_s=3600)
        migrate.upgrade(settings)
        engine = make_engine(settings)
        sessions = make_session_factory(engine)
        with sessions() as session:
            start = datetime.now(UTC) + timedelta(seconds=args.lead_s)
            seed(session, clusters["gs-bench"].connector_config(args.mode), args.jobs, start, args.spread_s)
        with sessions() as session:
            claimed = dispatch_claim.tick(session, settings, now=datetime.now(UTC), worker="bench-tick").claimed
        assert len(claimed) == args.jobs, f"claimed {len(claimed)} of {args.jobs}"

        local = threading.local()
        latencies: list[float] = []

        def submit(run_id: int) -> str:
            if not hasattr(local, "session"):
                local.session = sessions()
            t0 = time.perf_counter()
            out = dispatch_submit.submit_run(local.session, settings, run_id, now=datetime.now(UTC),
                                      worker=f"bench-{threading.get_ident()}", fresh=True)  # fmt: skip
            latencies.append(time.perf_counter() - t0)
            return out.state

        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.workers) as pool:
            states = list(pool.map(submit, claimed))
        submit_s = time.perf_counter() - t0
        ok = states.count("submitted")

        deadline = time.monotonic() + window_s + 120
        with sessions() as session:
            while time.monotonic() < deadline:
                dispatch_sync.sync(session, settings, now=datetime.now(UTC))
                session.expire_all()
                open_runs = session.scalar(
                    select(Run.id).where(Run.state.not_in(TERMINAL_RUN_STATES)).limit(1)
                )
                if open_runs is None:
                    break
                time.sleep(1.0)
            runs = list(session.scalars(select(Run)))
        late = [(r.started_at - r.planned_start_at).total_seconds() for r in runs if r.started_at and r.planned_start_at]
        succeeded = sum(1 for r in runs if r.state.value == "succeeded")
        engine.dispose()
    finally:
        lab.stop()
        shutil.rmtree(base, ignore_errors=True)
    return {
        "jobs": args.jobs, "workers": args.workers, "mode": args.mode, "database": url.split(":", 1)[0],
        "submitted": ok, "succeeded": succeeded, "submit_wall_s": round(submit_s, 3),
        "submissions_per_s": round(ok / submit_s, 2) if submit_s > 0 else None,
        "submit_latency_p50_s": round(percentile(latencies, 50), 3), "submit_latency_p99_s": round(percentile(latencies, 99), 3),
        "started": len(late), "lateness_p50_s": round(percentile(late, 50), 2) if late else None,
        "lateness_p99_s": round(percentile(late, 99), 2) if late else None,
        "lateness_max_s": round(max(late), 2) if late else None,
        "lateness_mean_s": round(statistics.fmean(late), 2) if late else None,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4, help="parallel submitters (like Celery worker processes)")
    parser.add_argument("--mode", choices=["cli", "rest"], default="cli", help="Slurm CLI or slurmrestd")
    parser.add_argument("--lead-s", type=float, default=30.0, help="first planned start after the claim [s]")
    parser.add_argument("--spread-s", type=float, default=30.0, help="planned starts spread over [s]")
    parser.add_argument("--database-url", default="", help="default: a temporary SQLite file")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run(args)
    rows = [
        ("submissions/s (target >= 20)", result["submissions_per_s"]),
        ("submit latency p50 / p99 [s]", f"{result['submit_latency_p50_s']} / {result['submit_latency_p99_s']}"),
        ("jobs submitted / succeeded", f"{result['submitted']} / {result['succeeded']} of {result['jobs']}"),
        ("lateness p50 / p99 / max [s] (target p99 <= 60)",
         f"{result['lateness_p50_s']} / {result['lateness_p99_s']} / {result['lateness_max_s']}"),
    ]  # fmt: skip
    print(f"dispatch bench: {args.jobs} jobs, {args.workers} submitters, Slurm {args.mode}, {result['database']}")
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
