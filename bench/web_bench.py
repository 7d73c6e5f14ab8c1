"""Latency of the dashboard's read endpoints on a large plan: monthly report (JSON, CSV, PDF), overview, plan view,
receipt.

    .venv/bin/python bench/web_bench.py [--jobs 5000] [--plans 3] [--repeat 3] [--json]

Builds a throw-away SQLite installation with the demo fleet (synthetic market data), submits ``--jobs`` jobs for one
tenant through the jobs service and stores ``--plans`` successive plans that each place every job (the last one
current), then times each endpoint through Flask's test client (best of ``--repeat``). No target is set: the
figures show how the views scale with the size of a plan. With --json the last line is one JSON object
``{"jobs", "plans", "ms": {endpoint: best ms}}``.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from sqlalchemy import insert, select

from app import create_app, migrate
from app.config import Settings
from app.db import utcnow
from app.enums import PlanStatus, Role
from app.models import Assignment, HardwareType, Plan, Region
from app.services import auth, demo, jobs


def build(n_jobs: int, n_plans: int) -> tuple[object, str, int, str]:
    var = Path(tempfile.mkdtemp(prefix="gridshift-webbench-"))
    settings = Settings(var_dir=var, secret_key="bench", local_runtime_dir=var / "runs")
    migrate.upgrade(settings)
    app = create_app(settings)
    now = utcnow().replace(minute=0, second=0, microsecond=0)
    rng = random.Random(1)
    with app.extensions["gridshift"].sessions() as db:
        seeded = demo.seed(db, settings, data_dir=None, n_jobs=0)
        tenant = auth.get_tenant(db, "ml-platform")
        p = auth.Principal(tenant.id, tenant.slug, 0, "bench", Role.ADMIN, False)
        items = [dict(name=f"bench-{i}", gpu_count=2, reference_gpu_hours=4.0, release_at=now,
                      deadline_at=now + timedelta(hours=48)) for i in range(n_jobs)]
        _batch, ids = jobs.submit_jobs(db, p, items, now=now)
        regions = list(db.execute(select(Region.id)).scalars())
        hardware = list(db.execute(select(HardwareType.id)).scalars())
        for k in range(n_plans):
            plan = Plan(horizon_start=now, horizon_end=now + timedelta(hours=72), slot_minutes=60, objective="cost",
                        solver="bench", status=PlanStatus.FEASIBLE, is_current=k == n_plans - 1)
            db.add(plan)
            db.flush()
            rows = []
            for jid in ids:
                start = now + timedelta(hours=rng.randint(0, 40))
                rows.append(dict(plan_id=plan.id, job_id=jid, region_id=rng.choice(regions),
                                 hardware_type_id=rng.choice(hardware), start_at=start,
                                 end_at=start + timedelta(hours=rng.randint(1, 8)), energy_kwh=10.0, cost=1.0,
                                 carbon_kg=2.0, currency="EUR", run_now_energy_kwh=11.0, run_now_cost=1.6,
                                 run_now_carbon_kg=3.5))
            db.execute(insert(Assignment), rows)
        db.commit()
    return app, seeded.tokens["ml-platform"], ids[0], now.strftime("%Y-%m")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--plans", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    app, token, job_id, month = build(args.jobs, args.plans)
    client = app.test_client()  # type: ignore[attr-defined]
    headers = {"Authorization": f"Bearer {token}"}
    urls = {
        "report_json": f"/api/v1/reports/monthly?month={month}",
        "report_csv": f"/api/v1/reports/monthly.csv?month={month}",
        "report_pdf": f"/api/v1/reports/monthly.pdf?month={month}",
        "overview": "/api/v1/overview",
        "plan_current": "/api/v1/plans/current",
        "receipt": f"/api/v1/jobs/{job_id}/receipt",
    }
    results: dict[str, float] = {}
    print(f"{args.jobs} jobs, {args.plans} plans (SQLite), best of {args.repeat}")
    print(f"{'endpoint':14s} {'status':>6s} {'ms':>8s} {'bytes':>10s}")
    for name, url in urls.items():
        best, status, size = float("inf"), 0, 0
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            resp = client.get(url, headers=headers)
            best = min(best, time.perf_counter() - t0)
            status, size = resp.status_code, len(resp.data)
        results[name] = round(best * 1000.0, 1)
        print(f"{name:14s} {status:6d} {results[name]:8.1f} {size:10d}")
    if args.json:
        print(json.dumps({"jobs": args.jobs, "plans": args.plans, "ms": results}))


if __name__ == "__main__":
    main()
