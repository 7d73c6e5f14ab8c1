"""The plan page with 10,000 planned jobs: overview first, a few screens tall, drill-down, filters, pagination; the
operator opens a tenant's job from it; the job page follows a running job's log.

Timings are measured by bench/plan_page_bench.py, not here: these tests check behaviour only.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from app import create_app
from app.db import utcnow
from app.enums import JobState, RunState
from app.models import Assignment, Cluster, Job, Run
from bench.plan_page_bench import seed_plan
from tests.web.conftest import shot, sign_in

pytestmark = pytest.mark.browser
N_JOBS = 10_000


@pytest.fixture(scope="module")
def big_plan(live_server, _db_settings):  # type: ignore[no-untyped-def]
    app = create_app(_db_settings)
    with app.extensions["gridshift"].sessions() as db:
        ids = seed_plan(db, N_JOBS, utcnow().replace(minute=0, second=0, microsecond=0))
    app.extensions["gridshift"].engine.dispose()
    return ids


def test_plan_page_with_10000_assignments_stays_short_and_pages(page, live_server, big_plan):
    sign_in(page, live_server, "ops", "/ui/plan")
    page.wait_for_selector("#plan-total")
    assert page.locator("#plan-total").inner_text() == str(N_JOBS)
    page.wait_for_selector("#assign-table tbody tr[data-job-id]")
    assert page.locator("#assign-table tbody tr").count() == 25
    # Overview first, then the aggregated Gantt: lanes are region · hardware pairs, not one lane per job.
    assert page.locator("#ov-gpus .main-svg").count() > 0 and page.locator("#ov-power .main-svg").count() > 0
    lanes = page.evaluate("document.getElementById('gantt-overview').data[0].y")
    assert 1 < len(lanes) < 60 and all(" · " in lane for lane in lanes)
    assert page.evaluate("document.documentElement.scrollHeight") <= 5 * 900  # a few screens, not 200,000 px
    assert not page.locator("#history").get_attribute("open")  # history is one click away
    page.click("#history-link")
    page.wait_for_selector("#history-table tr[data-plan-id]")
    shot(page, "plan-10000")

    # Pagination: the next page holds the next 25 assignments in start order.
    first = page.locator("#assign-table tbody tr").first.get_attribute("data-job-id")
    page.click("#pg-next")
    page.wait_for_function("() => document.getElementById('pg-info').textContent.startsWith('page 2 of')")
    assert page.locator("#assign-table tbody tr").first.get_attribute("data-job-id") != first
    # Sorting by cost, descending: the first row is the costliest.
    page.click("#assign-table th[data-sort=cost]")
    page.click("#assign-table th[data-sort=cost]")
    page.wait_for_function("() => document.querySelector('#assign-table th[data-sort=cost]').getAttribute('aria-sort') === 'descending'")
    # Filters: one tenant, one state; the count follows.
    page.select_option("#af-tenant", "render-farm")
    page.click("#assign-filters button[type=submit]")
    page.wait_for_function(f"() => document.getElementById('assign-count').textContent === '({N_JOBS // 2} matching)'")
    tenants = {t.strip() for t in page.locator("#assign-table tbody tr td:nth-child(2)").all_inner_texts()}
    assert tenants == {"render-farm"}
    # Drill-down: a click on a lane of the aggregated Gantt filters the table to that region and hardware.
    region, hardware = lanes[0].split(" · ")
    page.evaluate("(lane) => { const el = document.getElementById('gantt-overview');"
                  " el.emit('plotly_click', {points: [{y: lane}]}); }", lanes[0])
    page.wait_for_function(f"() => document.getElementById('af-region').value === '{region}'")
    page.wait_for_function("() => [...document.querySelectorAll('#assign-table tbody tr td:nth-child(4)')]"
                           f".every((td) => td.textContent === '{region}')")
    assert set(page.locator("#assign-table tbody tr td:nth-child(5)").all_inner_texts()) == {hardware}
    # The detail Gantt shows this page's jobs as bars.
    assert page.evaluate("document.getElementById('gantt').data[0].y.length") >= 1


def test_operator_opens_a_tenants_job_from_the_plan_page(page, live_server, big_plan):
    sign_in(page, live_server, "ops", "/ui/plan")
    link = page.wait_for_selector("#assign-table tbody tr[data-job-id] a")
    job_id = link.get_attribute("href").rsplit("/", 1)[1]
    link.click()
    page.wait_for_selector("#receipt-table")
    assert re.match(rf"#{job_id} scale-\d+", page.locator("#job-title").inner_text())
    assert page.locator("#receipt-basis").inner_text() == "planned"


def test_tenant_sees_only_its_own_assignments(page, live_server, big_plan):
    sign_in(page, live_server, "ml-platform", "/ui/plan")
    page.wait_for_selector("#assign-table tbody tr[data-job-id]")
    assert page.locator("#plan-total").inner_text() == str(N_JOBS // 2)
    assert set(page.locator("#assign-table tbody tr td:nth-child(2)").all_inner_texts()) == {"ml-platform"}
    assert page.locator("#af-tenant").locator("xpath=..").is_hidden()


def test_job_page_follows_a_running_jobs_log(page, live_server, big_plan, _db_settings):
    app = create_app(_db_settings)
    job_id = big_plan[0]  # an ml-platform job
    with app.extensions["gridshift"].sessions() as db:
        cluster = db.scalar(select(Cluster).where(Cluster.kind == "local"))
        db.add(Run(job_id=job_id, cluster_id=cluster.id, run_key="browser-log", runtime_job_id="browser-log",
                   state=RunState.RUNNING, started_at=utcnow()))
        db.commit()
        log = Path(cluster.config["state_dir"]) / "runs" / "browser-log" / "job.log"
    app.extensions["gridshift"].engine.dispose()
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("epoch 1 loss 0.9\n")
    sign_in(page, live_server, "ml-platform", f"/ui/jobs/{job_id}")
    page.wait_for_function("() => document.getElementById('log').textContent.includes('epoch 1 loss 0.9')")
    with log.open("a") as f:
        f.write("epoch 2 loss 0.5\n")
    page.wait_for_function("() => document.getElementById('log').textContent.includes('epoch 2 loss 0.5')", timeout=15_000)
    assert page.get_attribute("#log-download", "href").endswith("/log?download=true")


def test_receipt_of_a_short_job_that_finished_early_is_honest(page, live_server, big_plan, _db_settings):
    """A job planned for hours ran 20 s: its receipt compares those 20 s with the same 20 s run at release."""
    app = create_app(_db_settings)
    job_id = big_plan[1]  # a render-farm job
    with app.extensions["gridshift"].sessions() as db:
        cluster = db.scalar(select(Cluster).where(Cluster.kind == "local"))
        job = db.get(Job, job_id)
        a = db.scalar(select(Assignment).where(Assignment.job_id == job_id))
        start = a.start_at
        db.add(Run(job_id=job_id, assignment_id=a.id, cluster_id=cluster.id, run_key="browser-short",
                   runtime_job_id="browser-short", state=RunState.SUCCEEDED, started_at=start,
                   finished_at=start + timedelta(seconds=20), energy_kwh=0.0027, energy_source="nvml"))
        job.state = JobState.SUCCEEDED
        db.commit()
    app.extensions["gridshift"].engine.dispose()
    sign_in(page, live_server, "render-farm", f"/ui/jobs/{job_id}")
    page.wait_for_selector("#receipt-table")
    assert page.locator("#receipt-basis").inner_text() == "metered"
    assert "the same metered work" in page.locator("#receipt-run-now").inner_text()
    energy = page.locator("#receipt-table tbody tr").first.locator("td").all_inner_texts()
    assert energy[0] == energy[1]  # this job and run now: the same facility energy, not the planned hours
    assert "Saving" in page.locator("#receipt-table thead").inner_text()
    shot(page, "receipt-short-job")
