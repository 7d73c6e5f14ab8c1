"""Hostile input (issue 20): each request here was a 500, a huge answer, or accepted and then useless on main."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from app.enums import Role
from tests.conftest import job_payload, make_token
from tests.security.conftest import bearer


def _post_raw(client, path: str, body: str, token: str):  # type: ignore[no-untyped-def]
    return client.post(path, data=body.encode(), headers={**bearer(token), "Content-Type": "application/json"})


def test_a_read_only_token_is_refused_before_its_batch_is_validated(client, session, small_fleet, now, monkeypatch):
    from app.services import jobs

    reader = make_token(session, "team-a", Role.READONLY)
    validated: list[int] = []

    def check_job(*args: object, **kwargs: object) -> tuple[None, list[object]]:
        validated.append(1)
        return None, []

    monkeypatch.setattr(jobs, "check_job", check_job)
    bad = job_payload(now, allowed_regions=[f"nowhere{i}" for i in range(50)], gpu_count="many")
    resp = client.post("/api/v1/jobs/batch", json={"jobs": [bad] * 200}, headers=bearer(reader))
    assert resp.status_code == 403 and "read-only" in resp.json["detail"]  # was 422 listing 10,000 errors
    assert validated == []
    resp = client.post("/api/v1/plans/preview", json={"name": 5}, headers=bearer(reader))
    assert resp.status_code == 403


def test_error_lists_are_capped_with_a_count(client, session, small_fleet, now):
    token = make_token(session, "team-a")
    bad = job_payload(now, allowed_regions=["mars", "venus"])  # valid shape, unknown regions: the service's checks
    resp = client.post("/api/v1/jobs/batch", json={"jobs": [bad] * 300}, headers=bearer(token))
    assert resp.status_code == 422
    assert len(resp.json["errors"]) == 100 and resp.json["error_count"] == 600
    assert resp.json["errors"][0]["field"] == "jobs[0].allowed_regions[0]"
    assert "300 of 300 jobs" in resp.json["detail"]
    # the schema's checks (webargs) are capped the same way
    resp = client.post("/api/v1/jobs/batch", json={"jobs": [job_payload(now, gpu_count="x", priority="y")] * 300},
                       headers=bearer(token))
    assert resp.status_code == 422
    assert len(resp.json["errors"]) == 100 and resp.json["error_count"] == 600


@pytest.mark.parametrize("path", [
    "/api/v1/regions/de%00fra", "/api/v1/hardware/h1%0000", "/api/v1/profiles/h100%00/training",
    "/api/v1/regions/de%00fra/overrides",
])
def test_nul_in_a_path_is_not_found(client, session, small_fleet, path):
    token = make_token(session, "ops", Role.ADMIN, operator=True)
    resp = client.get(path, headers=bearer(token))
    assert resp.status_code in (404, 405) and resp.mimetype == "application/problem+json"
    resp = client.put(path, json={}, headers=bearer(token))
    assert resp.status_code in (404, 405)


def test_nul_or_lone_surrogate_in_a_query_names_the_parameter(client, session, small_fleet):
    token = make_token(session, "ops", Role.ADMIN, operator=True)
    for query in ("tenant=a%00b", "region=de%00"):
        resp = client.get(f"/api/v1/reports/monthly?{query}", headers=bearer(token))
        assert resp.status_code == 422, (query, resp.json)
        assert resp.json["errors"][0]["field"] == query.split("=")[0]
    resp = client.get("/api/v1/jobs?batch_id=%00", headers=bearer(token))
    assert resp.status_code == 422 and resp.json["errors"][0]["field"] == "batch_id"


def test_lone_surrogate_in_a_job_is_422_naming_the_field(client, session, small_fleet, now):
    token = make_token(session, "team-a")
    body = json.dumps(job_payload(now, name="job-\ud800"))  # ensure_ascii writes it as the escape \ud800
    resp = _post_raw(client, "/api/v1/jobs", body, token)
    assert resp.status_code == 422 and resp.json["errors"][0]["field"] == "name"
    assert "surrogate" in resp.json["errors"][0]["message"]
    body = json.dumps({"jobs": [job_payload(now), job_payload(now, env={"K\udc00": "v"})]})
    resp = _post_raw(client, "/api/v1/jobs/batch", body, token)
    assert resp.status_code == 422 and resp.json["errors"][0]["field"] == "jobs[1].env.K\\udc00"
    # a surrogate pair is one character (an emoji), not an error
    resp = _post_raw(client, "/api/v1/jobs", json.dumps(job_payload(now, name="job-\U0001f680")), token)
    assert resp.status_code == 201 and resp.json["name"] == "job-\U0001f680"


def test_deep_nesting_is_400_not_a_crash(client, session, small_fleet, now):
    token = make_token(session, "team-a")
    for depth in (100_000, 40):
        resp = _post_raw(client, "/api/v1/jobs", "[" * depth + "]" * depth, token)
        assert resp.status_code == 400, depth
        assert "deeper than" in resp.json["detail"]
    ok = job_payload(now, env={"A": "1"})
    assert client.post("/api/v1/jobs", json=ok, headers=bearer(token)).status_code == 201


def test_duplicate_json_keys_are_refused(client, session, small_fleet, now):
    token = make_token(session, "team-a")
    body = json.dumps(job_payload(now))[:-1] + ', "gpu_count": 9999}'
    resp = _post_raw(client, "/api/v1/jobs", body, token)
    assert resp.status_code == 400 and "'gpu_count' is given twice" in resp.json["detail"]
    assert client.get("/api/v1/jobs", headers=bearer(token)).json["items"] == []


def test_a_job_needs_a_command_or_an_image(client, session, small_fleet, now):
    token = make_token(session, "team-a")
    body = job_payload(now)
    del body["command"]
    resp = client.post("/api/v1/jobs", json=body, headers=bearer(token))
    assert resp.status_code == 422
    assert sorted(e["field"] for e in resp.json["errors"]) == ["command", "image"]
    for over in ({"image": "ghcr.io/acme/train:1"}, {"command": "python train.py"}):
        assert client.post("/api/v1/jobs", json={**body, **over}, headers=bearer(token)).status_code == 201


def test_a_deadline_already_past_is_refused(client, session, small_fleet):
    from app.db import utcnow

    token = make_token(session, "team-a")
    past = utcnow() - timedelta(hours=1)
    resp = client.post("/api/v1/jobs", json=job_payload(past - timedelta(hours=24)), headers=bearer(token))
    assert resp.status_code == 422 and [e["field"] for e in resp.json["errors"]] == ["deadline_at"]
    assert "past" in resp.json["errors"][0]["message"]


@pytest.mark.parametrize("over, field", [
    ({"reference_gpu_hours": 1e-300}, "reference_gpu_hours"),
    ({"reference_gpu_hours": 1e8}, "reference_gpu_hours"),
    ({"env": {f"K{i}": "v" for i in range(101)}}, "env"),
    ({"env": {f"K{i}": "v" * 9_000 for i in range(8)}}, "env"),
])
def test_numbers_and_env_have_bounds(client, session, small_fleet, now, over, field):
    token = make_token(session, "team-a")
    resp = client.post("/api/v1/jobs", json=job_payload(now, **over), headers=bearer(token))
    assert resp.status_code == 422 and field in [e["field"] for e in resp.json["errors"]], resp.json
