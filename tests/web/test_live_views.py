"""Live views in a real browser: the re-plan progress bar, the reports page's charts, the operator's jobs list."""

from __future__ import annotations

import pytest

from tests.web.conftest import shot, sign_in

pytestmark = pytest.mark.browser


def test_replan_progress_shows_the_time_limit_and_leaves_the_navigation_free(page, live_server):
    sign_in(page, live_server, "ops", "/ui/plan")
    page.wait_for_selector("#plan-summary")
    page.click("#replan-btn")
    page.wait_for_selector("#busy:not([hidden])")
    text = page.locator("#busy span").inner_text()
    assert "time limit" in text and "Re-planning" in text
    nav, bar = page.locator("header.top").bounding_box(), page.locator("#busy").bounding_box()
    assert bar["y"] >= nav["y"] + nav["height"]  # below the navigation, not over it
    page.wait_for_selector("#plan-total", timeout=120_000)


def test_reports_page_draws_charts_and_separates_settled_from_planned(page, live_server):
    sign_in(page, live_server, "ops", "/ui/reports")
    page.wait_for_selector("#report-settled")
    assert "Settled" in page.locator("#report-settled").inner_text()
    assert "expected saving" in page.locator("#report-planned").inner_text()
    for chart in ("ch-months", "ch-savings", "ch-regions", "ch-teams"):
        page.wait_for_selector(f"#{chart} .main-svg")
    assert "Expected saving" in page.locator("#report-table thead").inner_text()
    shot(page, "reports")


def test_operator_jobs_list_has_tenants_and_a_tenant_filter(page, live_server):
    sign_in(page, live_server, "ml-platform", "/ui/submit")  # a job of one tenant, submitted through the API
    page.evaluate("""async () => GS.api("POST", "/api/v1/jobs", {name: "live-1", workload_class: "training",
        gpu_count: 1, reference_gpu_hours: 1, release_at: new Date().toISOString(),
        deadline_at: new Date(Date.now() + 86400000).toISOString()})""")
    page.context.clear_cookies()
    sign_in(page, live_server, "ops", "/ui/jobs")
    row = page.wait_for_selector("#jobs-table tr[data-job-id]")
    assert "ml-platform" in row.inner_text()
    page.fill("#q-tenant", "render-farm")
    page.click("#job-filters button[type=submit]")
    page.wait_for_selector("#jobs-table td.muted")  # render-farm has no jobs
