"""A failed plan on the plan page: an operator admin reads why it failed; a tenant sees only that it failed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import expect
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import make_engine
from app.enums import PlanStatus
from app.models import Plan
from tests.web.conftest import LiveServer, sign_in

pytestmark = pytest.mark.browser

WHY = "job 7: gpu capacity of de-fra/h100 exceeded in slot 3"


@pytest.fixture(scope="module")
def failed_plan(live_server: LiveServer, _db_settings: Settings) -> int:
    """A failed plan as plan_fleet stores it: not current, no assignments, the broken constraints in its stats."""
    engine = make_engine(_db_settings)
    now = datetime.now(UTC)
    with Session(engine) as session:
        plan = Plan(horizon_start=now, horizon_end=now + timedelta(hours=72), slot_minutes=60, objective="cost",
                    solver="gridshift", trigger="hourly", status=PlanStatus.FAILED, is_current=False,
                    stats={"violations": [WHY, "<b>markup</b> stays text"]})
        session.add(plan)
        session.commit()
        plan_id = plan.id
    engine.dispose()
    return plan_id


def test_an_operator_reads_why_a_plan_failed(page, live_server: LiveServer, failed_plan: int):
    sign_in(page, live_server, "ops", f"/ui/plan?id={failed_plan}")
    summary = page.locator("#plan-summary")
    expect(summary).to_contain_text("failed")  # the page's CSP allows no eval, so no wait_for_function
    text = summary.inner_text()
    assert f"Plan #{failed_plan}" in text and "not the current plan" in text
    assert WHY in text and "<b>markup</b> stays text" in text and summary.locator("b").count() == 0


def test_a_tenant_sees_that_it_failed_but_not_why(page, live_server: LiveServer, failed_plan: int):
    sign_in(page, live_server, "ml-platform", f"/ui/plan?id={failed_plan}")
    expect(page.locator("#plan-summary")).to_contain_text("failed")
    text = page.locator("#plan-summary").inner_text()
    assert f"Plan #{failed_plan}" in text and WHY not in text
