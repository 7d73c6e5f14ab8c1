"""What-if on the plan page: an operator admin launches a simulation from a small form, watches it progress and reads
the comparison as a table and a chart; a tenant has no such form; a bad change is named."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import expect
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import make_engine
from app.enums import JobState, WorkloadClass
from app.models import Job, Simulation, Tenant
from app.services.simulation import runs
from tests.web.conftest import LiveServer, sign_in

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def past_jobs(live_server: LiveServer, _db_settings: Settings) -> Iterator[None]:
    """Jobs of the last two days in the demo fleet's stored history, and a worker replaying queued simulations (what
    the Celery task ``gridshift.simulation.run`` does)."""
    engine = make_engine(_db_settings)
    start = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=2)
    with Session(engine) as session:
        tenant = session.scalars(select(Tenant).where(Tenant.slug == "ml-platform")).one()
        for k in range(6):
            release = start + timedelta(hours=6 * k)
            session.add(Job(tenant_id=tenant.id, name=f"past-{k}", workload_class=WorkloadClass.TRAINING,
                            gpu_count=2, reference_gpu_hours=6.0, reference_hardware="h100", release_at=release,
                            deadline_at=release + timedelta(hours=20), state=JobState.SUCCEEDED))
        session.commit()
    settings = replace(_db_settings, plan_time_limit_s=2.0)
    stop = threading.Event()

    def work() -> None:
        while not stop.wait(0.2):
            with Session(engine) as s:
                for sim_id in s.scalars(select(Simulation.id).where(Simulation.state == "queued")).all():
                    runs.execute(s, settings, sim_id)

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    yield
    stop.set()
    worker.join(timeout=120)
    engine.dispose()


def test_an_operator_simulates_a_past_period_and_reads_the_comparison(page, live_server: LiveServer, past_jobs,
                                                                      _db_settings: Settings):
    sign_in(page, live_server, "ops", "/ui/plan")
    page.click("#simulate summary")
    yesterday = (datetime.now(UTC) - timedelta(days=1)).date()
    page.fill("#sim-from", (yesterday - timedelta(days=1)).isoformat())
    page.fill("#sim-to", yesterday.isoformat())
    page.select_option("#sim-objective", "carbon")
    page.fill("#sim-changes", "region.nowhere.pue=1.1")
    page.click("#sim-run")
    expect(page.locator("#sim-status")).to_contain_text("regions.nowhere")  # the field is named
    page.fill("#sim-changes", "carbon_price=150")
    page.click("#sim-run")
    expect(page.locator("#sim-status")).to_contain_text("done", timeout=120_000)
    expect(page.locator("#sim-table")).to_be_visible()
    rows = page.locator("#sim-table tbody tr")
    expect(rows).to_have_count(6)
    engine = make_engine(_db_settings)
    with Session(engine) as session:  # what GET /api/v1/simulations/<id> answered the page
        result = session.scalars(select(Simulation).order_by(Simulation.id.desc())).first().result
    engine.dispose()
    assert result["current"]["jobs"] == 6 and result["scenario"]["carbon_price_per_tonne"] == 150
    for key in ("jobs_run", "deadline_misses"):
        cells = page.locator(f'#sim-table tr[data-key="{key}"] td')
        assert [cells.nth(i).inner_text() for i in range(3)] == [
            str(result["current"][key]), str(result["changed"][key]), str(result["difference"][key])]
    expect(page.locator("#sim-chart .main-svg").first).to_be_visible()
    assert page.locator("#sim-chart .legendtext").count() == 4
    assert not page.gs_errors, page.gs_errors  # type: ignore[attr-defined]


def test_a_tenant_has_no_simulation_form(page, live_server: LiveServer):
    sign_in(page, live_server, "ml-platform", "/ui/plan")
    expect(page.locator("#plan-summary")).not_to_have_text("Loading…")
    assert page.locator("#simulate").count() == 0
