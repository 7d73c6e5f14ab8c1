from __future__ import annotations

import base64
from datetime import timedelta

from app.enums import Role
from tests.conftest import job_payload, make_token


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_health_answers_without_token(client):
    resp = client.get("/api/v1/health")
    assert resp.status_code == 200
    assert resp.json["status"] == "ok"
    assert resp.json["schema_revision"]


def test_api_requires_a_valid_token(client, session):
    assert client.get("/api/v1/jobs").status_code == 401
    resp = client.get("/api/v1/jobs", headers=auth("gs_nope_nope"))
    assert resp.status_code == 401
    assert resp.mimetype == "application/problem+json"


def test_submit_get_list_cancel(client, session, small_fleet, now):
    token = make_token(session, "team-a")
    resp = client.post("/api/v1/jobs", json=job_payload(now), headers=auth(token))
    assert resp.status_code == 201, resp.json
    job = resp.json
    assert job["state"] == "pending" and job["gpu_count"] == 4
    assert client.get(f"/api/v1/jobs/{job['id']}", headers=auth(token)).json["name"] == "train-llm"
    listed = client.get("/api/v1/jobs?state=pending", headers=auth(token)).json
    assert [j["id"] for j in listed["items"]] == [job["id"]]
    cancelled = client.post(f"/api/v1/jobs/{job['id']}/cancel", headers=auth(token))
    assert cancelled.json["state"] == "cancelled"
    again = client.post(f"/api/v1/jobs/{job['id']}/cancel", headers=auth(token))
    assert again.status_code == 409
    events = client.get(f"/api/v1/jobs/{job['id']}/events", headers=auth(token)).json
    assert [e["state"] for e in events] == ["pending", "cancelled"]


def test_other_tenants_job_is_not_found(client, session, small_fleet, now):
    a, b = make_token(session, "team-a"), make_token(session, "team-b")
    job_id = client.post("/api/v1/jobs", json=job_payload(now), headers=auth(a)).json["id"]
    for method, url in [("get", f"/api/v1/jobs/{job_id}"), ("post", f"/api/v1/jobs/{job_id}/cancel"),
                        ("get", f"/api/v1/jobs/{job_id}/events")]:
        resp = getattr(client, method)(url, headers=auth(b))
        assert resp.status_code == 404
        assert "team-a" not in resp.get_data(as_text=True)
    assert client.get("/api/v1/jobs", headers=auth(b)).json["items"] == []


def test_readonly_token_cannot_submit(client, session, small_fleet, now):
    token = make_token(session, "team-a", Role.READONLY)
    resp = client.post("/api/v1/jobs", json=job_payload(now), headers=auth(token))
    assert resp.status_code == 403


def test_bad_fields_are_named(client, session, small_fleet, now):
    token = make_token(session, "team-a")
    cases = {
        "deadline_at": job_payload(now, deadline_at=(now - timedelta(hours=1)).isoformat()),
        "gpu_count": job_payload(now, gpu_count=0),
        "allowed_regions[0]": job_payload(now, allowed_regions=["mars"]),
        "allowed_hardware[0]": job_payload(now, allowed_hardware=["tpu"]),
        "memory_gb_per_gpu": job_payload(now, memory_gb_per_gpu=500),
        "release_at": job_payload(now, release_at="2030-01-01T00:00:00"),  # naive: no offset
    }
    for field, body in cases.items():
        resp = client.post("/api/v1/jobs", json=body, headers=auth(token))
        assert resp.status_code == 422, (field, resp.json)
        assert resp.mimetype == "application/problem+json"
        assert field in [e["field"] for e in resp.json["errors"]], (field, resp.json)


def test_durations_and_allowed_hardware_that_do_not_overlap_are_named(client, session, small_fleet, now):
    token = make_token(session, "team-a")
    body = job_payload(now, durations_minutes={"a100": 60}, allowed_hardware=["h100"])
    del body["reference_gpu_hours"]
    resp = client.post("/api/v1/jobs", json=body, headers=auth(token))
    assert resp.status_code == 422, resp.json
    (error,) = resp.json["errors"]
    assert error["field"] == "allowed_hardware" and "do not overlap" in error["message"]
    assert "h100" in error["message"] and "a100" in error["message"]


def test_deadline_too_short_for_fastest_hardware(client, session, small_fleet, now):
    token = make_token(session, "team-a")
    # 8 reference GPU-hours on 4 GPUs is 2 h on the fastest type; a 1 h window cannot hold it.
    body = job_payload(now, deadline_at=(now + timedelta(hours=1)).isoformat())
    resp = client.post("/api/v1/jobs", json=body, headers=auth(token))
    assert resp.status_code == 422
    assert "shorter than" in resp.json["errors"][0]["message"]


def test_batch_is_all_or_nothing_with_per_item_errors(client, session, small_fleet, now):
    token = make_token(session, "team-a")
    jobs = [job_payload(now, name=f"j{i}") for i in range(5)]
    jobs[3]["gpu_count"] = 1000
    resp = client.post("/api/v1/jobs/batch", json={"jobs": jobs}, headers=auth(token))
    assert resp.status_code == 422
    assert [e["field"] for e in resp.json["errors"]] == ["jobs[3].gpu_count"]
    assert client.get("/api/v1/jobs", headers=auth(token)).json["items"] == []
    jobs[3]["gpu_count"] = 2
    ok = client.post("/api/v1/jobs/batch", json={"jobs": jobs}, headers=auth(token))
    assert ok.status_code == 201 and ok.json["count"] == 5


def test_idempotency_key_returns_first_result(client, session, small_fleet, now):
    token = make_token(session, "team-a")
    body = {"jobs": [job_payload(now, name=f"j{i}") for i in range(3)]}
    headers = {**auth(token), "Idempotency-Key": "nightly-2030-01-01"}
    first = client.post("/api/v1/jobs/batch", json=body, headers=headers)
    second = client.post("/api/v1/jobs/batch", json=body, headers=headers)
    assert first.status_code == second.status_code == 201
    assert first.json == second.json
    page = client.get("/api/v1/jobs?limit=100", headers=auth(token)).json
    assert len(page["items"]) == 3
    body["jobs"][0]["name"] = "changed"
    assert client.post("/api/v1/jobs/batch", json=body, headers=headers).status_code == 409


def test_cursor_pagination_walks_every_job_once(client, session, small_fleet, now):
    token = make_token(session, "team-a")
    body = {"jobs": [job_payload(now, name=f"j{i}") for i in range(25)]}
    ids = set(client.post("/api/v1/jobs/batch", json=body, headers=auth(token)).json["job_ids"])
    seen, cursor = [], None
    while True:
        url = "/api/v1/jobs?limit=10" + (f"&cursor={cursor}" if cursor else "")
        page = client.get(url, headers=auth(token)).json
        seen += [j["id"] for j in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert sorted(seen) == sorted(ids) and len(seen) == 25
    assert client.get("/api/v1/jobs?cursor=garbage!", headers=auth(token)).status_code == 422


def test_job_listing_fast_path_matches_the_documented_schema(client, session, small_fleet, now):
    """GET /jobs and /jobs/{id} build their JSON without marshmallow; it must be exactly what JobOut documents."""
    from app.api.schemas import JobOut, job_json
    from app.models import Job

    token = make_token(session, "team-a")
    varied = [
        job_payload(now),
        {**job_payload(now), "name": "explicit", "reference_gpu_hours": None, "durations_minutes": {"a100": 90},
         "allowed_regions": ["de"], "allowed_hardware": ["a100"], "env": {"K": "v"}, "interruptible": True,
         "image": "repo/img:1", "residency_tag": "eu", "memory_gb_per_gpu": 40},
    ]
    varied[1].pop("reference_gpu_hours")
    for payload in varied:
        resp = client.post("/api/v1/jobs", json=payload, headers=auth(token))
        assert resp.status_code == 201, resp.json
    client.post(f"/api/v1/jobs/{resp.json['id']}/cancel", headers=auth(token))
    session.expire_all()
    jobs = list(session.query(Job).order_by(Job.id.desc()))
    assert len(jobs) == 2
    listed = client.get("/api/v1/jobs", headers=auth(token)).json["items"]
    for job, item in zip(jobs, listed, strict=True):
        assert job_json(job) == JobOut().dump(job) == item
        assert client.get(f"/api/v1/jobs/{job.id}", headers=auth(token)).json == item
    assert {j["state"] for j in listed} == {"pending", "cancelled"}


def test_out_of_range_input_is_a_422_naming_the_field(client, session, small_fleet, now):
    token = make_token(session, "team-a")
    huge = base64.urlsafe_b64encode(b"j99999999999999999999999").decode().rstrip("=")
    for cursor in (huge, base64.urlsafe_b64encode(b"j2147483648").decode().rstrip("="), "ajA"):
        resp = client.get(f"/api/v1/jobs?cursor={cursor}", headers=auth(token))
        assert resp.status_code == 422 and [e["field"] for e in resp.json["errors"]] == ["cursor"], resp.json
    for name, value in [("deadline_at", "9999-12-31T23:00:00-05:00"), ("release_at", "0001-01-01T00:30:00+01:00")]:
        resp = client.post("/api/v1/jobs", json=job_payload(now, **{name: value}), headers=auth(token))
        assert resp.status_code == 422, resp.json
        assert [e["field"] for e in resp.json["errors"]] == [name] and "year" in resp.json["errors"][0]["message"]
    resp = client.post("/api/v1/jobs/batch", headers=auth(token), json={
        "jobs": [job_payload(now), job_payload(now, deadline_at="9999-12-31T23:00:00-05:00")]})
    assert resp.status_code == 422 and [e["field"] for e in resp.json["errors"]] == ["jobs[1].deadline_at"]
    resp = client.get("/api/v1/jobs?deadline_from=9999-12-31T23:00:00-05:00", headers=auth(token))
    assert resp.status_code == 422 and [e["field"] for e in resp.json["errors"]] == ["deadline_from"]
    cases: list[tuple[dict[str, object], str]] = [
        ({"name": "a\u0000b"}, "name"), ({"env": {"K": "a\u0000b"}}, "env.K"), ({"command": "run\u0000"}, "command")]
    for over, field in cases:
        resp = client.post("/api/v1/jobs", json=job_payload(now, **over), headers=auth(token))
        assert resp.status_code == 422, resp.json
        assert resp.json["errors"][0]["field"] == field and "NUL" in resp.json["errors"][0]["message"]
    resp = client.get("/api/v1/jobs?batch_id=a%00b", headers=auth(token))
    assert resp.status_code == 422 and resp.json["errors"][0]["field"] == "batch_id"
    assert client.get("/api/v1/jobs", headers=auth(token)).json["items"] == []  # nothing was stored
