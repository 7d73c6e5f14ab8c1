from __future__ import annotations

import csv
import io
from dataclasses import replace
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from app import create_app
from app.enums import JobState, Role, RunState
from app.models import Assignment, EnergyContract, Job, Region, Run, Tenant
from app.services import fleet
from tests.app.test_reports_support import Planned, finish_run, make_plan, submit
from tests.conftest import make_token


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def two_tenants(session, small_fleet, now):
    tokens = {"a": make_token(session, "team-a"), "b": make_token(session, "team-b"),
              "ops": make_token(session, "ops", Role.ADMIN, operator=True)}
    a = submit(session, "team-a", now, 2)
    b = submit(session, "team-b", now, 1)
    make_plan(session, now, [
        Planned(a[0], "de", "h100", now + timedelta(hours=2), 2, 100.0, 10.0, 40.0, 15.0, 50.0),
        Planned(a[1], "fi", "a100", now + timedelta(hours=5), 4, 200.0, 12.0, 16.0, 30.0, 80.0),
        Planned(b[0], "de", "a100", now + timedelta(hours=1), 3, 50.0, 5.0, 20.0, 6.0, 25.0),
    ])
    return tokens, a, b


def test_monthly_report_sums_own_jobs_per_region(client, two_tenants, now):
    tokens, _a, _b = two_tenants
    rep = client.get("/api/v1/reports/monthly?month=2030-01", headers=auth(tokens["a"])).json
    assert rep["tenant"] == "team-a" and rep["currency"] == "EUR"
    rows = {r["region"]: r for r in rep["rows"]}
    assert set(rows) == {"de", "fi"}  # team-b's Frankfurt job is not in team-a's report
    # Nothing has run: every figure is planned, and its saving is expected, never claimed.
    assert rows["de"]["planned_energy_kwh"] == pytest.approx(100.0) and rows["de"]["planned_cost"] == pytest.approx(10.0)
    assert rows["de"]["energy_kwh"] == 0 and rows["de"]["cost"] == 0 and rows["de"]["saving_cost"] == 0
    assert rows["fi"]["expected_saving_cost"] == pytest.approx(18.0)
    assert rows["fi"]["expected_saving_carbon_kg"] == pytest.approx(64.0)
    total = rep["total"]
    assert total["jobs"] == 2 and total["planned_jobs"] == 2 and total["settled_jobs"] == 0
    assert total["planned_cost"] == pytest.approx(22.0) and total["expected_run_now_cost"] == pytest.approx(45.0)
    assert total["expected_saving_pct"] == pytest.approx(100 * 23 / 45) and total["saving_pct"] is None
    assert total["carbon_market_kg"] is None  # no energy contract anywhere


def test_operator_admin_sees_every_tenant(client, two_tenants):
    tokens, _a, _b = two_tenants
    rep = client.get("/api/v1/reports/monthly?month=2030-01", headers=auth(tokens["ops"])).json
    assert rep["tenant"] == "all"
    assert {(r["tenant"], r["region"]) for r in rep["rows"]} == {("team-a", "de"), ("team-a", "fi"), ("team-b", "de")}
    assert rep["total"]["planned_energy_kwh"] == pytest.approx(350.0)
    one = client.get("/api/v1/reports/monthly?month=2030-01&tenant=team-b", headers=auth(tokens["ops"])).json
    assert one["total"]["jobs"] == 1
    # A tenant cannot ask for another tenant's report.
    assert client.get("/api/v1/reports/monthly?month=2030-01&tenant=team-b",
                      headers=auth(tokens["a"])).status_code == 404


def test_entries_belong_to_the_month_they_start_in(client, two_tenants):
    tokens, _a, _b = two_tenants
    rep = client.get("/api/v1/reports/monthly?month=2029-12", headers=auth(tokens["a"])).json
    assert rep["rows"] == [] and rep["total"]["jobs"] == 0 and rep["total"]["energy_kwh"] == 0
    pdf = client.get("/api/v1/reports/monthly.pdf?month=2029-12", headers=auth(tokens["a"]))
    assert pdf.status_code == 200 and pdf.get_data().startswith(b"%PDF")  # an empty month still renders
    assert client.get("/api/v1/reports/monthly.csv?month=2029-12", headers=auth(tokens["a"])).get_data(
        as_text=True).splitlines()[1].startswith("2029-12,team-a,all,EUR,0,0,0,0.000")


def test_metered_run_replaces_the_plan_in_report_and_receipt(client, session, two_tenants, now):
    tokens, a, _b = two_tenants
    # 100 kWh of IT energy metered; Frankfurt's PUE 1.2 makes it 120 kWh at the facility, where 100 were planned.
    # The run recorded no cost, so the planned price applies (10 EUR / 100 kWh).
    finish_run(session, a[0], now + timedelta(hours=2), 2, 100.0, cost=None, carbon_kg=45.0)
    r = client.get(f"/api/v1/jobs/{a[0]}/receipt", headers=auth(tokens["a"])).json
    assert r["basis"] == "metered" and r["runtime_job_id"] == f"local-{a[0]}"
    assert r["metered_energy_kwh"] == pytest.approx(100.0) and r["planned_energy_kwh"] == pytest.approx(100.0)
    assert r["actual"] == pytest.approx({"energy_kwh": 120.0, "cost": 12.0, "carbon_kg": 45.0})
    # Run now is the same work: 120 kWh at the facility, priced (no market series here) at the run-now plan's
    # 0.15 EUR and 0.5 kg per kWh: 18 EUR and 60 kg.
    assert r["run_now"] == pytest.approx({"energy_kwh": 120.0, "cost": 18.0, "carbon_kg": 60.0})
    assert r["saving_cost"] == pytest.approx(6.0) and r["saving_carbon_kg"] == pytest.approx(15.0)
    assert r["settled"] is True and r["label"] == "metered" and r["run_now_basis"] == "metered"
    rows = {x["region"]: x for x in client.get("/api/v1/reports/monthly?month=2030-01",
                                               headers=auth(tokens["a"])).json["rows"]}
    assert rows["de"]["settled_jobs"] == 1 and rows["de"]["energy_kwh"] == pytest.approx(120.0)
    assert rows["de"]["saving_cost"] == pytest.approx(6.0) and rows["de"]["planned_jobs"] == 0


def test_receipt_before_planning_and_for_other_tenants(client, session, two_tenants, now):
    tokens, _a, b = two_tenants
    fresh = submit(session, "team-a", now, 1)[0]
    r = client.get(f"/api/v1/jobs/{fresh}/receipt", headers=auth(tokens["a"])).json
    assert r["basis"] is None and r["state"] == "pending"
    resp = client.get(f"/api/v1/jobs/{b[0]}/receipt", headers=auth(tokens["a"]))
    assert resp.status_code == 404 and "team-b" not in resp.get_data(as_text=True)


def test_market_based_carbon_where_a_contract_covers_the_region(client, session, two_tenants, now):
    tokens, _a, _b = two_tenants
    de = session.query(Region).filter_by(code="de").one()
    # Half of Frankfurt's consumption covered by a 0 g/kWh PPA during January 2030.
    session.add(EnergyContract(tenant_id=None, region_id=de.id, name="wind PPA", start_at=now,
                               end_at=now + timedelta(days=31), share=0.5, carbon_g_per_kwh=0.0))
    session.commit()
    finish_run(session, _a[0], now + timedelta(hours=2), 2, 100.0, cost=10.0, carbon_kg=40.0)
    rows = {x["region"]: x for x in client.get("/api/v1/reports/monthly?month=2030-01",
                                               headers=auth(tokens["a"])).json["rows"]}
    assert rows["de"]["carbon_market_kg"] == pytest.approx(20.0)  # 40 kg location-based, half covered at 0
    assert rows["fi"]["carbon_market_kg"] is None


def test_csv_export_matches_the_json_report(client, two_tenants):
    tokens, _a, _b = two_tenants
    resp = client.get("/api/v1/reports/monthly.csv?month=2030-01", headers=auth(tokens["a"]))
    assert resp.status_code == 200 and resp.mimetype == "text/csv"
    assert "attachment" in resp.headers["Content-Disposition"]
    lines = list(csv.DictReader(io.StringIO(resp.get_data(as_text=True))))
    assert [(x["region"]) for x in lines] == ["de", "fi", "all"]
    assert float(lines[-1]["planned_cost"]) == pytest.approx(22.0) and float(lines[-1]["cost"]) == 0
    assert float(lines[1]["expected_saving_cost"]) == pytest.approx(18.0) and float(lines[1]["saving_cost"]) == 0


def test_pdf_export_is_a_pdf(client, two_tenants):
    tokens, _a, _b = two_tenants
    resp = client.get("/api/v1/reports/monthly.pdf?month=2030-01", headers=auth(tokens["a"]))
    assert resp.status_code == 200 and resp.mimetype == "application/pdf"
    data = resp.get_data()
    assert data.startswith(b"%PDF") and data.count(b"/Type /Page") >= 2  # summary with charts + table


def test_bad_report_parameters_name_the_field(client, two_tenants):
    tokens, _a, _b = two_tenants
    for query, field in [("month=2030-13", "month"), ("month=january", "month"), ("month=2030-01&region=mars", "region")]:
        resp = client.get(f"/api/v1/reports/monthly?{query}", headers=auth(tokens["a"]))
        assert resp.status_code == 422, (query, resp.json)
        assert field in [e["field"] for e in resp.json["errors"]]


def test_receipt_follows_the_executed_then_current_then_newest_assignment(client, session, two_tenants, now):
    tokens, a, _b = two_tenants
    fresh = submit(session, "team-a", now, 2)
    # An older plan put fresh[0] in Frankfurt, and it ran there; fresh[1] is only in that older plan.
    make_plan(session, now, [Planned(fresh[0], "de", "h100", now + timedelta(hours=1), 1, 10.0, 1.0, 4.0, 2.0, 5.0),
                             Planned(fresh[1], "de", "a100", now + timedelta(hours=1), 1, 10.0, 1.0, 4.0, 2.0, 5.0)])
    finish_run(session, fresh[0], now + timedelta(hours=1), 1, 8.0, cost=1.0, carbon_kg=3.0)
    # The current plan (re)places a[0] and fresh[0] in Hamina.
    make_plan(session, now, [Planned(a[0], "fi", "a100", now + timedelta(hours=3), 2, 30.0, 3.0, 3.0, 4.0, 9.0),
                             Planned(fresh[0], "fi", "a100", now + timedelta(hours=3), 2, 30.0, 3.0, 3.0, 4.0, 9.0)])
    get = lambda jid: client.get(f"/api/v1/jobs/{jid}/receipt", headers=auth(tokens["a"])).json  # noqa: E731
    assert get(fresh[0])["region"] == "de" and get(fresh[0])["basis"] == "metered"  # where it actually ran
    assert get(a[0])["region"] == "fi"  # the current plan beats the first one
    assert get(fresh[1])["region"] == "de" and get(fresh[1])["basis"] == "planned"  # only an older plan has it


def test_cancelled_job_that_never_ran_is_not_billed(client, session, two_tenants, now):
    tokens, a, _b = two_tenants
    fresh = submit(session, "team-a", now, 1)[0]
    make_plan(session, now, [
        Planned(a[0], "de", "h100", now + timedelta(hours=2), 2, 100.0, 10.0, 40.0, 15.0, 50.0),
        Planned(a[1], "fi", "a100", now + timedelta(hours=5), 4, 200.0, 12.0, 16.0, 30.0, 80.0),
        Planned(fresh, "de", "h100", now + timedelta(hours=2), 2, 100.0, 10.0, 40.0, 15.0, 50.0),
    ])
    for jid in (a[0], fresh):
        assert client.post(f"/api/v1/jobs/{jid}/cancel", headers=auth(tokens["a"])).status_code == 200
    # The re-plan leaves a[0] out; fresh stays in the current plan though it is cancelled.
    make_plan(session, now, [Planned(a[1], "fi", "a100", now + timedelta(hours=5), 4, 200.0, 12.0, 16.0, 30.0, 80.0),
                             Planned(fresh, "de", "h100", now + timedelta(hours=2), 2, 100.0, 10.0, 40.0, 15.0, 50.0)])
    for jid in (a[0], fresh):
        session.get(Job, jid).state = JobState.CANCELLED  # make_plan marks its jobs planned
    session.commit()
    total = client.get("/api/v1/reports/monthly?month=2030-01", headers=auth(tokens["a"])).json["total"]
    assert total["jobs"] == 1 and total["planned_energy_kwh"] == pytest.approx(200.0)
    assert total["planned_cost"] == pytest.approx(12.0) and total["expected_saving_cost"] == pytest.approx(18.0)
    for jid in (a[0], fresh):
        r = client.get(f"/api/v1/jobs/{jid}/receipt", headers=auth(tokens["a"])).json
        assert r["state"] == "cancelled" and r["basis"] is None and r["actual"] == {} and r.get("saving_cost") is None


def client_with(settings, **over):  # type: ignore[no-untyped-def]
    """A client of an app whose settings differ from the fixture's by ``over`` (same database)."""
    application = create_app(replace(settings, **over))
    return application, application.test_client()


def test_run_cost_in_the_regions_currency_is_converted(settings, session, two_tenants, now):
    tokens, _a, _b = two_tenants
    fleet.upsert_region(session, "uk", dict(name="London", zone="GB", power_budget_kw=300, pue=1.0, currency="GBP"))
    session.commit()
    job = submit(session, "team-a", now, 1)[0]
    # The plan is in EUR (100 kWh at 0.10 GBP/kWh x 1.17); the status sync priced the run at 10 GBP.
    make_plan(session, now, [Planned(job, "uk", "a100", now + timedelta(hours=2), 2, 100.0, 11.7, 30.0, 11.7, 30.0)])
    finish_run(session, job, now + timedelta(hours=2), 2, 100.0, cost=10.0, carbon_kg=30.0)
    application, client = client_with(settings, fx_rates={"GBP": 1.17})
    try:
        r = client.get(f"/api/v1/jobs/{job}/receipt", headers=auth(tokens["a"])).json
        assert r["currency"] == "EUR" and r["actual"]["cost"] == pytest.approx(11.7)
        assert r["saving_cost"] == pytest.approx(0.0)
        rows = {x["region"]: x for x in client.get("/api/v1/reports/monthly?month=2030-01",
                                                   headers=auth(tokens["a"])).json["rows"]}
        assert rows["uk"]["cost"] == pytest.approx(11.7) and rows["uk"]["saving_cost"] == pytest.approx(0.0)
    finally:
        application.extensions["gridshift"].engine.dispose()


def test_reports_in_the_configured_currency(settings, session, two_tenants, now):
    tokens, a, _b = two_tenants
    session.execute(update(Assignment).values(currency="USD"))  # plans are made in the configured currency
    session.commit()
    # Frankfurt is priced in EUR: the status sync's 10 EUR are 11 USD at GRIDSHIFT_FX_RATES=EUR=1.1.
    finish_run(session, a[0], now + timedelta(hours=2), 2, 100.0, cost=10.0, carbon_kg=45.0)
    fresh = submit(session, "team-a", now, 1)[0]
    application, client = client_with(settings, reporting_currency="USD", fx_rates={"EUR": 1.1})
    try:
        rep = client.get("/api/v1/reports/monthly?month=2030-01", headers=auth(tokens["a"]))
        assert rep.status_code == 200, rep.json
        assert rep.json["currency"] == "USD" and rep.json["total"]["currency"] == "USD"
        rows = {x["region"]: x for x in rep.json["rows"]}
        assert rows["de"]["cost"] == pytest.approx(11.0) and rows["fi"]["planned_cost"] == pytest.approx(12.0)
        r = client.get(f"/api/v1/jobs/{a[0]}/receipt", headers=auth(tokens["a"])).json
        assert r["currency"] == "USD" and r["actual"]["cost"] == pytest.approx(11.0)
        assert r["saving_cost"] == pytest.approx(7.0)  # run now: the same 120 kWh at 0.15 USD/kWh, 18 USD
        r = client.get(f"/api/v1/jobs/{fresh}/receipt", headers=auth(tokens["a"])).json
        assert r["basis"] is None and r["currency"] == "USD"  # not planned yet, labelled all the same
        csv_line = client.get("/api/v1/reports/monthly.csv?month=2030-01", headers=auth(tokens["a"])).get_data(
            as_text=True).splitlines()[-1]
        assert csv_line.startswith("2030-01,team-a,all,USD,2,1,")
    finally:
        application.extensions["gridshift"].engine.dispose()


def test_tenant_with_a_currency_of_its_own_converts_through_the_configured_one(settings, session, two_tenants):
    tokens, _a, _b = two_tenants
    session.execute(update(Tenant).where(Tenant.slug == "team-a").values(reporting_currency="GBP"))
    session.commit()
    application, client = client_with(settings, fx_rates={"GBP": 1.17})  # 1 GBP = 1.17 EUR
    try:
        total = client.get("/api/v1/reports/monthly?month=2030-01", headers=auth(tokens["a"])).json["total"]
        assert total["currency"] == "GBP"
        assert total["planned_cost"] == pytest.approx(22.0 / 1.17)
        assert total["expected_run_now_cost"] == pytest.approx(45.0 / 1.17)
    finally:
        application.extensions["gridshift"].engine.dispose()
    application, client = client_with(settings)  # no GBP rate: an error naming the currency, not a mixed sum
    try:
        resp = client.get("/api/v1/reports/monthly?month=2030-01", headers=auth(tokens["a"]))
        assert resp.status_code == 422 and "GBP" in resp.json["errors"][0]["message"]
    finally:
        application.extensions["gridshift"].engine.dispose()


def test_energy_of_failed_attempts_is_billed(client, session, two_tenants, now):
    tokens, a, _b = two_tenants
    aid = session.scalar(select(Assignment.id).where(Assignment.job_id == a[0]))
    start = now + timedelta(hours=2)
    # a[0]: the first attempt failed after metering 80 kWh, the retry succeeded with 100 kWh (Frankfurt, PUE 1.2).
    session.add_all([
        Run(job_id=a[0], assignment_id=aid, run_key="a0-1", attempt=1, state=RunState.FAILED, started_at=start,
            finished_at=start + timedelta(hours=1), energy_kwh=80.0, energy_source="nvml", cost=8.0, carbon_kg=30.0),
        Run(job_id=a[0], assignment_id=aid, run_key="a0-2", attempt=2, state=RunState.SUCCEEDED,
            started_at=start + timedelta(hours=1), finished_at=start + timedelta(hours=3), energy_kwh=100.0,
            energy_source="nvml", cost=10.0, carbon_kg=40.0),
    ])
    session.get(Job, a[0]).state = JobState.SUCCEEDED
    session.commit()
    r = client.get(f"/api/v1/jobs/{a[0]}/receipt", headers=auth(tokens["a"])).json
    assert r["basis"] == "metered" and r["metered_energy_kwh"] == pytest.approx(180.0)
    assert r["actual"] == pytest.approx({"energy_kwh": 216.0, "cost": 18.0, "carbon_kg": 70.0})
    # run now: the successful run's 100 kWh x PUE 1.2 at 0.15 EUR/kWh = 18 EUR: the failed attempt ate the saving
    assert r["saving_cost"] == pytest.approx(0.0)
    assert r["start_at"].startswith("2030-01-01T02:00")  # the first attempt's start
    # a[1] was cancelled after its only attempt had run 30 kWh (Hamina, PUE 1.1): billed on what it used.
    aid = session.scalar(select(Assignment.id).where(Assignment.job_id == a[1]))
    session.add(Run(job_id=a[1], assignment_id=aid, run_key="a1-1", state=RunState.CANCELLED, started_at=start,
                    finished_at=start + timedelta(hours=1), energy_kwh=30.0, energy_source="nvml", cost=None,
                    carbon_kg=None))
    session.get(Job, a[1]).state = JobState.CANCELLED
    session.commit()
    r = client.get(f"/api/v1/jobs/{a[1]}/receipt", headers=auth(tokens["a"])).json
    assert r["basis"] == "metered" and r["actual"]["energy_kwh"] == pytest.approx(33.0)
    assert r["actual"]["cost"] == pytest.approx(33.0 * 12.0 / 200.0)  # the planned price per kWh
    total = client.get("/api/v1/reports/monthly?month=2030-01", headers=auth(tokens["a"])).json["total"]
    assert total["jobs"] == 2 and total["settled_jobs"] == 2 and total["energy_kwh"] == pytest.approx(249.0)


def test_chunked_job_is_metered_once_every_chunk_ran_and_each_chunk_counts_once(client, session, two_tenants, now):
    tokens, a, _b = two_tenants
    assignment = session.scalar(select(Assignment).where(Assignment.job_id == a[0]))
    t = [now + timedelta(hours=h) for h in (2, 3, 4, 5)]
    assignment.chunks = [[t[0].isoformat(), t[1].isoformat()], [t[2].isoformat(), t[3].isoformat()]]

    def chunk_run(key: str, index: int, begin, kwh: float, state=RunState.SUCCEEDED) -> None:  # type: ignore[no-untyped-def]
        session.add(Run(job_id=a[0], assignment_id=assignment.id, run_key=key, chunk_index=index, state=state,
                        started_at=begin, finished_at=begin + timedelta(hours=1), energy_kwh=kwh,
                        energy_source="nvml", cost=kwh / 10, carbon_kg=kwh / 2))
        session.commit()

    chunk_run("c0", 0, t[0], 40.0)
    chunk_run("c0-again", 0, t[0], 40.0)  # a redelivered chunk: the same work, recorded twice
    get = lambda: client.get(f"/api/v1/jobs/{a[0]}/receipt", headers=auth(tokens["a"])).json  # noqa: E731
    assert get()["basis"] == "planned"  # half the work done: reported on its plan
    chunk_run("c1-failed", 1, t[2], 10.0, RunState.FAILED)
    chunk_run("c1", 1, t[2], 50.0)
    r = get()
    assert r["basis"] == "metered" and r["metered_energy_kwh"] == pytest.approx(100.0)  # 40 + 10 + 50
    assert r["actual"]["cost"] == pytest.approx(10.0) and r["actual"]["energy_kwh"] == pytest.approx(120.0)


def test_another_tenants_private_contract_does_not_show(client, session, two_tenants, now):
    tokens, _a, _b = two_tenants
    fi = session.query(Region).filter_by(code="fi").one()
    team_b = session.query(Tenant).filter_by(slug="team-b").one()
    session.add(EnergyContract(tenant_id=team_b.id, region_id=fi.id, name="b's private PPA", start_at=now,
                               end_at=now + timedelta(days=31), share=1.0, carbon_g_per_kwh=0.0))
    session.commit()
    rep = client.get("/api/v1/reports/monthly?month=2030-01", headers=auth(tokens["a"])).json
    assert {r["region"]: r["carbon_market_kg"] for r in rep["rows"]} == {"de": None, "fi": None}
    assert rep["total"]["carbon_market_kg"] is None
    # team-b's own Hamina job would be covered; the operator's fleet-wide report shows it on team-b's row only.
    b_fi = submit(session, "team-b", now, 1)[0]
    make_plan(session, now, [Planned(b_fi, "fi", "a100", now + timedelta(hours=1), 1, 10.0, 1.0, 4.0, 2.0, 5.0)],
              current=False)
    rows = client.get("/api/v1/reports/monthly?month=2030-01", headers=auth(tokens["ops"])).json["rows"]
    market = {(r["tenant"], r["region"]): r["carbon_market_kg"] for r in rows}
    assert market[("team-a", "fi")] is None and market[("team-b", "fi")] == pytest.approx(0.0)
