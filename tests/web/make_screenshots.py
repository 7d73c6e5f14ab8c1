"""Screenshots of the dashboard on the demo fleet (1280 px): overview, preview, plan, job, reports.

    .venv/bin/python -m tests.web.make_screenshots --out /tmp/shots [--data ../shared/data/harmonized]

Builds a throw-away SQLite installation under a temporary folder, seeds the demo fleet (real 2022 data replayed
when --data is given, else the synthetic scenario), refreshes the forecasts, makes a plan with the planning service, serves the app on
127.0.0.1 (a free port in 8650-8699) and drives Debian's chromium. Forecasts are refreshed as issued a day ago and
now, so that the overview shows forecast against realised. Not a test: pytest does not collect it.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
from datetime import timedelta
from pathlib import Path

from playwright.sync_api import sync_playwright
from werkzeug.serving import make_server

from app import create_app, migrate
from app.config import Settings
from app.db import utcnow
from app.enums import SeriesKind
from app.services import demo, forecasts, planning
from tests.web.conftest import CHROMIUM, CHROMIUM_ARGS, _free_port


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/shots"))
    ap.add_argument("--data", type=Path, default=None, help="harmonized data folder (real prices and carbon)")
    ap.add_argument("--tenant", default="ml-platform")
    ap.add_argument("--model", default="naive_weekly",
                    help="forecast model; the demo keeps 4 weeks of history, too short for the LEAR defaults")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    var = Path(tempfile.mkdtemp(prefix="gridshift-shots-"))
    settings = Settings(var_dir=var, secret_key="screenshots", local_runtime_dir=var / "runs")
    migrate.upgrade(settings)
    app = create_app(settings)
    sessions = app.extensions["gridshift"].sessions
    with sessions() as session:
        seeded = demo.seed(session, settings, data_dir=args.data, n_jobs=24)
        session.commit()
        now = utcnow()
        # Forecasts issued a day ago (to compare with what happened since) and now (for the next two days).
        for issued, hours in ((now - timedelta(hours=24), 72), (now, 48)):
            for kind in (SeriesKind.PRICE, SeriesKind.CARBON_INTENSITY):
                for zone in forecasts.zones_with(session, kind):
                    outcome = forecasts.refresh(session, zone, kind, now=issued, horizon_hours=hours, model=args.model)
                    if outcome.error:
                        print(f"forecast {zone} {kind.value}: {outcome.error}")
        record = planning.plan_fleet(session, settings, now=utcnow(), horizon_hours=settings.horizon_hours,
                                     objective=settings.objective, trigger="manual")
        session.commit()
    print(seeded.summary)
    print(f"plan {record.plan_id}: {record.status}, {record.n_assigned} planned, {record.n_unplanned} unplanned")
    server = make_server("127.0.0.1", _free_port(), app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(url + "/ui/signin")
            page.fill("#token", seeded.tokens[args.tenant])
            page.click("#signin-form button[type=submit]")
            page.wait_for_selector("section.region .main-svg")
            page.wait_for_timeout(500)
            page.screenshot(path=str(args.out / "overview.png"))
            page.screenshot(path=str(args.out / "overview-full.png"), full_page=True)
            page.goto(url + "/ui/submit")
            page.wait_for_selector("#f-regions input")
            page.fill("#f-name", "llm-finetune-demo")
            page.fill("#f-command", "python finetune.py")
            page.fill("#f-gpus", "8")
            page.fill("#f-hours", "48")
            page.select_option("#f-home", "de-fra")
            page.click("#preview-btn")
            page.wait_for_selector("#preview-table")
            page.screenshot(path=str(args.out / "preview.png"))
            for name, path, sel in [("plan", "/ui/plan", "#gantt .main-svg"), ("jobs", "/ui/jobs", "#jobs-table tr[data-job-id]"),
                                    ("reports", "/ui/reports", "#report-summary")]:
                page.goto(url + path)
                page.wait_for_selector(sel)
                page.wait_for_timeout(300)
                page.screenshot(path=str(args.out / f"{name}.png"))
            page.goto(url + "/ui/jobs?state=planned")
            page.click("#jobs-table tr[data-job-id] a")
            page.wait_for_selector("#receipt-table")
            page.screenshot(path=str(args.out / "job.png"))
            browser.close()
    finally:
        server.shutdown()
    print(f"screenshots in {args.out}")


if __name__ == "__main__":
    main()
