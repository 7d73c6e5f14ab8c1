"""The budgets page in a real browser: each tenant sees its own weight, quota use and budget burn-down; the operator
sees every tenant's; a budget a metered run has overspent shows its remaining amount below zero."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import requests
from playwright.sync_api import expect
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import make_engine
from app.enums import JobState, RunState, WorkloadClass
from app.models import Job, Run, Tenant
from tests.web.conftest import LiveServer, shot, sign_in

pytestmark = pytest.mark.browser


def _api(server: LiveServer, tenant: str, method: str, path: str, **kw: Any) -> requests.Response:
    resp = requests.request(method, server.url + path, headers={"Authorization": f"Bearer {server.tokens[tenant]}"},
                            timeout=60, **kw)
    resp.raise_for_status()
    return resp


@pytest.fixture(scope="module")
def budgets(live_server: LiveServer, _db_settings: Settings) -> None:
    """render-farm: 40 kg CO2 and 25 EUR a month, 16 H100 at once; a metered run this month emitted 50 kg."""
    _api(live_server, "ops", "PUT", "/api/v1/tenancy/render-farm",
         json={"weight": 2, "carbon_budget_kg": 40, "cost_budget": 25, "max_gpus": {"h100": 16}})
    engine = make_engine(_db_settings)
    now = datetime.now(UTC)
    with Session(engine) as session:
        tenant_id = session.scalar(select(Tenant.id).where(Tenant.slug == "render-farm"))
        job = Job(tenant_id=tenant_id, name="metered", workload_class=WorkloadClass.RENDERING, gpu_count=4,
                  reference_gpu_hours=4.0, reference_hardware="h100", release_at=now - timedelta(hours=3),
                  deadline_at=now + timedelta(hours=3), state=JobState.SUCCEEDED, env={})
        session.add(job)
        session.flush()
        session.add(Run(job_id=job.id, run_key=f"gs-{job.id}-1-metered", state=RunState.SUCCEEDED,
                        started_at=now - timedelta(hours=2), finished_at=now - timedelta(minutes=5),
                        energy_kwh=120.0, cost=12.5, carbon_kg=50.0))
        session.commit()
    engine.dispose()


def test_a_tenant_sees_its_budget_burn_down(page, live_server, budgets):
    sign_in(page, live_server, "render-farm", "/ui/budgets")
    cards = page.locator("section.tenant")
    expect(cards).to_have_count(1)
    card = page.locator('section.tenant[data-tenant="render-farm"]')
    expect(card.locator("h2")).to_contain_text("weight 2")
    carbon = card.locator('tr[data-metric="carbon_kg"]')
    expect(carbon.locator("td").nth(1)).to_have_text("40.0")
    expect(carbon.locator("td").nth(2)).to_have_text("50.0")  # spent by the metered run
    expect(carbon.locator(".remaining")).to_have_text("-10.0")
    expect(carbon).to_have_class("over")
    expect(carbon.locator(".burn .spent")).to_be_visible()
    cost = card.locator('tr[data-metric="cost"]')
    expect(cost.locator(".remaining")).to_have_text("12.5")
    expect(card.locator("ul.quotas")).to_contain_text("h100: 0 GPUs in use of 16.0")
    shot(page, "budgets-tenant")


def test_the_operator_sees_every_tenant(page, live_server, budgets):
    sign_in(page, live_server, "ops", "/ui/budgets")
    expect(page.locator("section.tenant")).to_have_count(3)
    expect(page.locator('section.tenant[data-tenant="ml-platform"] tr[data-metric="carbon_kg"] .remaining')).to_have_text("\u2013")
    expect(page.locator('section.tenant[data-tenant="render-farm"] tr[data-metric="carbon_kg"] .remaining')).to_have_text("-10.0")
    shot(page, "budgets-operator")
