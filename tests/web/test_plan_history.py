"""The plan page's history in a real browser: past plans newest first with the current one marked, older pages,
one past plan opened by its link, fleet figures for operator admins only, and a re-plan that refreshes the list."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import requests
from playwright.sync_api import expect
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import make_engine
from app.enums import PlanStatus
from app.models import Plan
from tests.web.conftest import LiveServer, shot, sign_in

pytestmark = pytest.mark.browser

BASE_COLS = ["Plan", "Made", "Trigger", "Status", "Objective", "Gap %", "Solve s"]
FLEET_COLS = ["Planned", "Not planned", "Cost", "Saving", "CO2 kg"]
EVIL_TRIGGER = "<img src=x onerror=alert(1)>"


@dataclass
class Seeded:
    ids: list[int]  # every plan id, newest first
    newest: int  # the current plan
    older: int  # the plan made just before it
    pruned: int  # a superseded plan whose assignment rows the clean-up removed
    jobs: dict[str, int]  # tenant -> its job's id
    summaries: dict[int, dict[str, Any]]  # plan id -> its summary as the operator admin gets it


def _api(server: LiveServer, tenant: str, method: str, path: str, **kw: Any) -> requests.Response:
    resp = requests.request(method, server.url + path, headers={"Authorization": f"Bearer {server.tokens[tenant]}"},
                            timeout=180, **kw)
    resp.raise_for_status()
    return resp


def _replan(server: LiveServer) -> int:
    """A manual re-plan through the API: 202, then its run polled until the worker stored the plan; the plan's id."""
    resp = _api(server, "ops", "POST", "/api/v1/plans", json={})
    assert resp.status_code == 202
    for _ in range(600):
        run = _api(server, "ops", "GET", resp.headers["Location"]).json()
        if run["state"] not in ("queued", "running"):
            assert run["state"] == "succeeded", run
            return int(run["plan_id"])
        time.sleep(0.2)
    raise AssertionError(f"plan run {resp.json()['id']} did not finish")


@pytest.fixture(scope="module")
def seeded(live_server: LiveServer, _db_settings: Settings) -> Seeded:
    """Besides the demo seed's plan: 20 older nightly plans written straight to the database (so the history has a
    second page; the first of them pruned, the last with a trigger full of markup), a job each for two tenants, and
    two manual re-plans through the API."""
    engine = make_engine(_db_settings)
    now = datetime.now(UTC)
    with Session(engine) as session:
        inserted = []
        for i in range(20):
            plan = Plan(horizon_start=now, horizon_end=now + timedelta(hours=72), slot_minutes=15, objective="cost",
                        solver="cp-sat", trigger=EVIL_TRIGGER if i == 19 else "nightly", status=PlanStatus.EMPTY,
                        is_current=False, stats={}, pruned_at=now if i == 0 else None)
            session.add(plan)
            session.flush()
            inserted.append(plan.id)
        session.commit()
    engine.dispose()

    day = (now + timedelta(days=1)).replace(hour=10, minute=0, second=0, microsecond=0)
    jobs = {}
    for tenant in ("ml-platform", "render-farm"):
        body = {"name": f"hist-{tenant}", "gpu_count": 2, "reference_gpu_hours": 4,
                "release_at": day.isoformat(), "deadline_at": (day + timedelta(days=1)).isoformat(),
                "command": "python train.py"}
        jobs[tenant] = _api(live_server, tenant, "POST", "/api/v1/jobs", json=body).json()["id"]
    older = _replan(live_server)
    newest = _replan(live_server)

    items = []
    cursor = None
    while True:
        page = _api(live_server, "ops", "GET", "/api/v1/plans",
                    params={"limit": 200, **({"cursor": cursor} if cursor else {})}).json()
        items += page["items"]
        cursor = page["next_cursor"]
        if not cursor:
            break
    summaries = {p["id"]: p for p in items}
    # What the assertions below rest on: both jobs planned in both manual plans.
    assert [p["id"] for p in items][:2] == [newest, older]
    assert summaries[older]["fleet"]["jobs_assigned"] == summaries[newest]["fleet"]["jobs_assigned"] == 2
    return Seeded([p["id"] for p in items], newest, older, inserted[0], jobs, summaries)


def _history_ids(page) -> list[int]:  # type: ignore[no-untyped-def]
    return [int(x) for x in page.locator("#history-table tbody tr[data-plan-id]").evaluate_all(
        "rows => rows.map(r => r.dataset.planId)")]


def _header(page) -> list[str]:  # type: ignore[no-untyped-def]
    return [t.strip() for t in page.locator("#history-table thead th").all_inner_texts()]


def _number(text: str) -> float:
    """A figure as the page shows it (en-US grouping, e.g. "1,234.56 EUR") as a float."""
    return float(re.sub(r"[^0-9.\-]", "", text.replace("\u2212", "-")))


def test_operator_sees_plans_newest_first_with_fleet_figures_and_older_pages(page, live_server, seeded):
    sign_in(page, live_server, "ops", "/ui/plan")
    page.click("#history-link")  # the history is one click away
    page.wait_for_selector("#history-table tbody tr[data-plan-id]")
    assert _history_ids(page) == seeded.ids[:20]  # first page: the 20 newest, newest first
    assert _header(page) == BASE_COLS + FLEET_COLS

    rows = page.locator("#history-table tbody tr[data-plan-id]")
    current = page.locator(f"#history-table tr[data-plan-id='{seeded.newest}']")
    assert current.locator(".state.current").inner_text() == "current"
    assert page.locator("#history-table .state.current").count() == 1
    assert page.locator(f"#history-table tr[data-plan-id='{seeded.older}'] .state.current").count() == 0

    # The newest plan's fleet figures: both jobs planned, cost in its currency, saving = run-now cost - cost.
    fleet = seeded.summaries[seeded.newest]["fleet"]
    cells = [c.strip() for c in current.locator("td").all_inner_texts()]
    assert len(cells) == len(BASE_COLS + FLEET_COLS)
    by_col = dict(zip(BASE_COLS + FLEET_COLS, cells, strict=True))
    assert by_col["Trigger"] == "manual"
    assert (by_col["Planned"], by_col["Not planned"]) == ("2", "0")
    assert by_col["Cost"].endswith(fleet["currency"]) and _number(by_col["Cost"]) == pytest.approx(fleet["cost"], abs=0.01)
    assert fleet["run_now_cost"] is not None
    assert by_col["Saving"].endswith(fleet["currency"])
    assert _number(by_col["Saving"]) == pytest.approx(fleet["run_now_cost"] - fleet["cost"], abs=0.01)
    assert _number(by_col["CO2 kg"]) == pytest.approx(fleet["carbon_kg"], abs=0.05)

    # A trigger with markup is shown as text.
    assert EVIL_TRIGGER in page.locator("#history-table").inner_text()
    assert page.locator("#history-table img").count() == 0

    # Older plans are appended below; the pruned one says so, the others do not.
    assert "assignments pruned" not in page.locator("#history-table").inner_text()
    page.click("#older-btn")
    expect(rows).to_have_count(len(seeded.ids))
    assert _history_ids(page) == seeded.ids
    assert page.locator("#older-btn").is_hidden()
    assert "assignments pruned" in rows.filter(has=page.locator(f"a[href='/ui/plan?id={seeded.pruned}']")).inner_text()
    assert page.locator("#history-table tr", has_text="assignments pruned").count() == 1
    page.locator("#history").scroll_into_view_if_needed()
    shot(page, "plan-history")

    # The table scrolls inside its card on a phone; the page itself does not get wider.
    page.set_viewport_size({"width": 390, "height": 844})
    page.wait_for_timeout(200)
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, f"/ui/plan is {overflow} px wider than a phone"
    shot(page, "plan-history-phone")


def test_a_past_plan_opens_from_its_link_and_says_it_is_not_current(page, live_server, seeded):
    sign_in(page, live_server, "ops", "/ui/plan")
    page.click("#history-link")  # the history is one click away
    summary = page.locator("#plan-summary")
    expect(summary).to_contain_text(f"Plan #{seeded.newest} · the current plan")
    page.wait_for_selector(f"#history-table tr[data-plan-id='{seeded.older}']")

    page.click(f"#history-table tr[data-plan-id='{seeded.older}'] a[href='/ui/plan?id={seeded.older}']")
    page.wait_for_url(f"{live_server.url}/ui/plan?id={seeded.older}")
    expect(summary).to_contain_text(f"Plan #{seeded.older} · not the current plan")
    assert summary.inner_text().startswith(f"Plan #{seeded.older} · not the current plan")
    page.wait_for_selector(f"#history-table tr[data-plan-id='{seeded.older}']")
    assert page.locator(f"#history-table tr[data-plan-id='{seeded.older}']").get_attribute("aria-current") == "true"
    # An operator admin sees every tenant's assignment in it.
    page.wait_for_selector("#assign-table tr[data-job-id]")
    shown = {int(x) for x in page.locator("#assign-table tr[data-job-id]").evaluate_all(
        "rows => rows.map(r => r.dataset.jobId)")}
    assert shown == set(seeded.jobs.values())

    page.click("#current-link")
    page.wait_for_url(f"{live_server.url}/ui/plan")
    expect(summary).to_contain_text(f"Plan #{seeded.newest} · the current plan")
    assert summary.inner_text().startswith(f"Plan #{seeded.newest} · the current plan")

    page.goto(f"{live_server.url}/ui/plan?id=999999")
    expect(summary).to_have_text("No plan #999999.")
    page.wait_for_selector("#history-table tbody tr[data-plan-id]")  # the history still lists the plans


def test_a_tenant_sees_the_history_without_fleet_figures(page, live_server, seeded):
    sign_in(page, live_server, "render-farm", "/ui/plan")
    page.click("#history-link")  # the history is one click away
    page.wait_for_selector("#history-table tbody tr[data-plan-id]")
    assert _history_ids(page) == seeded.ids[:20]
    assert _header(page) == BASE_COLS
    assert page.locator(f"#history-table tr[data-plan-id='{seeded.newest}'] .state.current").count() == 1
    for row in page.locator("#history-table tbody tr[data-plan-id]").all():
        assert row.locator("td").count() == len(BASE_COLS)
    currency = seeded.summaries[seeded.newest]["fleet"]["currency"]
    assert currency not in page.locator("#history-table").inner_text()
    assert page.locator("#replan-btn").count() == 0

    # A past plan shows only the tenant's own job.
    page.click(f"#history-table a[href='/ui/plan?id={seeded.older}']")
    page.wait_for_url(f"{live_server.url}/ui/plan?id={seeded.older}")
    page.wait_for_selector("#assign-table tr[data-job-id]")
    assert page.locator("#plan-summary").inner_text().startswith(f"Plan #{seeded.older} · not the current plan")
    shown = {int(x) for x in page.locator("#assign-table tr[data-job-id]").evaluate_all(
        "rows => rows.map(r => r.dataset.jobId)")}
    assert shown == {seeded.jobs["render-farm"]}


def test_replan_from_a_past_plan_shows_the_new_current_plan_and_refreshes_the_history(page, live_server, seeded):
    sign_in(page, live_server, "ops", f"/ui/plan?id={seeded.older}")
    summary = page.locator("#plan-summary")
    expect(summary).to_contain_text(f"Plan #{seeded.older} · not the current plan")
    page.wait_for_selector(f"#history-table tr[data-plan-id='{seeded.newest}'] .state.current")
    page.click("#replan-btn")
    expect(summary).to_contain_text(re.compile(r"^Plan #\d+ · the current plan"), timeout=120_000)
    new_id = int(re.match(r"Plan #(\d+)", summary.inner_text()).group(1))
    assert new_id > seeded.newest
    assert page.url == f"{live_server.url}/ui/plan"
    page.wait_for_selector(f"#history-table tr[data-plan-id='{new_id}'] .state.current")
    assert _history_ids(page)[:3] == [new_id, seeded.newest, seeded.older]
    assert page.locator("#history-table .state.current").count() == 1
    assert page.locator(f"#history-table tr[data-plan-id='{new_id}']").get_attribute("aria-current") == "true"
