"""Celery tasks in-process (eager) on the embedded default: the full path, re-plan triggers, cleanup, config."""

from __future__ import annotations

import sys
import types
from datetime import timedelta

import pytest
from sqlalchemy import create_engine, select, text

from app.celery_app import celery_config
from app.config import Settings
from app.enums import JobState, PlanRunState, RunState
from app.models import Job, Plan, PlanRun, Run
from app.schedule import beat_schedule
from app.services import auth
from app.services.dispatch import maintenance as dispatch_maintenance
from app.services.dispatch import submit as dispatch_service
from app.tasks import dispatch as dispatch_tasks
from app.tasks import maintenance, planning
from connectors.base import ConnectorError
from tests.app.test_dispatch_support import (
    add_job,
    add_local_clusters,
    add_market,
    runs_of,
    utcnow,
    wait_for,
    write_plan,
)
from tests.conftest import job_payload, make_token


@pytest.fixture
def eager(app):
    celery = app.extensions["celery"]
    celery.conf.task_always_eager = True
    celery.conf.task_eager_propagates = True
    yield celery
    celery.conf.task_always_eager = False


@pytest.fixture
def fake_planner(monkeypatch):
    """Stands in for app.services.planning.plan_fleet (the optimizer engineer's) and records its calls."""
    calls: list[dict] = []
    module = types.ModuleType("app.services.planning")

    def plan_fleet(session, settings, *, now, horizon_hours, objective, trigger, on_phase=None):
        calls.append(dict(now=now, horizon_hours=horizon_hours, objective=objective, trigger=trigger))
        return types.SimpleNamespace(plan_id=len(calls), status="optimal", n_assigned=0, n_unplanned=0)

    module.plan_fleet = plan_fleet  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "app.services.planning", module)
    return calls


def test_submitted_job_is_dispatched_runs_and_shows_its_energy(app, client, session, small_fleet, tmp_path, eager):
    add_local_clusters(session, tmp_path)
    add_market(session, "DE", price_per_mwh=80.0, carbon_g_per_kwh=300.0)
    token = make_token(session, "team-a")
    now = utcnow()
    body = job_payload(now, gpu_count=2, command="sleep 0.3; echo trained", allowed_regions=["de"])
    created = client.post("/api/v1/jobs", json=body, headers={"Authorization": f"Bearer {token}"})
    assert created.status_code == 201, created.json
    job_id = created.json["id"]
    write_plan(session, [(job_id, "de", "h100", now, 60)])  # what plan_fleet stores (tested by its owner)

    with app.app_context():
        ticked = dispatch_tasks.tick.delay().get()
    assert len(ticked["claimed"]) == 1

    def synced():
        with app.app_context():
            return dispatch_tasks.sync.delay().get()["succeeded"]

    wait_for(synced)
    (run,) = runs_of(session, job_id)
    assert run.state == RunState.SUCCEEDED and run.energy_kwh > 0 and run.cost > 0 and run.carbon_kg > 0
    events = client.get(f"/api/v1/jobs/{job_id}/events", headers={"Authorization": f"Bearer {token}"}).json
    states = [e["state"] for e in events]
    assert states[:3] == ["pending", "planned", "dispatching"] or states[:2] == ["pending", "dispatching"]
    assert states[-1] == "succeeded" and "kWh" in events[-1]["message"]


def test_undispatchable_job_triggers_a_replan(app, session, small_fleet, eager, fake_planner):
    tenant = auth.create_tenant(session, "team-a")
    session.commit()
    job = add_job(session, tenant.id)
    write_plan(session, [(job.id, "fi", "a100", utcnow(), 30)])  # fi has no cluster in this test
    with app.app_context():
        out = dispatch_tasks.tick.delay().get()
    assert out["failed_jobs"] == [job.id]
    assert [c["trigger"] for c in fake_planner] == ["dispatch-failure"]
    session.expire_all()
    job = session.get(Job, job.id)
    assert job.state == JobState.PENDING and job.allowed_regions == ["de"]


def test_sync_after_failure_requests_replan(app, session, small_fleet, tmp_path, eager, fake_planner):
    add_local_clusters(session, tmp_path)
    tenant = auth.create_tenant(session, "team-a")
    session.commit()
    job = add_job(session, tenant.id, command="exit 7")
    write_plan(session, [(job.id, "fi", "a100", utcnow(), 30)])
    with app.app_context():
        dispatch_tasks.tick.delay().get()

    def failed():
        with app.app_context():
            return dispatch_tasks.sync.delay().get()["failed"]

    wait_for(failed)
    assert fake_planner and fake_planner[-1]["trigger"] == "run-failure"
    session.expire_all()
    job = session.get(Job, job.id)
    assert job.state == JobState.PENDING and job.allowed_regions == ["de"]


def test_plan_tasks_call_plan_fleet_with_settings_and_record_a_plan_run(app, session, settings, eager,
                                                                         fake_planner):
    with app.app_context():
        nightly = planning.nightly.delay().get()
        replan = planning.replan.delay(trigger="forecast").get()
    assert [c["trigger"] for c in fake_planner] == ["nightly", "forecast"]
    assert fake_planner[0]["horizon_hours"] == settings.horizon_hours
    assert fake_planner[0]["objective"] == settings.objective
    # operators see the scheduled plans among the plan runs, as they see those asked for through the API
    runs = list(session.scalars(select(PlanRun).order_by(PlanRun.id)))
    assert [(r.trigger, r.state, r.phase, r.requested_by) for r in runs] == [
        ("nightly", PlanRunState.SUCCEEDED, "done", None), ("forecast", PlanRunState.SUCCEEDED, "done", None)]
    assert all(r.started_at and r.finished_at for r in runs)
    assert nightly["run_id"] == runs[0].id and replan["state"] == "succeeded"


def test_a_scheduled_plan_that_raises_is_a_failed_plan_run_with_the_reason(app, session, eager, monkeypatch):
    module = types.ModuleType("app.services.planning")

    def plan_fleet(session, settings, **kw):
        raise RuntimeError("no market data for de")

    module.plan_fleet = plan_fleet  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "app.services.planning", module)
    with app.app_context():
        out = planning.replan.delay().get()
    (run,) = session.scalars(select(PlanRun))
    assert run.trigger == "hourly" and run.state == PlanRunState.FAILED and "no market data for de" in run.error
    assert out["state"] == "failed" and out["run_id"] == run.id


def test_the_minute_check_records_a_plan_run_only_when_it_plans(app, session, small_fleet, eager, fake_planner):
    with app.app_context():
        planning.new_work.delay().get()  # no plan yet, no job: nothing new to plan
    assert fake_planner == [] and session.scalars(select(PlanRun)).all() == []
    tenant = auth.create_tenant(session, "team-a")
    session.commit()
    add_job(session, tenant.id)
    with app.app_context():
        out = planning.new_work.delay().get()
    (run,) = session.scalars(select(PlanRun))
    assert [c["trigger"] for c in fake_planner] == ["new-work"]
    assert run.trigger == "new-work" and run.state == PlanRunState.SUCCEEDED and out["run_id"] == run.id


def test_cleanup_deletes_finished_plan_runs_past_their_retention_only(app, session, settings, eager):
    now = utcnow()
    old = now - timedelta(days=settings.plan_run_retention_days, hours=1)
    recent = now - timedelta(days=settings.plan_run_retention_days - 1)

    def add(state: PlanRunState, created, finished) -> int:
        run = PlanRun(trigger="hourly", state=state, phase="done", created_at=created, finished_at=finished)
        session.add(run)
        session.flush()
        return run.id

    gone = [add(PlanRunState.SUCCEEDED, old, old), add(PlanRunState.FAILED, old, old)]
    kept = [add(PlanRunState.SUCCEEDED, old, recent), add(PlanRunState.SUCCEEDED, recent, recent),
            add(PlanRunState.QUEUED, old, None), add(PlanRunState.RUNNING, old, None)]
    session.commit()
    with app.app_context():
        out = maintenance.cleanup.delay().get()
    assert out["plan_runs_pruned"] == len(gone)
    session.expire_all()
    assert sorted(session.scalars(select(PlanRun.id))) == sorted(kept)


def test_a_plan_run_retention_of_zero_keeps_every_run(app, session, settings):
    from dataclasses import replace as with_

    from app.services import plan_runs

    long_ago = utcnow() - timedelta(days=3650)
    session.add(PlanRun(trigger="nightly", state=PlanRunState.SUCCEEDED, phase="done", created_at=long_ago,
                        finished_at=long_ago))
    session.commit()
    assert plan_runs.prune(session, with_(settings, plan_run_retention_days=0), now=utcnow()) == 0
    assert plan_runs.prune(session, settings, now=utcnow()) == 1
    with pytest.raises(ValueError, match="GRIDSHIFT_PLAN_RUN_RETENTION_DAYS"):
        Settings.from_env({"GRIDSHIFT_PLAN_RUN_RETENTION_DAYS": "-1"})


def test_cleanup_removes_old_run_dirs(app, session, settings, small_fleet, tmp_path, eager):
    add_local_clusters(session, tmp_path)
    tenant = auth.create_tenant(session, "team-a")
    session.commit()
    old, recent = add_job(session, tenant.id, command="true"), add_job(session, tenant.id, command="true")
    write_plan(session, [(old.id, "de", "h100", utcnow(), 30), (recent.id, "de", "h100", utcnow(), 30)])
    with app.app_context():
        dispatch_tasks.tick.delay().get()
    wait_for(lambda: dispatch_tasks_sync(app) and len(runs_done(session)) == 2)
    (run_old,), (run_recent,) = runs_of(session, old.id), runs_of(session, recent.id)
    run_old.finished_at = utcnow() - dispatch_maintenance.RUN_SCRATCH_KEEP - timedelta(hours=1)
    # the plan the runs came from is superseded and past its retention period; its rows are all still read
    first = session.scalar(select(Plan).where(Plan.is_current.is_(True)))
    first.created_at = utcnow() - timedelta(days=settings.plan_retention_days + 1)
    write_plan(session, [])
    with app.app_context():
        out = maintenance.cleanup.delay().get()
    assert out["run_dirs"] == 1
    assert out["plans_pruned"] == {"plans": 1, "assignments": 0, "unplanned": 0}  # each row a run executed
    session.refresh(first)
    assert first.pruned_at is not None and len(first.assignments) == 2
    runs_dir = tmp_path / "de-runtime" / "runs"
    assert not (runs_dir / run_old.run_key).exists() and (runs_dir / run_recent.run_key).is_dir()


def runs_done(session) -> list:
    session.expire_all()
    return [r for r in session.scalars(select(Run)) if r.state == RunState.SUCCEEDED]


def test_broker_cleanup_deletes_only_old_delivered_messages(tmp_path):
    cfg = Settings(var_dir=tmp_path, broker_url=f"sqla+sqlite:///{tmp_path / 'broker.db'}")
    broker = create_engine(cfg.effective_broker_url.removeprefix("sqla+"))
    with broker.begin() as conn:
        conn.execute(text("CREATE TABLE kombu_message (id INTEGER PRIMARY KEY, visible BOOLEAN, "
                          "timestamp DATETIME, payload TEXT, version SMALLINT, queue_id INTEGER)"))  # fmt: skip
        old = (utcnow() - timedelta(hours=3)).astimezone().replace(tzinfo=None)
        conn.execute(text("INSERT INTO kombu_message (visible, timestamp, payload, version) VALUES "
                          "(0, :old, 'delivered', 1), (1, :old, 'waiting', 1), (0, :new, 'just delivered', 1)"),
                     {"old": old, "new": utcnow().astimezone().replace(tzinfo=None)})  # fmt: skip
    assert dispatch_maintenance.prune_broker_messages(cfg, now=utcnow()) == 1
    with broker.connect() as conn:
        left = sorted(conn.execute(text("SELECT payload FROM kombu_message")).scalars())
    broker.dispose()
    assert left == ["just delivered", "waiting"]
    assert dispatch_maintenance.prune_broker_messages(Settings(broker_url="redis://127.0.0.1:1/0"), now=utcnow()) == 0


def dispatch_tasks_sync(app) -> dict:
    with app.app_context():
        return dispatch_tasks.sync.delay().get()


def test_celery_settings_bring_back_a_crashed_workers_message_quickly():
    cfg = celery_config(Settings(broker_url="redis://127.0.0.1:6379/1", visibility_timeout_s=45))
    assert cfg["task_acks_late"] and cfg["task_reject_on_worker_lost"] and cfg["worker_prefetch_multiplier"] == 1
    opts = cfg["broker_transport_options"]
    assert opts == {"visibility_timeout": 45, "unacked_restore_interval": 1, "unacked_restore_throttle": 1}
    assert celery_config(Settings())["broker_transport_options"] == {}  # the SQLAlchemy transport takes none


def test_retry_countdowns_never_exceed_the_visibility_timeout():
    for vt in (4, 10, 60, 3600):
        waits = [dispatch_tasks.retry_countdown_s(n, vt) for n in range(dispatch_tasks.SUBMIT_MAX_RETRIES + 1)]
        assert all(0 < w < vt for w in waits) and waits == sorted(waits)


def test_every_scheduled_task_is_registered(app):
    celery = app.extensions["celery"]
    names = {entry["task"] for entry in beat_schedule(Settings()).values()}
    ours = {n for n in names if n.startswith(("gridshift.dispatch", "gridshift.plan", "gridshift.maintenance"))}
    assert ours == {"gridshift.dispatch.tick", "gridshift.dispatch.sync", "gridshift.plan.nightly",
                    "gridshift.plan.replan", "gridshift.plan.new_work", "gridshift.maintenance.cleanup"}  # fmt: skip
    assert ours <= set(celery.tasks) and "gridshift.dispatch.submit" in celery.tasks
    tick = beat_schedule(Settings())["dispatch-tick"]
    assert tick["options"]["expires"] <= Settings().visibility_timeout_s  # no message outlives redelivery


def test_api_job_is_planned_by_the_planner_then_dispatched_and_run(app, client, session, small_fleet, tmp_path, eager):
    pytest.importorskip("app.services.planning", reason="the planning service (plan_fleet) is not in this build")
    add_local_clusters(session, tmp_path)
    for zone in ("DE", "FI"):
        add_market(session, zone, price_per_mwh=90.0, carbon_g_per_kwh=300.0, hours=80)  # covers the 72 h horizon
    token = make_token(session, "team-a")
    now = utcnow()
    # Released an hour ago, so the current slot is open to it; with flat prices the planner starts it at once.
    body = job_payload(now - timedelta(hours=1), deadline_at=(now + timedelta(hours=1)).isoformat(), gpu_count=1,
                       reference_gpu_hours=0.5, command="sleep 0.2; echo planned-and-run")  # fmt: skip
    created = client.post("/api/v1/jobs", json=body, headers={"Authorization": f"Bearer {token}"})
    assert created.status_code == 201, created.json
    job_id = created.json["id"]
    with app.app_context():
        planned = planning.replan.delay(trigger="test").get()
    assert planned["n_assigned"] == 1, planned
    session.expire_all()
    assert session.get(Job, job_id).state == JobState.PLANNED
    with app.app_context():
        assert len(dispatch_tasks.tick.delay().get()["claimed"]) == 1
    wait_for(lambda: dispatch_tasks_sync(app)["succeeded"])
    (run,) = runs_of(session, job_id)
    assert run.state == RunState.SUCCEEDED and run.energy_kwh > 0 and run.planned_start_at <= utcnow()
    assert session.get(Job, job_id).state == JobState.SUCCEEDED


class _SubmitAlwaysFails:
    """A runtime that never accepts a submission (retryably) and holds no job."""

    def __init__(self) -> None:
        self.submits = 0

    def find(self, run_key):
        return None

    def submit(self, spec):
        self.submits += 1
        raise ConnectorError("controller busy", retryable=True, kind="fake")


def test_submit_retries_with_backoff_then_gives_up_and_replans(app, session, small_fleet, tmp_path, eager,
                                                                fake_planner, monkeypatch):  # fmt: skip
    add_local_clusters(session, tmp_path)
    tenant = auth.create_tenant(session, "team-a")
    session.commit()
    job = add_job(session, tenant.id)
    write_plan(session, [(job.id, "de", "h100", utcnow(), 30)])
    runtime = _SubmitAlwaysFails()
    monkeypatch.setattr(dispatch_service, "connector_for", lambda cluster, settings: runtime)
    eager.conf.task_eager_propagates = False  # eager retries run inline instead of raising Retry
    with app.app_context():
        dispatch_tasks.tick.delay().get()
    assert runtime.submits == 1 + dispatch_tasks.SUBMIT_MAX_RETRIES
    (run,) = runs_of(session, job.id)
    assert run.state == RunState.FAILED and "after retries" in run.error
    session.expire_all()
    assert session.get(Job, job.id).state == JobState.PENDING
    assert [c["trigger"] for c in fake_planner] == ["dispatch-failure"]
