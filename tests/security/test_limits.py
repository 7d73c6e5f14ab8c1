"""Limits: rate per token, request size, batch size, page size; hardening headers and cookie flags."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app import create_app
from tests.conftest import job_payload, make_token
from tests.security.conftest import bearer


@pytest.fixture
def limited(settings):  # type: ignore[no-untyped-def]
    app = create_app(
        replace(settings, rate_limit="5 per minute", max_content_length=64 * 1024, max_batch_jobs=50)
    )
    yield app
    app.extensions["gridshift"].engine.dispose()


def test_rate_limit_is_per_token_and_answers_problem_json(limited, session):
    client = limited.test_client()
    a, b = make_token(session, "team-a"), make_token(session, "team-b")
    codes = [client.get("/api/v1/me", headers=bearer(a)).status_code for _ in range(6)]
    assert codes == [200] * 5 + [429]
    resp = client.get("/api/v1/jobs", headers=bearer(a))
    assert resp.status_code == 429 and resp.mimetype == "application/problem+json"
    assert int(resp.headers["Retry-After"]) > 0
    assert client.get("/api/v1/me", headers=bearer(b)).status_code == 200  # another token has its own budget
    assert all(client.get("/api/v1/health").status_code == 200 for _ in range(10))  # probes are never limited


def test_request_body_over_the_limit_is_refused_whole(limited, session, small_fleet, now):
    client = limited.test_client()
    token = make_token(session, "team-a")
    big = {"jobs": [job_payload(now, command="x" * 10_000) for _ in range(10)]}  # ~100 KB > 64 KiB
    resp = client.post("/api/v1/jobs/batch", json=big, headers=bearer(token))
    assert resp.status_code == 413 and resp.mimetype == "application/problem+json"
    assert client.get("/api/v1/jobs", headers=bearer(token)).json["items"] == []


def test_batch_size_cap_names_the_field(limited, session, small_fleet, now):
    client = limited.test_client()
    token = make_token(session, "team-a")
    resp = client.post("/api/v1/jobs/batch", json={"jobs": [job_payload(now)] * 51}, headers=bearer(token))
    assert resp.status_code == 422
    assert resp.json["errors"][0]["field"] == "jobs"


def test_page_size_is_capped(client, session):
    token = make_token(session, "team-a")
    resp = client.get("/api/v1/jobs?limit=100000", headers=bearer(token))
    assert resp.status_code == 422
    assert "limit" in [e["field"] for e in resp.json["errors"]]


def test_hardening_headers_and_session_cookie_flags(client, settings):
    resp = client.get("/api/v1/health")
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    assert resp.headers["X-Frame-Options"] == "DENY"
    assert resp.headers["Cache-Control"] == "no-store"
    app = create_app(replace(settings, session_cookie_secure=True))
    assert app.config["SESSION_COOKIE_SECURE"] is True
    assert app.config["SESSION_COOKIE_HTTPONLY"] is True
    assert app.config["SESSION_COOKIE_SAMESITE"] in ("Lax", "Strict")
    app.extensions["gridshift"].engine.dispose()


def test_redis_limit_storage_down_does_not_take_the_api_down(settings, session):
    # nothing listens on this port: the limiter falls back to in-process counters instead of failing requests
    app = create_app(
        replace(settings, rate_limit="3 per minute", rate_limit_storage_url="redis://127.0.0.1:1/0")
    )
    client = app.test_client()
    token = make_token(session, "team-a")
    codes = [client.get("/api/v1/me", headers=bearer(token)).status_code for _ in range(4)]
    assert 500 not in codes and codes[0] == 200
    app.extensions["gridshift"].engine.dispose()


def test_limit_is_shared_by_workers_through_redis(settings, session):
    import os

    import redis

    url = os.environ.get("GRIDSHIFT_TEST_REDIS_URL", "redis://127.0.0.1:6379/2")
    try:
        redis.Redis.from_url(url, socket_connect_timeout=1).ping()
    except redis.RedisError:
        pytest.skip(f"needs Redis at {url} (set GRIDSHIFT_TEST_REDIS_URL)")
    limited = replace(settings, rate_limit="4 per minute", rate_limit_storage_url=url)
    workers = [create_app(limited), create_app(limited)]  # two gunicorn workers: one budget
    token = make_token(session, "team-a")
    codes = [
        workers[i % 2].test_client().get("/api/v1/me", headers=bearer(token)).status_code for i in range(6)
    ]
    assert codes == [200] * 4 + [429] * 2
    for app in workers:
        app.extensions["gridshift"].engine.dispose()


def test_database_outage_is_a_503_to_retry(client, session, monkeypatch):
    from sqlalchemy.exc import OperationalError

    from app.services import auth

    token = make_token(session, "team-a")

    def down(*_a, **_k):
        raise OperationalError("SELECT 1", {}, ConnectionError("server closed the connection unexpectedly"))

    monkeypatch.setattr(auth, "authenticate", down)
    resp = client.get("/api/v1/me", headers=bearer(token))
    assert resp.status_code == 503 and resp.mimetype == "application/problem+json"
    assert resp.headers["Retry-After"] == "2"
    assert "server closed" not in resp.get_data(as_text=True)  # no driver detail leaks to the client
