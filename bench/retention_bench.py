"""Plan retention clean-up: how fast superseded plans' rows go, with and without the index on runs.assignment_id.

Builds a throw-away database (a SQLite file, or a PostgreSQL database named by ``--database-url`` whose public
schema is dropped and re-created: give it a scratch database), migrates it, and stores ``--plans`` plans of
``--jobs`` assignments each, one a hour over the last days, the newest current; a run executes every 10th job's
assignment of the oldest plan, and ``--history-runs`` finished runs of earlier jobs fill the runs table as months of
operation would. Then ``app.services.plan_history.prune`` is called until nothing is left to prune,
once with the schema as migrated and once with ``ix_runs_assignment`` dropped, side by side in one run.

    python bench/retention_bench.py --plans 100 --jobs 2000 [--database-url postgresql+psycopg://...] --json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from sqlalchemy import func, insert, select, text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app import migrate
from app.config import Settings
from app.db import make_engine, make_session_factory, utcnow
from app.enums import JobState, PlanStatus, RunState
from app.models import Assignment, HardwareType, Job, Plan, Region, Run
from app.services import auth, fleet, plan_history


def fresh(url: str | None, var: Path) -> Settings:
    settings = Settings(var_dir=var, database_url=url or f"sqlite:///{var / 'retention.db'}", secret_key="bench")
    if url:
        engine = make_engine(settings)
        with engine.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
        engine.dispose()
    migrate.upgrade(settings)
    return settings


def run_once(url: str | None, n_plans: int, n_jobs: int, n_history: int, *, run_index: bool) -> dict:
    settings = fresh(url, Path(tempfile.mkdtemp(prefix="gridshift-retention-")))
    engine = make_engine(settings)
    session = make_session_factory(engine)()
    if not run_index:
        session.execute(text("DROP INDEX ix_runs_assignment"))
    fleet.upsert_hardware(session, "h100", dict(vendor="nvidia", model="H100 SXM", memory_gb=80, tdp_w=700,
                                                idle_w=90, relative_throughput={"default": 1.0}))
    fleet.upsert_region(session, "de", dict(name="Frankfurt", zone="DE", power_budget_kw=500, pue=1.2,
                                            residency_tags=[]))
    tenant = auth.create_tenant(session, "bench")
    session.commit()
    region_id = session.scalar(select(Region.id))
    hw_id = session.scalar(select(HardwareType.id))
    now = utcnow()
    session.execute(insert(Job), [
        dict(tenant_id=tenant.id, name=f"j{i}", workload_class="training", gpu_count=1, reference_gpu_hours=1.0,
             release_at=now, deadline_at=now + timedelta(days=1)) for i in range(n_jobs)])
    job_ids = list(session.scalars(select(Job.id).order_by(Job.id)))
    session.execute(insert(Job), [
        dict(tenant_id=tenant.id, name=f"old{i}", workload_class="training", gpu_count=1, reference_gpu_hours=1.0,
             release_at=now - timedelta(days=90), deadline_at=now - timedelta(days=89), state=JobState.SUCCEEDED)
        for i in range(n_history)])
    old_ids = list(session.scalars(select(Job.id).where(Job.name.like("old%"))))
    session.execute(insert(Run), [dict(job_id=j, run_key=f"old-{j}", state=RunState.SUCCEEDED) for j in old_ids])
    oldest = now - timedelta(days=settings.plan_retention_days + 1 + n_plans // 24)
    for k in range(n_plans):
        plan = Plan(horizon_start=now, horizon_end=now, slot_minutes=60, objective="cost", solver="bench",
                    trigger="hourly", status=PlanStatus.FEASIBLE, is_current=k == n_plans - 1,
                    created_at=oldest + timedelta(hours=k) if k < n_plans - 1 else now)
        session.add(plan)
        session.flush()
        session.execute(insert(Assignment), [
            dict(plan_id=plan.id, job_id=j, region_id=region_id, hardware_type_id=hw_id, start_at=now, end_at=now,
                 energy_kwh=1.0, cost=1.0, carbon_kg=1.0) for j in job_ids])
    first = session.scalar(select(Plan.id).order_by(Plan.id))
    executed = list(session.execute(select(Assignment.job_id, Assignment.id).where(Assignment.plan_id == first)))
    session.execute(insert(Run), [dict(job_id=j, assignment_id=a, run_key=f"bench-{j}", state=RunState.SUCCEEDED)
                                  for j, a in executed[::10]])
    session.commit()
    rows = session.scalar(select(func.count()).select_from(Assignment))
    t0 = time.perf_counter()
    plans = deleted = calls = 0
    while True:
        done = plan_history.prune(session, settings, now=now)
        session.commit()
        calls += 1
        if not done["plans"]:
            break
        plans, deleted = plans + done["plans"], deleted + done["assignments"]
    seconds = time.perf_counter() - t0
    kept = session.scalar(select(func.count()).select_from(Assignment))
    session.close()
    engine.dispose()
    return {"run_index": run_index, "rows": rows, "plans_pruned": plans, "deleted": deleted, "kept": kept,
            "calls": calls, "seconds": round(seconds, 3), "rows_per_s": round(deleted / seconds) if seconds else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plans", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=2000, help="assignments per plan")
    ap.add_argument("--history-runs", type=int, default=20000, help="finished runs of earlier jobs")
    ap.add_argument("--database-url", help="a scratch PostgreSQL database (its public schema is dropped)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    kind = "postgresql" if args.database_url else "sqlite"
    results = [run_once(args.database_url, args.plans, args.jobs, args.history_runs, run_index=x) for x in (True, False)]
    print(f"Plan retention on {kind}: {args.plans} plans x {args.jobs} assignments, a run on every 10th job of the "
          f"oldest plan, {args.history_runs} earlier runs")
    print(f"{'runs.assignment_id index':<26} {'rows':>9} {'plans':>6} {'deleted':>9} {'kept':>7} {'s':>8} {'rows/s':>10}")
    for r in results:
        print(f"{('yes (as migrated)' if r['run_index'] else 'no'):<26} {r['rows']:>9d} {r['plans_pruned']:>6d} "
              f"{r['deleted']:>9d} {r['kept']:>7d} {r['seconds']:>8.2f} {r['rows_per_s'] or 0:>10,d}")
    if args.json:
        print(json.dumps({"database": kind, "plans": args.plans, "jobs": args.jobs, "history_runs": args.history_runs,
                          "results": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
