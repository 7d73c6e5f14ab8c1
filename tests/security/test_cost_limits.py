"""Cost-aware limits (issue 20): budgets per tenant for expensive work, concurrency caps, cached reports, a cap on
live tokens, failed-authentication limits that let valid tokens through, and trusted proxies."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from app import create_app
from app.enums import Role
from app.services import auth
from tests.conftest import job_payload, make_token
from tests.security.conftest import bearer


@pytest.fixture
def make_app(settings):  # type: ignore[no-untyped-def]
    apps = []

    def build(**over):  # type: ignore[no-untyped-def]
        app = create_app(replace(settings, **over))
        apps.append(app)
        return app

    yield build
    for app in apps:
        app.extensions["gridshift"].engine.dispose()


def test_report_budget_is_per_tenant_not_per_token(make_app, session):
    client = make_app(cost_budget="30 per minute").test_client()
    a1, a2 = make_token(session, "team-a"), make_token(session, "team-a", Role.READONLY)
    b = make_token(session, "team-b")
    codes = [client.get(f"/api/v1/reports/monthly?month=2030-0{m}", headers=bearer(a1)).status_code
             for m in (1, 2, 3, 4)]
    assert codes == [200, 200, 200, 429]  # a report costs 10 units
    refused = client.get("/api/v1/reports/monthly?month=2030-05", headers=bearer(a2))  # another token, same tenant
    assert refused.status_code == 429 and refused.mimetype == "application/problem+json"
    assert int(refused.headers["Retry-After"]) > 0 and "budget" in refused.json["detail"]
    assert client.get("/api/v1/reports/monthly?month=2030-05", headers=bearer(b)).status_code == 200
    assert client.get("/api/v1/me", headers=bearer(a1)).status_code == 200  # cheap reads are not drawn from it


def test_pdf_reports_cost_more_and_repeated_reports_are_cached(make_app, session):
    client = make_app(cost_budget="70 per minute").test_client()
    token = make_token(session, "team-a")
    first = client.get("/api/v1/reports/monthly.pdf?month=2030-01", headers=bearer(token))
    assert first.status_code == 200 and first.mimetype == "application/pdf"
    again = [client.get("/api/v1/reports/monthly.pdf?month=2030-01", headers=bearer(token)) for _ in range(5)]
    assert all(r.status_code == 200 and r.data == first.data for r in again)  # cached: drawn once
    assert "attachment" in again[0].headers["Content-Disposition"]
    other = client.get("/api/v1/reports/monthly.pdf?month=2030-02", headers=bearer(token))
    assert other.status_code == 429  # 60 + 60 > 70


def test_the_report_cache_is_per_tenant(make_app, session, world):  # type: ignore[no-untyped-def]
    client = make_app(report_cache_s=300).test_client()
    alpha = client.get("/api/v1/reports/monthly?month=2030-01", headers=bearer(world.tokens["alpha-member"]))
    bravo = client.get("/api/v1/reports/monthly?month=2030-01", headers=bearer(world.tokens["bravo-member"]))
    assert alpha.status_code == bravo.status_code == 200
    assert alpha.json["tenant"] != bravo.json["tenant"]
    assert "alpha-secret" not in bravo.get_data(as_text=True)


def test_expensive_requests_of_a_tenant_are_capped_in_number(make_app, session, small_fleet, now):
    app = make_app(cost_concurrency=1)
    client = app.test_client()
    token, other = make_token(session, "team-a"), make_token(session, "team-b")
    tenant_id = auth.get_tenant(session, "team-a").id
    slots = app.extensions["gridshift_costs"].slots
    ticket = slots.acquire(f"tenant:{tenant_id}")  # one of team-a's previews is running
    assert ticket is not None
    busy = client.post("/api/v1/plans/preview", json=job_payload(now), headers=bearer(token))
    assert busy.status_code == 429 and busy.headers["Retry-After"] == "1"
    big = {"jobs": [job_payload(now)] * 80}  # > 10 kB: expensive
    assert client.post("/api/v1/jobs/batch", json=big, headers=bearer(token)).status_code == 429
    assert client.post("/api/v1/jobs/batch", json=big, headers=bearer(other)).status_code == 201
    small = {"jobs": [job_payload(now)] * 3}  # a small batch is not expensive work: no slot needed
    assert client.post("/api/v1/jobs/batch", json=small, headers=bearer(token)).status_code == 201
    slots.release(f"tenant:{tenant_id}", ticket)
    assert client.post("/api/v1/jobs/batch", json=big, headers=bearer(token)).status_code == 201


def test_invalid_batches_draw_on_the_budget_by_size(make_app, session, small_fleet, now):
    client = make_app(cost_budget="200 per minute").test_client()
    token = make_token(session, "team-a")
    bad = {"jobs": [job_payload(now, allowed_regions=["mars-crater"] * 150)] * 600}  # ~1.5 MB: ~150 units
    codes = [client.post("/api/v1/jobs/batch", json=bad, headers=bearer(token)).status_code for _ in range(2)]
    assert codes == [422, 429]
    assert client.post("/api/v1/jobs", json=job_payload(now), headers=bearer(token)).status_code == 201


def test_live_tokens_per_tenant_are_capped(make_app, session):
    client = make_app(max_tokens_per_tenant=3).test_client()
    admin = make_token(session, "team-a", Role.ADMIN)
    made = [client.post("/api/v1/tokens", json={"name": f"t{i}"}, headers=bearer(admin)) for i in range(3)]
    assert [r.status_code for r in made] == [201, 201, 409]
    assert "at most 3 live tokens" in made[2].json["errors"][0]["message"]
    assert client.delete(f"/api/v1/tokens/{made[0].json['id']}", headers=bearer(admin)).status_code == 200
    assert client.post("/api/v1/tokens", json={"name": "t3"}, headers=bearer(admin)).status_code == 201


def test_a_guesser_does_not_lock_out_valid_tokens_from_its_address(make_app, session):
    client = make_app(rate_limit="5 per minute").test_client()
    token = make_token(session, "team-a")
    for i in range(5):
        assert client.get("/api/v1/me", headers=bearer(f"gs_{i:08x}_guess")).status_code == 401
    assert client.get("/api/v1/me", headers=bearer("gs_000000ff_guess")).status_code == 429
    assert client.get("/api/v1/me").status_code == 429  # no token: nothing to look up
    resp = client.get("/api/v1/me", headers=bearer(token))  # same address, a valid token: let through
    assert resp.status_code == 200 and resp.json["tenant"] == "team-a"
    html = client.get("/ui/signin").get_data(as_text=True)
    csrf = re.search(r'name="csrf" value="([^"]+)"', html).group(1)  # type: ignore[union-attr]
    assert client.post("/ui/signin", data={"token": token, "csrf": csrf}).status_code == 302


def test_guesses_at_one_token_prefix_are_counted_from_every_address(make_app, session):
    app = make_app(rate_limit="5 per minute", auth_cache_s=0)
    token = make_token(session, "team-a")
    prefix = token.split("_")[1]
    for i in range(5):
        guesser = app.test_client()
        guesser.environ_base["REMOTE_ADDR"] = f"198.51.100.{i}"
        assert guesser.get("/api/v1/me", headers=bearer(f"gs_{prefix}_guess{i}")).status_code == 401
    guesser = app.test_client()
    guesser.environ_base["REMOTE_ADDR"] = "198.51.100.99"  # a fresh address, the spent prefix: refused after lookup
    assert guesser.get("/api/v1/me", headers=bearer(f"gs_{prefix}_guess99")).status_code == 429
    owner = app.test_client()
    owner.environ_base["REMOTE_ADDR"] = "203.0.113.5"
    assert owner.get("/api/v1/me", headers=bearer(token)).status_code == 200  # the real token still works


def test_forwarded_for_is_honoured_only_from_trusted_proxies(make_app, session):
    app = make_app(rate_limit="3 per minute", trusted_proxies=("127.0.0.1", "10.0.0.0/8"))
    proxy = app.test_client()  # the test client's peer address is 127.0.0.1: the proxy
    via = lambda addr: {"X-Forwarded-For": f"{addr}, 10.1.2.3"}  # noqa: E731  client, then an inner proxy
    for _ in range(3):
        assert proxy.get("/api/v1/me", headers={**via("192.0.2.1"), **bearer("junk")}).status_code == 401
    assert proxy.get("/api/v1/me", headers=via("192.0.2.1")).status_code == 429  # that client is spent
    assert proxy.get("/api/v1/me", headers=via("192.0.2.2")).status_code == 401  # another client behind the proxy
    # a client that is not a trusted proxy cannot pick its address with the header
    direct = app.test_client()
    direct.environ_base["REMOTE_ADDR"] = "192.0.2.50"
    for _ in range(3):
        direct.get("/api/v1/me", headers={"X-Forwarded-For": "192.0.2.77"})
    assert direct.get("/api/v1/me", headers={"X-Forwarded-For": "192.0.2.78"}).status_code == 429
    assert proxy.get("/api/v1/me", headers=via("192.0.2.77")).status_code == 401  # 192.0.2.77 was never charged


def test_trusted_proxies_setting_is_checked():
    from app.config import Settings

    with pytest.raises(ValueError, match="GRIDSHIFT_TRUSTED_PROXIES"):
        Settings.from_env({"GRIDSHIFT_TRUSTED_PROXIES": "10.0.0.0/8,not-an-ip"})
    assert Settings.from_env({"GRIDSHIFT_TRUSTED_PROXIES": "10.0.0.0/8, ::1"}).trusted_proxies == ("10.0.0.0/8", "::1")


def test_manual_replans_draw_on_the_operator_budget(make_app, session, small_fleet):
    client = make_app(cost_budget="100 per minute").test_client()
    ops = make_token(session, "ops", Role.ADMIN, operator=True)
    first = client.post("/api/v1/plans", json={}, headers=bearer(ops))
    assert first.status_code == 202, first.json
    again = client.post("/api/v1/plans", json={}, headers=bearer(ops))  # a re-plan costs the whole budget
    assert again.status_code == 429 and int(again.headers["Retry-After"]) > 0


def test_concurrency_slots_are_shared_through_redis_and_expire():
    import os
    import time

    import redis

    from app import costs

    url = os.environ.get("GRIDSHIFT_TEST_REDIS_URL", "redis://127.0.0.1:6379/2")
    try:
        redis.Redis.from_url(url, socket_connect_timeout=1).ping()
    except redis.RedisError:
        pytest.skip(f"needs Redis at {url} (set GRIDSHIFT_TEST_REDIS_URL)")
    key = f"tenant:test-{time.monotonic_ns()}"
    worker_a, worker_b = costs.Slots(url, 2), costs.Slots(url, 2)  # two gunicorn workers: one cap
    first, second = worker_a.acquire(key), worker_b.acquire(key)
    assert first and second and worker_a.acquire(key) is None and worker_b.acquire(key) is None
    worker_b.release(key, second)
    assert worker_a.acquire(key) is not None
    # a slot whose holder died frees itself once its entry expires
    redis.Redis.from_url(url).zadd(f"gridshift:slots:{key}", {first: time.time() - 1})
    assert worker_b.acquire(key) is not None
