"""Tenants' fair share, quotas and budgets in the app: set by the operator (audited), honoured by planning and
dispatch, shown to each tenant (issue 21)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from app.enums import JobState, Role, RunState, WorkloadClass
from app.models import AuditEntry, Job, Run, UnplannedJob
from app.services import auth, tenancy
from app.services.dispatch import claim as dispatch_claim
from app.services.planning import plan_fleet
from tests.app.test_dispatch_support import add_job as add_due_job
from tests.app.test_dispatch_support import add_local_clusters, utcnow, write_plan
from tests.app.test_planning_service import add_series
from tests.conftest import make_token

NOW = datetime(2030, 1, 15, 12, tzinfo=UTC)  # mid-month
W = "test-worker"


@pytest.fixture
def market(session, small_fleet):
    add_series(session, "DE", NOW, [50.0 + k for k in range(72)])
    add_series(session, "FI", NOW, [60.0] * 72)


def tenant(session, slug: str) -> int:
    row = auth.create_tenant(session, slug)
    session.commit()
    return row.id


def add_jobs(session, tenant_id: int, n: int, *, priority: int, hours: int = 4, deadline_h: int = 8) -> list[Job]:
    """``n`` 8-GPU jobs of ``hours`` on DE H100 (16 there: two at a time) due within ``deadline_h``."""
    jobs = []
    for k in range(n):
        job = Job(tenant_id=tenant_id, name=f"j{k}", workload_class=WorkloadClass.TRAINING, gpu_count=8,
                  reference_gpu_hours=8.0 * hours, reference_hardware="h100", release_at=NOW,
                  deadline_at=NOW + timedelta(hours=deadline_h), allowed_regions=["de"], allowed_hardware=["h100"],
                  priority=priority, state=JobState.PENDING)  # fmt: skip
        session.add(job)
        jobs.append(job)
    session.commit()
    return jobs


def plan(session, settings):
    record = plan_fleet(session, settings, now=NOW, horizon_hours=24, objective="cost", trigger="manual")
    session.commit()
    return record


def planned(session, jobs) -> int:
    for j in jobs:
        session.refresh(j)
    return sum(j.state is JobState.PLANNED for j in jobs)


def metered_run(session, tenant_id: int, *, carbon_kg: float, at: datetime, gpus: int = 1) -> Run:
    """A finished, metered run of a job of the tenant (what the status sync leaves)."""
    job = Job(tenant_id=tenant_id, name="done", workload_class=WorkloadClass.TRAINING, gpu_count=gpus,
              reference_gpu_hours=1.0, reference_hardware="h100", release_at=at - timedelta(hours=3),
              deadline_at=at + timedelta(hours=3), state=JobState.SUCCEEDED)  # fmt: skip
    session.add(job)
    session.flush()
    run = Run(job_id=job.id, run_key=f"gs-{job.id}-1-done", state=RunState.SUCCEEDED, started_at=at - timedelta(hours=2),
              finished_at=at - timedelta(minutes=1), energy_kwh=10.0, cost=1.0, carbon_kg=carbon_kg)  # fmt: skip
    session.add(run)
    session.commit()
    return run


def test_a_flood_at_top_priority_leaves_the_other_tenant_its_share(session, settings, market):
    flood = add_jobs(session, tenant(session, "flood"), 10, priority=1000)
    small = add_jobs(session, tenant(session, "small"), 4, priority=10)
    plan(session, settings)
    # four 4-hour 8-GPU runs fit in 8 hours on 16 GPUs: two each
    assert (planned(session, flood), planned(session, small)) == (2, 2)


def test_weights_set_by_the_operator_change_the_shares(session, settings, market):
    flood = add_jobs(session, tenant(session, "flood"), 10, priority=1000)
    small = add_jobs(session, tenant(session, "small"), 4, priority=10)
    tenancy.set_policy(session, "small", {"weight": 3.0})
    session.commit()
    plan(session, settings)
    assert (planned(session, flood), planned(session, small)) == (1, 3)


def test_a_budget_eaten_by_metered_runs_mid_month_leaves_work_unplanned_with_the_amount_short(
    session, settings, market
):
    small_id = tenant(session, "small")
    (job,) = add_jobs(session, small_id, 1, priority=0)
    tenancy.set_policy(session, "small", {"carbon_budget_kg": 12.0})
    session.commit()
    plan(session, settings)
    assert planned(session, [job]) == 1  # one job emits ~7 kg: within 12
    metered_run(session, small_id, carbon_kg=8.0, at=NOW - timedelta(days=3))
    record = plan(session, settings)
    session.refresh(job)
    assert job.state is JobState.PENDING and "budget" in (job.state_reason or "")
    reason, detail = session.execute(
        select(UnplannedJob.reason, UnplannedJob.detail).where(UnplannedJob.plan_id == record.plan_id)
    ).one()
    assert reason == "budget" and "carbon_kg" in detail and "remaining 4.000" in detail
    view = tenancy.burn_down(session, auth.get_tenant(session, "small"), now=NOW)
    carbon = view["budgets"]["carbon_kg"]
    assert carbon["spent"] == pytest.approx(8.0) and carbon["reserved"] == 0 and carbon["remaining"] == pytest.approx(4.0)


def test_a_run_metered_last_month_does_not_count(session, settings, market):
    small_id = tenant(session, "small")
    (job,) = add_jobs(session, small_id, 1, priority=0)
    tenancy.set_policy(session, "small", {"carbon_budget_kg": 12.0})
    metered_run(session, small_id, carbon_kg=8.0, at=NOW - timedelta(days=20))
    plan(session, settings)
    assert planned(session, [job]) == 1


def test_jobs_over_the_queue_quota_wait_with_a_visible_reason(session, settings, market):
    jobs = add_jobs(session, tenant(session, "small"), 3, priority=0, hours=1)
    jobs[2].priority = 5
    tenancy.set_policy(session, "small", {"max_queued_jobs": 1})
    session.commit()
    record = plan(session, settings)
    assert planned(session, jobs) == 1 and jobs[2].state is JobState.PLANNED  # the best one is kept
    waiting = [j for j in jobs if j.state is JobState.PENDING]
    assert len(waiting) == 2 and all("max_queued_jobs 1" in (j.state_reason or "") for j in waiting)
    reasons = session.scalars(select(UnplannedJob.reason).where(UnplannedJob.plan_id == record.plan_id)).all()
    assert sorted(reasons) == ["quota", "quota"]


def test_gpu_hour_and_gpus_at_once_quotas_hold_in_planning(session, settings, market):
    jobs = add_jobs(session, tenant(session, "small"), 4, priority=0, hours=2, deadline_h=12)
    tenancy.set_policy(session, "small", {"max_gpus": {"h100": 8}, "max_gpu_hours_per_day": 40.0})
    session.commit()
    plan(session, settings)
    # 16 GPU-h a job: 40 GPU-h cover two of them; 8 GPUs at once run them one after the other
    assert planned(session, jobs) == 2


@pytest.fixture
def clusters(session, small_fleet, tmp_path) -> dict[str, str]:
    return add_local_clusters(session, tmp_path)


def test_dispatch_holds_a_job_whose_budget_metered_runs_used_up_mid_month(session, settings, clusters):
    team = tenant(session, "team-b")
    first, second = add_due_job(session, team, name="first"), add_due_job(session, team, name="second")
    tenancy.set_policy(session, "team-b", {"carbon_budget_kg": 1.0})
    session.commit()
    write_plan(session, [(first.id, "de", "h100", utcnow(), 30)])  # 0.1 kg planned
    assert len(dispatch_claim.tick(session, settings, now=utcnow(), worker=W).claimed) == 1
    metered_run(session, team, carbon_kg=0.95, at=utcnow())  # a run that finished since ate the budget
    write_plan(session, [(second.id, "de", "h100", utcnow(), 30)])
    result = dispatch_claim.tick(session, settings, now=utcnow(), worker=W)
    session.refresh(second)
    assert result.claimed == () and second.id in result.failed_jobs
    assert second.state is JobState.PENDING and (second.state_reason or "").startswith("budget: carbon_kg short")
    assert session.scalars(select(Run).where(Run.job_id == second.id)).all() == []


def test_dispatch_holds_a_job_over_the_gpus_at_once_quota(session, settings, clusters):
    team = tenant(session, "team-b")
    first, second = add_due_job(session, team, gpus=1), add_due_job(session, team, gpus=1)
    tenancy.set_policy(session, "team-b", {"max_gpus": {"h100": 1}})
    session.commit()
    write_plan(session, [(first.id, "de", "h100", utcnow(), 30), (second.id, "de", "h100", utcnow(), 30)])
    result = dispatch_claim.tick(session, settings, now=utcnow(), worker=W)
    assert len(result.claimed) == 1 and len(result.failed_jobs) == 1
    held = session.get(Job, result.failed_jobs[0])
    assert held.state is JobState.PENDING and "max_gpus 1" in (held.state_reason or "")


def test_operator_sets_a_policy_audited_and_each_tenant_reads_its_own(client, session, small_fleet):
    ops = make_token(session, "ops", Role.ADMIN, operator=True)
    a = make_token(session, "team-a", Role.ADMIN)
    make_token(session, "team-b")
    body = {"weight": 2.0, "carbon_budget_kg": 500.0, "budget_period": "quarter", "max_gpus": {"h100": 8},
            "max_queued_jobs": 100}
    resp = client.put("/api/v1/tenancy/team-a", json=body, headers={"Authorization": f"Bearer {ops}"})
    assert resp.status_code == 200, resp.json
    assert resp.json["weight"] == 2.0 and resp.json["period"] == "quarter"
    assert resp.json["budgets"]["carbon_kg"]["budget"] == 500.0 and resp.json["budgets"]["carbon_kg"]["remaining"] == 500.0
    entry = session.scalars(select(AuditEntry).where(AuditEntry.action == "tenant.policy_put")).one()
    assert entry.target_id == "team-a" and entry.details["carbon_budget_kg"] == 500.0
    own = client.get("/api/v1/tenancy", headers={"Authorization": f"Bearer {a}"}).json
    assert [t["tenant"] for t in own] == ["team-a"] and own[0]["quotas"]["max_gpus"]["h100"]["cap"] == 8
    assert client.get("/api/v1/tenancy/team-b", headers={"Authorization": f"Bearer {a}"}).status_code == 403
    every = client.get("/api/v1/tenancy", headers={"Authorization": f"Bearer {ops}"}).json
    assert {t["tenant"] for t in every} == {"ops", "team-a", "team-b"}
    # a tenant's own admin may not set its policy
    assert client.put("/api/v1/tenancy/team-a", json={"weight": 9}, headers={"Authorization": f"Bearer {a}"}).status_code == 403


def test_bad_policy_fields_are_named(client, session, small_fleet):
    ops = {"Authorization": f"Bearer {make_token(session, 'ops', Role.ADMIN, operator=True)}"}
    make_token(session, "team-a")
    for body, name in (({"weight": 0}, "weight"), ({"cost_budget": -1}, "cost_budget"),
                       ({"budget_period": "year"}, "budget_period"), ({"max_gpus": {"h100": -1}}, "max_gpus")):
        resp = client.put("/api/v1/tenancy/team-a", json=body, headers=ops)
        assert resp.status_code == 422 and resp.json["errors"][0]["field"].startswith(name), resp.json
    resp = client.put("/api/v1/tenancy/team-a", json={"max_gpus": {"tpu": 1}}, headers=ops)
    assert resp.status_code == 422 and resp.json["errors"][0]["field"] == "max_gpus.tpu"
    assert client.put("/api/v1/tenancy/nobody", json={"weight": 1}, headers=ops).status_code == 404


def test_monthly_report_gains_the_tenants_budget_columns(client, session, small_fleet):
    make_token(session, "ops", Role.ADMIN, operator=True)
    admin = make_token(session, "team-a", Role.ADMIN)
    tenancy.set_policy(session, "team-a", {"cost_budget": 25000.0, "carbon_budget_kg": 40000.0, "budget_period": "quarter"})
    session.commit()
    h = {"Authorization": f"Bearer {admin}"}
    rep = client.get("/api/v1/reports/monthly", headers=h).json
    assert rep["total"]["budget"] == {"budget_period": "quarter", "cost_budget": 25000.0, "energy_budget_kwh": None,
                                      "carbon_budget_kg": 40000.0}
    csv_text = client.get("/api/v1/reports/monthly.csv", headers=h).get_data(as_text=True)
    header, total = csv_text.splitlines()[0].split(","), csv_text.splitlines()[-1].split(",")
    # the budget columns, then the provenance of the market data, always last
    assert header[-5:] == ["budget_period", "cost_budget", "energy_budget_kwh", "carbon_budget_kg", "market_data"]
    assert total[-5:-1] == ["quarter", "25000.000", "", "40000.000"]


def test_a_budget_period_ending_inside_the_horizon_gives_the_next_period_its_full_budget(session, small_fleet):
    # 4 h before the month ends: January's carbon budget is used up by metered runs, February's is whole
    small_id = tenant(session, "small")
    (job,) = add_jobs(session, small_id, 1, priority=0)
    tenancy.set_policy(session, "small", {"carbon_budget_kg": 12.0, "max_gpu_hours_per_day": 40.0})
    end = datetime(2030, 2, 1, tzinfo=UTC)
    metered_run(session, small_id, carbon_kg=12.0, at=end - timedelta(days=2), gpus=1)
    now = end - timedelta(hours=4)
    got = tenancy.planning_tenants(session, [job], now=now, horizon_end=now + timedelta(hours=24))
    (policy,) = got.policies
    assert policy.carbon_budget_kg is None  # no whole-horizon figure: one per period instead
    windows = got.windows["small"]
    assert (now, end, {"carbon_kg": 0.0}) in windows and (end, datetime(2030, 3, 1, tzinfo=UTC), {"carbon_kg": 12.0}) in windows
    days = [w for w in windows if "gpu_hours" in w[2]]  # the daily quota per day: today less today's runs, then whole
    assert [w[2]["gpu_hours"] for w in days] == [40.0, 40.0] and days[1][0] == end
    # on the planner's slots (hourly from now): January is slots 0-4, February 4-24
    from tests.optimizer.conftest import job as opt_job
    from tests.optimizer.conftest import problem as opt_problem
    from tests.optimizer.conftest import region as opt_region

    pb = dataclasses.replace(opt_problem([opt_region("DE", [50.0] * 24)], [opt_job(str(job.id), n_slots=24)]), start=now)
    slots = {(w.start_slot, w.end_slot, w.carbon_kg, w.gpu_hours) for w in tenancy.with_tenants(pb, got).tenants[0].windows}
    assert (0, 4, 0.0, None) in slots and (4, 24, 12.0, None) in slots and (4, 24, None, 40.0) in slots
