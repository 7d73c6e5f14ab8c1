"""The plan view (Gantt data), the preview endpoint's validation and the fleet overview aggregates."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from app.enums import ForecastRunStatus, JobState, Role, RunState, SeriesKind
from app.models import Assignment, ForecastPoint, ForecastRun, Job, MarketSeries, Run
from app.services import fleet, overview
from tests.app.test_reports_support import Planned, make_plan, submit
from tests.conftest import job_payload, make_token, replan_via_api


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def planned(session, small_fleet, now):
    tokens = {"a": make_token(session, "team-a"), "b": make_token(session, "team-b"),
              "ops": make_token(session, "ops", Role.ADMIN, operator=True)}
    a = submit(session, "team-a", now, 1)
    b = submit(session, "team-b", now, 1)
    make_plan(session, now, [
        Planned(a[0], "de", "h100", now + timedelta(hours=2), 2, 100.0, 10.0, 40.0, 15.0, 50.0),
        Planned(b[0], "de", "a100", now + timedelta(hours=1), 3, 60.0, 5.0, 20.0, 6.0, 25.0),
    ])
    return tokens, a, b


def test_no_plan_yet_is_a_clear_404(client, session, small_fleet):
    token = make_token(session, "team-a")
    resp = client.get("/api/v1/plans/current", headers=auth(token))
    assert resp.status_code == 404 and "current plan" in resp.json["detail"]


def test_plan_view_shows_a_tenant_only_its_own_jobs(client, planned):
    tokens, a, b = planned
    body = client.get("/api/v1/plans/current", headers=auth(tokens["a"])).json
    assert [x["job_id"] for x in body["assignments"]] == [a[0]]
    assert body["assignments"][0]["region"] == "de" and body["assignments"][0]["gpu_count"] == 4
    assert "team-b" not in str(body)
    assert body["region_totals"] == []  # not even a count of other tenants' work
    ops = client.get("/api/v1/plans/current", headers=auth(tokens["ops"])).json
    assert sorted(x["job_id"] for x in ops["assignments"]) == sorted([a[0], b[0]])
    totals = {t["region"]: t for t in ops["region_totals"]}
    assert totals["de"]["jobs"] == 2 and totals["de"]["energy_kwh"] == pytest.approx(160.0)


def test_only_an_operator_admin_may_replan(client, planned):
    tokens, _a, _b = planned
    assert client.post("/api/v1/plans", json={}, headers=auth(tokens["a"])).status_code == 403


def test_preview_rejects_bad_fields_like_submit(client, session, planned, now):
    tokens, _a, _b = planned
    body = job_payload(now, gpu_count=1000)
    resp = client.post("/api/v1/plans/preview", json=body, headers=auth(tokens["a"]))
    assert resp.status_code == 422
    assert [e["field"] for e in resp.json["errors"]] == ["gpu_count"]
    ro = make_token(session, "team-a", Role.READONLY)
    assert client.post("/api/v1/plans/preview", json=job_payload(now), headers=auth(ro)).status_code == 403


def test_overview_power_budget_and_gpus_in_use(session, planned, now):
    fleet.add_override(session, "de", now + timedelta(hours=3), now + timedelta(hours=4), 100.0, "test")
    session.commit()
    at = now + timedelta(hours=2, minutes=30)  # team-a's job (4 x h100) and team-b's (4 x a100) both run
    views = {r.code: r for r in overview.regions_overview(session, at, hours_back=3, hours_ahead=5)}
    de = views["de"]
    slot = {t: i for i, t in enumerate(de.slots)}
    h2, h3 = slot[now + timedelta(hours=2)], slot[now + timedelta(hours=3)]
    # 100 kWh over 2 h = 50 kW, plus 60 kWh over 3 h = 20 kW.
    assert de.planned_kw[h2] == pytest.approx(70.0) and de.planned_kw[h3] == pytest.approx(70.0)
    assert de.planned_kw[slot[now]] == 0
    assert de.budget_kw[h3] == 100.0 and de.budget_kw[h2] == 500.0
    gpus = {g["hardware"]: g for g in de.gpus}
    assert gpus["h100"]["in_use_now"] == 4 and gpus["a100"]["in_use_now"] == 4 and gpus["h100"]["inventory"] == 16
    assert views["fi"].planned_kw == [0.0] * 8


def test_overview_counts_work_running_from_an_older_plan(session, planned, now):
    """A running job appears in GPUs in use and planned power after later plans (which hold no row for it)."""
    _tokens, a, b = planned
    asg = session.scalar(select(Assignment).where(Assignment.job_id == a[0]))
    session.get(Job, a[0]).state = JobState.RUNNING
    session.add(Run(job_id=a[0], assignment_id=asg.id, run_key="gs-1-1-h100-abcdef", state=RunState.RUNNING))
    session.commit()
    make_plan(session, now, [Planned(b[0], "de", "a100", now + timedelta(hours=1), 3, 60.0, 5.0, 20.0, 6.0, 25.0)])
    at = now + timedelta(hours=2, minutes=30)
    de = next(r for r in overview.regions_overview(session, at, hours_back=3, hours_ahead=5) if r.code == "de")
    gpus = {g["hardware"]: g for g in de.gpus}
    assert gpus["h100"]["in_use_now"] == 4 and gpus["a100"]["in_use_now"] == 4
    assert de.planned_kw[{t: i for i, t in enumerate(de.slots)}[now + timedelta(hours=2)]] == pytest.approx(70.0)


def test_overview_series_realised_until_now_and_forecast_interval(session, planned, now):
    for h in range(-3, 4):
        session.add(MarketSeries(zone="DE", kind=SeriesKind.PRICE, ts=now + timedelta(hours=h), value=100.0 + h,
                                 unit="EUR/MWh", source="test"))
    run = ForecastRun(zone="DE", kind=SeriesKind.PRICE, model="seasonal_naive", issued_at=now - timedelta(hours=1),
                      status=ForecastRunStatus.SUCCEEDED)
    run.points = [ForecastPoint(ts=now + timedelta(hours=h), value=99.0 + h,
                                quantiles={"q10": 90.0 + h, "q50": 99.0 + h, "q90": 110.0 + h, "note": "x"})
                  for h in range(0, 4)]
    failed = ForecastRun(zone="DE", kind=SeriesKind.PRICE, model="broken", issued_at=now,
                         status=ForecastRunStatus.FAILED)
    failed.points = [ForecastPoint(ts=now + timedelta(hours=1), value=-1.0)]
    session.add_all([run, failed])
    session.commit()
    de = next(r for r in overview.regions_overview(session, now, hours_back=3, hours_ahead=4) if r.code == "de")
    price = next(s for s in de.series if s.kind == "price")
    assert price.realised == [97.0, 98.0, 99.0, 100.0]  # nothing after now counts as realised
    assert price.forecast == [99.0, 100.0, 101.0, 102.0]  # the failed run's points are not shown
    assert price.lower[1] == 91.0 and price.upper[1] == 111.0 and price.model == "seasonal_naive"


def test_overview_api_has_no_job_details(client, planned):
    tokens, _a, _b = planned
    body = client.get("/api/v1/overview?hours_back=2&hours_ahead=4", headers=auth(tokens["a"])).json
    assert {r["code"] for r in body["regions"]} == {"de", "fi"}
    assert "team-b" not in str(body) and "job" not in str(body).lower()


@pytest.fixture
def priced_fleet(session, small_fleet):
    """The small fleet with hourly synthetic prices and carbon around the real clock (the API plans from now)."""
    from datetime import UTC, datetime

    from app.services import demo, market

    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(days=1)
    market.store(session, demo.synthetic_series(["DE", "FI"], start, start + timedelta(days=5), seed=3))
    session.commit()
    return start + timedelta(days=1)


def test_preview_compares_plan_and_run_now_and_stores_nothing(client, session, priced_fleet):
    token = make_token(session, "team-a")
    now = priced_fleet
    body = job_payload(now, release_at=(now + timedelta(hours=1)).isoformat(),
                       deadline_at=(now + timedelta(hours=40)).isoformat(), home_region="de")
    resp = client.post("/api/v1/plans/preview", json=body, headers=auth(token))
    assert resp.status_code == 200, resp.json
    p = resp.json
    assert p["feasible"] and p["currency"] == "EUR"
    assert p["planned"]["region"] in ("de", "fi") and p["run_now"]["region"] == "de"
    assert p["saving_cost"] == pytest.approx(p["run_now"]["cost"] - p["planned"]["cost"])
    assert p["planned"]["cost"] <= p["run_now"]["cost"] + 1e-9  # the planner never does worse than running now
    assert client.get("/api/v1/jobs", headers=auth(token)).json["items"] == []
    assert client.get("/api/v1/plans/current", headers=auth(token)).status_code == 404


def test_operator_replan_puts_a_submitted_job_in_the_current_plan(app, client, session, priced_fleet):
    member, ops = make_token(session, "team-a"), make_token(session, "ops", Role.ADMIN, operator=True)
    now = priced_fleet
    body = job_payload(now, release_at=(now + timedelta(hours=1)).isoformat(),
                       deadline_at=(now + timedelta(hours=30)).isoformat())
    job_id = client.post("/api/v1/jobs", json=body, headers=auth(member)).json["id"]
    run, plan = replan_via_api(client, app, auth(ops))
    assert run["state"] == "succeeded" and run["progress"] == 1.0
    assert run["summary"]["jobs_planned"] == 1 and run["summary"]["jobs_left_out"] == 0
    assert [a["job_id"] for a in plan["assignments"]] == [job_id]
    mine = client.get("/api/v1/plans/current", headers=auth(member)).json
    assert [a["job_id"] for a in mine["assignments"]] == [job_id] and mine["trigger"] == "manual"
    assert client.get(f"/api/v1/jobs/{job_id}", headers=auth(member)).json["state"] == "planned"
    receipt = client.get(f"/api/v1/jobs/{job_id}/receipt", headers=auth(member)).json
    assert receipt["basis"] == "planned" and receipt["region"] == mine["assignments"][0]["region"]


def test_quantile_keys_in_either_spelling():
    assert [overview.quantile_level(k) for k in ("0.1", "q10", "p90", "0.975", "q2.5", "median", "1.5")] == [
        0.1, 0.1, 0.9, 0.975, 0.025, None, None]
