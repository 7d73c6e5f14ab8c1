"""Operators (admin and read-only) read every tenant's jobs, runs, receipts and plans; tenants only their own."""

from __future__ import annotations

from datetime import timedelta

import pytest

from app.enums import Role
from tests.app.test_reports_support import Planned, finish_run, make_plan, submit
from tests.conftest import make_token


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def fleet_of_two(session, small_fleet, now):
    tokens = {"a": make_token(session, "team-a"), "b": make_token(session, "team-b"),
              "ops": make_token(session, "ops", Role.ADMIN, operator=True)}
    tokens["ops-ro"] = make_token(session, "ops", Role.READONLY, operator=True)
    tokens["ops-member"] = make_token(session, "ops", Role.MEMBER, operator=True)
    a = submit(session, "team-a", now, 2)
    b = submit(session, "team-b", now, 1)
    make_plan(session, now, [
        Planned(a[0], "de", "h100", now + timedelta(hours=2), 2, 100.0, 10.0, 40.0, 15.0, 50.0),
        Planned(a[1], "fi", "a100", now + timedelta(hours=5), 4, 200.0, 12.0, 16.0, 30.0, 80.0),
        Planned(b[0], "de", "a100", now + timedelta(hours=1), 3, 50.0, 5.0, 20.0, 6.0, 25.0),
    ])
    finish_run(session, b[0], now + timedelta(hours=1), 3, 40.0, cost=4.0, carbon_kg=15.0)
    return tokens, a, b


@pytest.mark.parametrize("who", ["ops", "ops-ro"])
def test_operator_lists_and_opens_every_tenants_work(client, fleet_of_two, who):
    tokens, a, b = fleet_of_two
    h = auth(tokens[who])
    page = client.get("/api/v1/jobs", headers=h).json
    assert {j["id"] for j in page["items"]} == {*a, *b}
    assert set(page["tenants"].values()) == {"team-a", "team-b"}
    only_b = client.get("/api/v1/jobs?tenant=team-b", headers=h).json["items"]
    assert [j["id"] for j in only_b] == b
    assert client.get("/api/v1/jobs?tenant=nobody", headers=h).json["errors"][0]["field"] == "tenant"
    assert client.get(f"/api/v1/jobs/{b[0]}", headers=h).json["name"] == "team-b-0"
    runs = client.get(f"/api/v1/jobs/{b[0]}/runs", headers=h).json
    assert [r["runtime_job_id"] for r in runs] == [f"local-{b[0]}"]
    receipt = client.get(f"/api/v1/jobs/{b[0]}/receipt", headers=h).json
    assert receipt["basis"] == "metered" and receipt["job_id"] == b[0]
    # Every link of the plan page opens: each assignment's job is readable by the operator.
    plan = client.get("/api/v1/plans/current", headers=h).json
    for item in plan["assignments"]:
        assert client.get(f"/api/v1/jobs/{item['job_id']}", headers=h).status_code == 200


def test_read_only_operator_cannot_cancel_another_tenants_job(client, fleet_of_two):
    tokens, a, _b = fleet_of_two
    assert client.post(f"/api/v1/jobs/{a[0]}/cancel", headers=auth(tokens["ops-ro"])).status_code in (403, 404)
    assert client.get(f"/api/v1/jobs/{a[0]}", headers=auth(tokens["a"])).json["state"] == "planned"


def test_tenants_and_operator_members_see_only_their_own(client, fleet_of_two):
    tokens, a, b = fleet_of_two
    page = client.get("/api/v1/jobs", headers=auth(tokens["a"])).json
    assert {j["id"] for j in page["items"]} == set(a) and page["tenants"] == {}
    assert client.get("/api/v1/jobs?tenant=team-b", headers=auth(tokens["a"])).status_code == 404
    for path in (f"/api/v1/jobs/{b[0]}", f"/api/v1/jobs/{b[0]}/runs", f"/api/v1/jobs/{b[0]}/receipt"):
        resp = client.get(path, headers=auth(tokens["a"]))
        assert resp.status_code == 404 and "team-b" not in resp.get_data(as_text=True)
    plan = client.get("/api/v1/plans/current", headers=auth(tokens["a"])).json
    assert {x["job_id"] for x in plan["assignments"]} == set(a)
    # A member of the operator tenant submits work of its own: it is not a fleet reader.
    assert client.get("/api/v1/jobs", headers=auth(tokens["ops-member"])).json["items"] == []
    assert client.get(f"/api/v1/jobs/{a[0]}", headers=auth(tokens["ops-member"])).status_code == 404
