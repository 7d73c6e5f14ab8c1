"""Plan history (GET /api/v1/plans, /plans/{id}) and the retention clean-up of superseded plans' rows."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from types import SimpleNamespace

import pytest
from sqlalchemy import func, select

from app.enums import Role, RunState
from app.models import Assignment, Job, Plan, Run, UnplannedJob
from app.services import plan_history, planning, replan
from tests.app.test_planning_service import add_series
from tests.conftest import job_payload, make_token, replan_via_api


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def history(client, session, app, small_fleet, now):
    """Three plans an hour apart (nightly, hourly, manual) over two tenants' jobs; the manual one is current.

    Team B's second job is cancelled after the first plan, so only that plan ever assigned it.
    """
    for zone in ("DE", "FI"):
        add_series(session, zone, now - timedelta(hours=1), [60.0 + (k % 24) for k in range(120)])
    tokens = {"a": make_token(session, "team-a"), "b": make_token(session, "team-b"),
              "ops": make_token(session, "ops", Role.ADMIN, operator=True)}
    ids: dict[str, list[int]] = {}
    for team, n in (("a", 2), ("b", 2)):
        body = {"jobs": [job_payload(now, name=f"{team}{i}", gpu_count=2, reference_gpu_hours=4,
                                     release_at=(now + timedelta(hours=1)).isoformat()) for i in range(n)]}
        rep = client.post("/api/v1/jobs/batch", json=body, headers=auth(tokens[team]))
        assert rep.status_code == 201, rep.json
        ids[team] = rep.json["job_ids"]
    settings = app.extensions["gridshift"].settings
    plans = [replan.replan(session, settings, "nightly", now=now).plan_id]
    session.commit()
    assert client.post(f"/api/v1/jobs/{ids['b'][1]}/cancel", headers=auth(tokens["b"])).status_code == 200
    for k, trigger in ((1, "hourly"), (2, "manual")):
        plans.append(replan.replan(session, settings, trigger, now=now + timedelta(minutes=20 * k)).plan_id)
        session.commit()
    return tokens, ids, plans


def test_history_lists_plans_newest_first_with_fleet_figures_for_operators(client, session, history):
    tokens, _ids, plans = history
    page = client.get("/api/v1/plans?limit=2", headers=auth(tokens["ops"])).json
    assert [p["id"] for p in page["items"]] == [plans[2], plans[1]]
    assert [p["trigger"] for p in page["items"]] == ["manual", "hourly"]
    assert [p["is_current"] for p in page["items"]] == [True, False]
    older = client.get(f"/api/v1/plans?limit=2&cursor={page['next_cursor']}", headers=auth(tokens["ops"])).json
    assert [p["id"] for p in older["items"]] == [plans[0]] and older["next_cursor"] is None
    first = older["items"][0]
    stored = session.get(Plan, plans[0])
    assert first["fleet"]["jobs_assigned"] == 4 and first["fleet"]["jobs_unplanned"] == 0
    assert first["fleet"]["cost"] == pytest.approx(stored.stats["cost"])
    assert first["fleet"]["run_now_cost"] == pytest.approx(stored.stats["run_now"]["cost"])
    assert first["fleet"]["currency"] == "EUR" and first["solve_s"] > 0
    # the cancelled job is in no later plan
    assert page["items"][0]["fleet"]["jobs_assigned"] == 3
    nightly = client.get("/api/v1/plans?trigger=nightly", headers=auth(tokens["ops"])).json["items"]
    assert [p["id"] for p in nightly] == [plans[0]]


def test_tenants_see_the_history_without_fleet_totals(client, history):
    tokens, _ids, plans = history
    items = client.get("/api/v1/plans", headers=auth(tokens["a"])).json["items"]
    assert [p["id"] for p in items] == plans[::-1]
    assert all(p["fleet"] is None for p in items)
    assert items[0]["gap_pct"] is None and items[0]["status"] in ("optimal", "feasible")  # the fleet's gap: ops only


def test_bad_history_queries_name_the_field(client, history):
    tokens, _ids, _plans = history
    jobs_cursor = client.get("/api/v1/jobs?limit=1", headers=auth(tokens["a"])).json["next_cursor"]
    rep = client.get(f"/api/v1/plans?cursor={jobs_cursor}", headers=auth(tokens["a"]))
    assert rep.status_code == 422 and rep.json["errors"][0]["field"] == "cursor"
    rep = client.get("/api/v1/plans?limit=0", headers=auth(tokens["a"]))
    assert rep.status_code == 422 and "limit" in str(rep.json)
    assert client.get("/api/v1/plans").status_code == 401


def test_one_plan_by_id_shows_only_the_callers_assignments(client, history):
    tokens, ids, plans = history
    first = client.get(f"/api/v1/plans/{plans[0]}", headers=auth(tokens["b"])).json
    assert first["id"] == plans[0] and first["is_current"] is False and first["pruned_at"] is None
    assert {a["job_id"] for a in first["assignments"]} == set(ids["b"])  # the cancelled job was in this plan
    assert first["region_totals"] == []
    current = client.get("/api/v1/plans/current", headers=auth(tokens["b"])).json
    assert current["id"] == plans[2] and current["is_current"] is True
    assert {a["job_id"] for a in current["assignments"]} == {ids["b"][0]}
    everyone = client.get(f"/api/v1/plans/{plans[0]}", headers=auth(tokens["ops"])).json
    assert len(everyone["assignments"]) == 4 and sum(t["jobs"] for t in everyone["region_totals"]) == 4
    rep = client.get("/api/v1/plans/999999", headers=auth(tokens["a"]))
    assert rep.status_code == 404 and rep.content_type == "application/problem+json"


def _rows(session, plan_id: int) -> dict[int, int]:
    """Assignment id per job of one plan."""
    return dict(session.execute(select(Assignment.job_id, Assignment.id).where(Assignment.plan_id == plan_id)).all())


def test_prune_deletes_only_rows_nothing_reads(client, session, app, history, now):
    tokens, ids, plans = history
    settings = app.extensions["gridshift"].settings
    a0, a1, cancelled = ids["a"][0], ids["a"][1], ids["b"][1]
    first, _second, current = (_rows(session, p) for p in plans)
    # job a0 was dispatched from the first plan: its run executes that plan's assignment
    session.add(Run(job_id=a0, assignment_id=first[a0], attempt=1, run_key=f"gs-{a0}-1-test", state=RunState.RUNNING,
                    started_at=now + timedelta(hours=1)))
    session.commit()
    report = client.get("/api/v1/reports/monthly?month=2030-01", headers=auth(tokens["ops"])).json
    receipt = client.get(f"/api/v1/jobs/{a0}/receipt", headers=auth(tokens["a"])).json
    before = session.scalar(select(func.count()).select_from(Assignment))

    # nothing is older than the retention period yet, and 0 days keeps everything
    assert plan_history.prune(session, settings, now=now + timedelta(days=1))["plans"] == 0
    keep_all = replace(settings, plan_retention_days=0)
    assert plan_history.prune(session, keep_all, now=now + timedelta(days=400))["plans"] == 0

    later = now + timedelta(days=settings.plan_retention_days, hours=2)
    done = plan_history.prune(session, settings, now=later)
    session.commit()
    assert done["plans"] == 2  # the two superseded plans; the current one is never pruned
    session.expire_all()
    assert _rows(session, plans[0]) == {a0: first[a0], cancelled: first[cancelled]}  # run's row, job's newest row
    assert _rows(session, plans[1]) == {}
    assert _rows(session, plans[2]) == current
    assert done["assignments"] == before - session.scalar(select(func.count()).select_from(Assignment)) == 5
    assert session.scalar(select(func.count()).select_from(UnplannedJob)) == 0
    # what reports, receipts and dispatch read is unchanged
    assert client.get("/api/v1/reports/monthly?month=2030-01", headers=auth(tokens["ops"])).json["total"] == report["total"]
    assert client.get(f"/api/v1/jobs/{a0}/receipt", headers=auth(tokens["a"])).json == receipt
    assert session.scalar(select(Run.assignment_id).where(Run.job_id == a0)) == first[a0]
    # the pruned plans keep their summary, with the job counts they had
    items = client.get("/api/v1/plans", headers=auth(tokens["ops"])).json["items"]
    by_id = {p["id"]: p for p in items}
    assert by_id[plans[0]]["pruned_at"] is not None and by_id[plans[0]]["fleet"]["jobs_assigned"] == 4
    assert by_id[plans[1]]["fleet"]["jobs_assigned"] == 3 and by_id[plans[2]]["pruned_at"] is None
    shown = client.get(f"/api/v1/plans/{plans[1]}", headers=auth(tokens["ops"])).json
    assert shown["pruned_at"] is not None and shown["assignments"] == []
    # a second clean-up finds nothing left to do
    assert plan_history.prune(session, settings, now=later)["plans"] == 0
    assert session.scalar(select(Job.state).where(Job.id == a1)).value == "planned"


def test_a_failed_plan_is_kept_for_the_record_but_not_made_current(app, client, session, history, monkeypatch):
    tokens, _ids, plans = history

    broken = SimpleNamespace(ok=False, violations=["job 7: gpu capacity of de/h100 exceeded in slot 3"])
    monkeypatch.setattr(planning, "check_plan", lambda problem, plan: broken)
    states = dict(session.execute(select(Job.id, Job.state)).all())
    run, failed = replan_via_api(client, app, auth(tokens["ops"]))
    assert run["state"] == "failed" and run["plan_id"] == failed["id"] and run["summary"]["status"] == "failed"
    assert failed["status"] == "failed" and failed["is_current"] is False and failed["assignments"] == []
    assert failed["problems"] == broken.violations  # an operator admin sees why
    mine = client.get(f"/api/v1/plans/{failed['id']}", headers=auth(tokens["a"])).json
    assert mine["status"] == "failed" and mine["problems"] == []  # a tenant does not: it names others' jobs
    session.expire_all()
    assert session.get(Plan, failed["id"]).stats["violations"] == broken.violations
    # dispatch goes on from the last good plan; no job moved
    current = client.get("/api/v1/plans/current", headers=auth(tokens["ops"])).json
    assert current["id"] == plans[2] and len(current["assignments"]) == 3
    assert dict(session.execute(select(Job.id, Job.state)).all()) == states
    items = client.get("/api/v1/plans?limit=2", headers=auth(tokens["ops"])).json["items"]
    assert [(p["id"], p["status"], p["is_current"]) for p in items] == [
        (failed["id"], "failed", False), (plans[2], current["status"], True)]
