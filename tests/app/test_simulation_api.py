"""Simulations through the API: 202 with a Location, progress in days while a worker replays, then the comparison;
operator admins only; every bad field named; charged against the tenant's budget of expensive work."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select

from app import create_app
from app.enums import JobState, Role, WorkloadClass
from app.models import Job, Simulation
from app.services import auth, demo, fleet, market
from app.services.simulation import runs
from tests.conftest import make_token

DAYS = 2
JOBS_PER_DAY = 6


def seed_history(session, start: datetime, days: int = DAYS) -> None:  # type: ignore[no-untyped-def]
    """Two regions of four H100 each, realised synthetic series around the period, and each day six 4-GPU jobs of
    6 h with 12 h to go: more than the fleet can finish, so a fleet with more GPUs misses fewer."""
    fleet.upsert_hardware(session, "h100", dict(vendor="nvidia", model="H100 SXM", memory_gb=80, tdp_w=700,
                                                idle_w=90, relative_throughput={"default": 1.0}))
    fleet.upsert_region(session, "de", dict(name="Frankfurt", zone="DE", power_budget_kw=500, pue=1.2))
    fleet.upsert_region(session, "fi", dict(name="Hamina", zone="FI", power_budget_kw=300, pue=1.1))
    fleet.set_inventory(session, "de", "h100", 4)
    fleet.set_inventory(session, "fi", "h100", 4)
    market.store(session, demo.synthetic_series(["DE", "FI"], start - timedelta(days=1), start + timedelta(days=days + 4),
                                                seed=5))
    tenant = auth.create_tenant(session, "lab")
    session.flush()
    for d in range(days):
        for k in range(JOBS_PER_DAY):
            release = start + timedelta(days=d, hours=2)
            session.add(Job(tenant_id=tenant.id, name=f"train-{d}-{k}", workload_class=WorkloadClass.TRAINING,
                            gpu_count=4, reference_gpu_hours=24.0, reference_hardware="h100", release_at=release,
                            deadline_at=release + timedelta(hours=12), home_region="de", state=JobState.SUCCEEDED))
    session.commit()


def period_start() -> datetime:
    return datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=10)


def auth_h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def unbudgeted(settings):  # type: ignore[no-untyped-def]
    """The app without the tenants' budget of expensive requests, and a short solve per day."""
    application = create_app(replace(settings, cost_budget="", plan_time_limit_s=2.0))
    yield application
    application.extensions["gridshift"].engine.dispose()


def test_a_simulation_is_queued_replayed_with_progress_and_answers_the_comparison(unbudgeted, session):
    app, client = unbudgeted, unbudgeted.test_client()
    start = period_start()
    seed_history(session, start)
    ops, member = make_token(session, "ops", Role.ADMIN, operator=True), make_token(session, "lab")
    body = {"from": start.date().isoformat(), "to": (start + timedelta(days=DAYS - 1)).date().isoformat(),
            "regions": {"de": {"gpus": {"h100": 16}}}}
    assert client.post("/api/v1/simulations", json=body, headers=auth_h(member)).status_code == 403

    resp = client.post("/api/v1/simulations", json=body, headers=auth_h(ops))
    assert resp.status_code == 202, resp.get_data(as_text=True)
    location = resp.headers["Location"]
    assert location == f"/api/v1/simulations/{resp.json['id']}" and resp.headers["Retry-After"]
    queued = client.get(location, headers=auth_h(ops)).json
    assert queued["state"] == "queued" and queued["progress"] == {"days_done": 0, "days_total": 2 * DAYS,
                                                                   "fraction": 0.0}
    assert queued["from"] == body["from"] and queued["to"] == body["to"] and queued["result"] is None

    seen: list[int] = []
    with app.extensions["gridshift"].sessions() as worker:
        real = runs.run_now
        try:  # watch the progress a poller would see after each day
            def watched(n: int, on_day: Callable[[int], None]) -> None:
                on_day(n)
                seen.append(client.get(location, headers=auth_h(ops)).json["progress"]["days_done"])

            runs.run_now = lambda *a, on_day, **k: real(  # type: ignore[assignment]
                *a, on_day=lambda n: watched(n, on_day), **k)
            runs.execute(worker, app.extensions["gridshift"].settings, resp.json["id"])
        finally:
            runs.run_now = real  # type: ignore[assignment]
        assert runs.execute(worker, app.extensions["gridshift"].settings, resp.json["id"]) is None  # once
    assert seen == list(range(1, 2 * DAYS + 1))
    done = client.get(location, headers=auth_h(ops))
    assert "Retry-After" not in done.headers
    sim = done.json
    assert sim["state"] == "succeeded" and sim["phase"] == "done" and sim["progress"]["fraction"] == 1.0
    result = sim["result"]
    assert result["current"]["jobs"] == result["changed"]["jobs"] == JOBS_PER_DAY * DAYS
    assert result["current"]["deadline_misses"] > 0  # four H100 per region cannot finish the work in time
    assert result["changed"]["deadline_misses"] < result["current"]["deadline_misses"]
    assert result["difference"]["cost"] == pytest.approx(result["changed"]["cost"] - result["current"]["cost"])
    assert [d["date"] for d in result["per_day"]["changed"]] == [body["from"], body["to"]]
    assert client.get(location, headers=auth_h(member)).status_code == 403
    assert client.get("/api/v1/simulations/999999", headers=auth_h(ops)).status_code == 404


@pytest.mark.parametrize(("change", "field"), [
    ({"regions": {"de": {"gpus": {"b200": 8}}}}, "regions.de.gpus.b200"),
    ({"regions": {"de": {"gpus": {"h100": -2}}}}, "regions.de.gpus.h100"),
    ({"regions": {"xx": {"pue": 1.2}}}, "regions.xx"),
    ({"regions": {"de": {"pue": 9}}}, "regions.de.pue"),
    ({"regions": {"se": {"like": "fi", "zone": "SE3"}}}, "regions.se.zone"),
    ({"objective": "cheapest"}, "objective"),
    ({"to": "2020-13-01"}, "to"),
    ({"to": "tomorrow"}, "to"),
])
def test_a_bad_field_is_a_422_naming_it_and_nothing_is_stored(unbudgeted, session, change, field):  # type: ignore[no-untyped-def]
    client = unbudgeted.test_client()
    start = period_start()
    seed_history(session, start)
    ops = make_token(session, "ops", Role.ADMIN, operator=True)
    body = {"from": start.date().isoformat(), "to": start.date().isoformat(), **change}
    resp = client.post("/api/v1/simulations", json=body, headers=auth_h(ops))
    assert resp.status_code == 422, resp.get_data(as_text=True)
    assert field in [e["field"] for e in resp.json["errors"]]
    assert session.scalar(select(func.count()).select_from(Simulation)) == 0


def test_the_period_is_capped_and_must_be_over(unbudgeted, session):
    client = unbudgeted.test_client()
    ops = make_token(session, "ops", Role.ADMIN, operator=True)
    today = datetime.now(UTC).date()
    long = {"from": (today - timedelta(days=200)).isoformat(), "to": (today - timedelta(days=200 - runs.MAX_DAYS)).isoformat()}
    resp = client.post("/api/v1/simulations", json=long, headers=auth_h(ops))
    assert resp.status_code == 422 and resp.json["errors"][0]["field"] == "to"
    assert f"at most {runs.MAX_DAYS} days" in resp.json["errors"][0]["message"]
    ongoing = {"from": (today - timedelta(days=3)).isoformat(), "to": today.isoformat()}
    resp = client.post("/api/v1/simulations", json=ongoing, headers=auth_h(ops))
    assert resp.status_code == 422 and "must be over" in resp.json["errors"][0]["message"]


def test_a_simulation_draws_on_the_tenants_budget_of_expensive_work(client, session):
    start = period_start()
    seed_history(session, start)
    ops = make_token(session, "ops", Role.ADMIN, operator=True)
    body = {"from": start.date().isoformat(), "to": start.date().isoformat()}
    assert client.post("/api/v1/simulations", json=body, headers=auth_h(ops)).status_code == 202
    again = client.post("/api/v1/simulations", json=body, headers=auth_h(ops))
    assert again.status_code == 429 and int(again.headers["Retry-After"]) >= 1
    assert client.post("/api/v1/plans", json={}, headers=auth_h(ops)).status_code == 429  # the same budget
