"""A re-plan asked for through the API answers 202 at once; a worker runs it; the run is polled at its Location."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from app import create_app
from app.enums import Role
from app.models import Plan
from app.services import plan_runs
from app.tasks import TASK_MODULES
from tests.app.test_reports_views import priced_fleet  # noqa: F401  (fixture)
from tests.conftest import job_payload, make_token, replan_via_api


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_post_answers_202_before_any_solve_and_the_run_reports_its_phases(app, client, session, priced_fleet):  # noqa: F811
    member, ops = make_token(session, "team-a"), make_token(session, "ops", Role.ADMIN, operator=True)
    now = priced_fleet
    body = job_payload(now, release_at=(now + timedelta(hours=1)).isoformat(),
                       deadline_at=(now + timedelta(hours=30)).isoformat())
    assert client.post("/api/v1/jobs", json=body, headers=auth(member)).status_code == 201

    resp = client.post("/api/v1/plans", json={"objective": "carbon"}, headers=auth(ops))
    assert resp.status_code == 202 and resp.headers["Retry-After"]
    assert resp.json["state"] == "queued" and resp.json["objective"] == "carbon" and resp.json["plan_id"] is None
    assert session.scalar(select(func.count()).select_from(Plan)) == 0  # nothing solved in the request
    queued = client.get(resp.headers["Location"], headers=auth(ops)).json
    assert queued["state"] == "queued" and queued["progress"] == 0.0

    phases: list[str] = []
    with app.extensions["gridshift"].sessions() as worker:
        plan_runs.execute(worker, app.extensions["gridshift"].settings, resp.json["id"], on_phase=phases.append)
        assert plan_runs.execute(worker, app.extensions["gridshift"].settings, resp.json["id"]) is None  # once
    assert phases == ["problem", "solve", "store"]
    done = client.get(resp.headers["Location"], headers=auth(ops))
    assert "Retry-After" not in done.headers
    run = done.json
    assert run["state"] == "succeeded" and run["phase"] == "done" and run["finished_at"]
    summary = run["summary"]
    assert summary["objective"] == "carbon" and summary["is_current"] and summary["jobs_planned"] == 1
    assert summary["carbon_kg"] <= summary["run_now_carbon_kg"] + 1e-9
    assert summary["saving_carbon_kg"] == summary["run_now_carbon_kg"] - summary["carbon_kg"]
    assert session.get(Plan, run["plan_id"]).objective == "carbon"


@pytest.fixture
def unbudgeted(settings):  # type: ignore[no-untyped-def]
    """The app without the tenants' budget of expensive requests (each re-plan asked for costs 300 of 600 a minute)."""
    application = create_app(replace(settings, cost_budget=""))
    yield application
    application.extensions["gridshift"].engine.dispose()


def test_runs_are_for_operator_admins_and_a_bad_objective_names_the_field(unbudgeted, session, priced_fleet):  # noqa: F811
    app, client = unbudgeted, unbudgeted.test_client()
    member, ops = make_token(session, "team-a"), make_token(session, "ops", Role.ADMIN, operator=True)
    bad = client.post("/api/v1/plans", json={"objective": "cheapest"}, headers=auth(ops))
    assert bad.status_code == 422 and "objective" in bad.get_data(as_text=True)
    capped = client.post("/api/v1/plans", json={"objective": "carbon_cost_cap"}, headers=auth(ops))
    assert capped.status_code == 422 and "COST_CAP" in capped.get_data(as_text=True)  # no cap configured
    run, plan = replan_via_api(client, app, auth(ops))
    assert run["state"] == "succeeded" and plan is not None and plan["trigger"] == "manual"
    assert client.get(f"/api/v1/plans/runs/{run['id']}", headers=auth(member)).status_code == 403
    assert client.get("/api/v1/plans/runs/999999", headers=auth(ops)).status_code == 404


def test_a_run_whose_plan_raises_is_failed_with_the_reason(app, client, session, priced_fleet, monkeypatch):  # noqa: F811
    ops = make_token(session, "ops", Role.ADMIN, operator=True)

    def broken(*_args, **_kw):  # type: ignore[no-untyped-def]
        raise RuntimeError("solver exploded")

    monkeypatch.setattr(plan_runs.replan_service, "replan", broken)
    run, plan = replan_via_api(client, app, auth(ops))
    assert run["state"] == "failed" and "solver exploded" in run["error"] and plan is None


def test_the_worker_task_is_registered_under_the_services_name(app):  # type: ignore[no-untyped-def]
    assert "app.tasks.planning" in TASK_MODULES
    assert plan_runs.TASK in app.extensions["celery"].tasks


def test_operators_list_every_plan_run_newest_first_scheduled_ones_included(app, client, session, monkeypatch):
    from app.db import utcnow
    from app.enums import PlanRunState
    from app.models import PlanRun
    from app.tasks import planning

    ops, member = make_token(session, "ops", Role.ADMIN, operator=True), make_token(session, "team-a")

    def broken(*_args, **_kw):  # type: ignore[no-untyped-def]
        raise RuntimeError("no prices for de")

    monkeypatch.setattr(plan_runs.replan_service, "replan", broken)
    settings = app.extensions["gridshift"].settings
    with app.app_context():
        for trigger in ("nightly", "hourly", "new-work"):  # what the beat tasks do
            planning.run_planning(session, settings, trigger)
    session.add(PlanRun(trigger="manual", state=PlanRunState.QUEUED, phase="queued", created_at=utcnow()))
    session.commit()

    page = client.get("/api/v1/plans/runs?limit=3", headers=auth(ops))
    assert page.status_code == 200, page.json
    assert [r["trigger"] for r in page.json["items"]] == ["manual", "new-work", "hourly"]
    rest = client.get(f"/api/v1/plans/runs?limit=3&cursor={page.json['next_cursor']}", headers=auth(ops)).json
    assert [r["trigger"] for r in rest["items"]] == ["nightly"] and rest["next_cursor"] is None
    failed = client.get("/api/v1/plans/runs?state=failed&trigger=nightly", headers=auth(ops)).json["items"]
    assert len(failed) == 1 and "no prices for de" in failed[0]["error"] and failed[0]["phase"] == "done"

    assert client.get("/api/v1/plans/runs", headers=auth(member)).status_code == 403
    bad = client.get("/api/v1/plans/runs?state=lost", headers=auth(ops))
    assert bad.status_code == 422 and "state" in bad.get_data(as_text=True)
    assert client.get("/api/v1/plans/runs?cursor=nope", headers=auth(ops)).status_code == 422
