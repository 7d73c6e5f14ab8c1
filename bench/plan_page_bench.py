"""First paint and height of the plan page with a large plan, measured in Debian's chromium.

    .venv/bin/python bench/plan_page_bench.py [--jobs 10000] [--repeat 3] [--json]

Builds a throw-away SQLite installation with the demo fleet, stores ``--jobs`` planned jobs of two tenants in one
current plan, serves the app on 127.0.0.1 and loads /ui/plan as the operator admin ``--repeat`` times: the time to
the first paint (chromium's first-contentful-paint), to the plan summary and the first page of the table, and the
page's height at 1280 px. With --json the last line is one JSON object. The budget is first paint <= 2 s and a page
a few screens tall.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from app.enums import JobState, PlanStatus
from app.models import Assignment, HardwareType, Inventory, Job, Plan, Region, Tenant

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-quic", "--no-first-run"]


def seed_plan(session: Session, n_jobs: int, now: datetime, *, seed: int = 1) -> list[int]:
    """``n_jobs`` planned jobs of the demo tenants ml-platform and render-farm (alternating), placed by one new
    current plan on the demo fleet's inventory (region, hardware) pairs; returns the job ids."""
    rng = random.Random(seed)
    tenants = [session.scalar(select(Tenant.id).where(Tenant.slug == s)) for s in ("ml-platform", "render-farm")]
    pairs: list[tuple[int, int]] = [
        (r, h) for r, h in session.execute(select(Inventory.region_id, Inventory.hardware_type_id))
    ] or [(r, h) for r in session.scalars(select(Region.id)) for h in session.scalars(select(HardwareType.id))]
    session.execute(update(Plan).values(is_current=False))
    plan = Plan(horizon_start=now, horizon_end=now + timedelta(hours=72), slot_minutes=60, objective="cost",
                solver="bench", status=PlanStatus.FEASIBLE, is_current=True, trigger="bench", created_at=now)
    session.add(plan)
    session.flush()
    job_rows: list[dict[str, object]] = [dict(tenant_id=tenants[i % 2], name=f"scale-{i}", workload_class="training",
                     gpu_count=rng.choice((1, 2, 4, 8)), reference_gpu_hours=4.0, reference_hardware="h100",
                     release_at=now, deadline_at=now + timedelta(hours=72), state=JobState.PLANNED, env={},
                     created_at=now, updated_at=now) for i in range(n_jobs)]
    ids = [int(x) for x in session.scalars(insert(Job).returning(Job.id, sort_by_parameter_order=True), job_rows)]
    rows = []
    for jid in ids:
        region_id, hw_id = rng.choice(pairs)
        start = now + timedelta(hours=rng.randint(0, 60))
        hours = rng.randint(1, 10)
        rows.append(dict(plan_id=plan.id, job_id=jid, region_id=region_id, hardware_type_id=hw_id, start_at=start,
                         end_at=start + timedelta(hours=hours), energy_kwh=3.0 * hours, cost=0.3 * hours,
                         carbon_kg=0.9 * hours, currency="EUR", run_now_energy_kwh=3.0 * hours,
                         run_now_cost=0.4 * hours, run_now_carbon_kg=1.2 * hours))
    session.execute(insert(Assignment), rows)
    session.commit()
    return ids


def measure(url: str, token: str, repeat: int) -> dict[str, float]:
    """Best-of-``repeat`` timings [ms] and the page height [px] of /ui/plan in chromium."""
    from playwright.sync_api import sync_playwright

    best: dict[str, float] = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS)
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        page = ctx.new_page()
        page.goto(url + "/ui/signin?next=/")
        page.fill("#token", token)
        page.click("#signin-form button[type=submit]")
        page.wait_for_url(url + "/")
        for _ in range(repeat):
            t0 = time.perf_counter()
            page.goto(url + "/ui/plan")
            fcp = page.evaluate("() => new Promise((ok) => new PerformanceObserver((l) => ok(l.getEntries()[0].startTime))"
                                ".observe({type: 'paint', buffered: true}))")
            page.wait_for_selector("#plan-total")
            summary_ms = (time.perf_counter() - t0) * 1000
            page.wait_for_selector("#assign-table tbody tr[data-job-id]")
            table_ms = (time.perf_counter() - t0) * 1000
            height = page.evaluate("document.documentElement.scrollHeight")
            for k, v in (("first_paint_ms", fcp), ("summary_ms", summary_ms), ("table_ms", table_ms),
                         ("height_px", height)):
                best[k] = min(best.get(k, float("inf")), float(v))
        browser.close()
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from werkzeug.serving import make_server

    from app import create_app, migrate
    from app.config import Settings
    from app.db import utcnow
    from app.services import demo

    var = Path(tempfile.mkdtemp(prefix="gridshift-planpage-"))
    settings = Settings(var_dir=var, secret_key="bench", local_runtime_dir=var / "runs")
    migrate.upgrade(settings)
    app = create_app(settings)
    now = utcnow().replace(minute=0, second=0, microsecond=0)
    with app.extensions["gridshift"].sessions() as db:
        tokens = demo.seed(db, settings, data_dir=None, n_jobs=0).tokens
        db.commit()
        t0 = time.perf_counter()
        seed_plan(db, args.jobs, now)
        seed_s = time.perf_counter() - t0
    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        figures = measure(f"http://127.0.0.1:{server.server_port}", tokens["ops"], args.repeat)
    finally:
        server.shutdown()
    print(f"plan page, {args.jobs} assignments (seeded in {seed_s:.1f} s), best of {args.repeat}, 1280 px")
    print(f"{'measure':<16}{'value':>10}")
    for k, v in figures.items():
        print(f"{k:<16}{v:>10.0f}")
    if args.json:
        print(json.dumps({"jobs": args.jobs, **{k: round(v, 1) for k, v in figures.items()}}))


if __name__ == "__main__":
    main()
