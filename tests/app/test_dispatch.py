"""Dispatch state machine against the real local runtime: claim once, submit once, recover, sync, re-plan."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select, update

from app.enums import JobState, RunState
from app.models import Cluster, Job, Run
from app.services import auth, series
from app.services.dispatch import claim as dispatch_claim
from app.services.dispatch import submit as dispatch_submit
from app.services.dispatch import sync as dispatch_sync
from app.services.dispatch.failures import MAX_ATTEMPTS, failed_placement
from connectors.base import ConnectorError, RunStatus, RuntimeState
from connectors.local import LocalConnector
from connectors.registry import get_connector
from tests.app.test_dispatch_support import (
    add_job,
    add_local_clusters,
    add_market,
    job_states,
    runs_of,
    utcnow,
    wait_for,
    write_plan,
)
from tests.conftest import make_token

W = "test-worker"


@pytest.fixture
def tenant_id(session, small_fleet) -> int:
    tenant = auth.create_tenant(session, "team-a")
    session.commit()
    return tenant.id


@pytest.fixture
def clusters(session, small_fleet, tmp_path) -> dict[str, str]:
    return add_local_clusters(session, tmp_path)


def test_due_assignment_is_claimed_once_and_submitted_once(session, settings, tenant_id, clusters):
    job = add_job(session, tenant_id)
    write_plan(session, [(job.id, "de", "h100", utcnow(), 30)])
    first = dispatch_claim.tick(session, settings, now=utcnow(), worker=W)
    again = dispatch_claim.tick(session, settings, now=utcnow(), worker="other-worker")
    assert len(first.claimed) == 1 and again.to_submit == ()
    run_id = first.claimed[0]
    out = dispatch_submit.submit_run(session, settings, run_id, now=utcnow(), worker=W)
    assert out.state == "submitted" and not out.adopted
    redelivered = dispatch_submit.submit_run(session, settings, run_id, now=utcnow(), worker=W)
    assert redelivered.state == "skipped"
    runs = runs_of(session, job.id)
    assert len(runs) == 1 and runs[0].state == RunState.SUBMITTED
    assert runs[0].runtime_job_id == runs[0].run_key and runs[0].planned_start_at is not None
    assert job_states(session, job.id) == ["pending", "dispatching", "submitted"]



def test_a_run_keeps_its_hardware_when_its_assignment_is_gone(session, settings, tenant_id, clusters):
    """The hardware is the run's own column, not read back out of its run key: a run whose plan's assignment was
    pruned still tells the runtime (and the failure handling) which hardware it was placed on."""
    job = add_job(session, tenant_id, command="echo started")
    write_plan(session, [(job.id, "de", "a100", utcnow(), 30)])
    (run_id,) = dispatch_claim.tick(session, settings, now=utcnow(), worker=W).claimed
    run = session.get(Run, run_id)
    assert run.hardware_code == "a100"
    run.assignment_id = None  # what the retention clean-up leaves of a pruned plan's assignment
    session.commit()
    assert dispatch_submit.build_spec(session, run).hardware == "a100"
    assert failed_placement(session, run) == ("de", "a100")

def test_a_job_goes_only_to_a_cluster_that_serves_its_tenant(session, settings, tenant_id, clusters):
    """A cluster bound to a tenant (config ``tenant``: one trust domain) takes that tenant's runs before any unbound
    cluster of its region, and never another tenant's: a region whose only cluster is another's has none to offer."""
    from app.errors import ValidationFailed
    from app.services import fleet

    with pytest.raises(ValidationFailed) as info:  # a binding names a tenant that exists
        fleet.upsert_cluster(session, "fi-typo", "fi", "slurm", {"tenant": "team-c"})
    assert info.value.errors[0].field == "config.tenant"
    auth.create_tenant(session, "team-b")
    fleet.upsert_cluster(session, "fi-other", "fi", "slurm", {"tenant": "team-b"})
    fleet.upsert_cluster(session, "de-own", "de", "slurm", {"tenant": "team-a"})
    session.execute(update(Cluster).where(Cluster.name == "fi-local").values(enabled=False))
    session.commit()
    de, fi = add_job(session, tenant_id, name="de"), add_job(session, tenant_id, name="fi")
    write_plan(session, [(de.id, "de", "h100", utcnow(), 30), (fi.id, "fi", "a100", utcnow(), 30)])
    out = dispatch_claim.tick(session, settings, now=utcnow(), worker=W)
    (run_id,) = out.claimed
    run = session.get(Run, run_id)
    assert run.job_id == de.id and run.cluster.name == "de-own"
    assert dispatch_submit.build_spec(session, run).tenant == "team-a"
    (fi_run,) = runs_of(session, fi.id)
    assert fi_run.cluster_id is None and "no enabled cluster for tenant team-a" in (fi_run.error or "")


def test_an_unbound_ray_cluster_is_skipped_unless_it_is_shared(session, settings, tenant_id, clusters):
    """A Ray cluster shows every job's environment to every job, so its connector refuses tenants' jobs unless the
    cluster is bound to the tenant or ``shared_between_tenants``: dispatch must not pick it (the run would fail at
    submission with the binding message) and takes the region's next cluster instead, or none."""
    from app.services import fleet

    ray = fleet.upsert_cluster(session, "fi-ray", "fi", "ray", {"address": "http://127.0.0.1:8265"})
    fi_local = session.scalars(select(Cluster).where(Cluster.name == "fi-local")).one()
    fi = ray.region_id
    session.commit()
    assert dispatch_claim.pick_cluster(session, fi, "team-a").name == "fi-local"
    fi_local.enabled = False  # the unbound Ray cluster is now the region's only one
    session.commit()
    assert dispatch_claim.pick_cluster(session, fi, "team-a") is None
    assert dispatch_claim.pick_cluster(session, fi, None).name == "fi-ray"  # work of no tenant
    fleet.upsert_cluster(session, "fi-ray", "fi", "ray", {"address": "http://127.0.0.1:8265",
                                                          "shared_between_tenants": True})
    session.commit()
    assert dispatch_claim.pick_cluster(session, fi, "team-a").name == "fi-ray"
    fleet.upsert_cluster(session, "fi-ray", "fi", "ray", {"address": "http://127.0.0.1:8265", "tenant": "team-a"})
    fi_local.enabled = True
    session.commit()
    assert dispatch_claim.pick_cluster(session, fi, "team-a").name == "fi-ray"  # bound to it: before the unbound one


def test_assignment_not_yet_due_waits(session, settings, tenant_id, clusters):
    job = add_job(session, tenant_id)
    write_plan(session, [(job.id, "de", "h100", utcnow() + timedelta(hours=2), 30)])
    assert dispatch_claim.tick(session, settings, now=utcnow(), worker=W).to_submit == ()
    session.expire_all()
    assert session.get(Job, job.id).state == JobState.PLANNED


def test_planned_start_is_passed_as_begin_at(session, settings, tenant_id, clusters):
    job = add_job(session, tenant_id, command="echo started")
    start = utcnow() + timedelta(seconds=settings.dispatch_interval_s / 2)
    write_plan(session, [(job.id, "de", "h100", start, 30)])
    (run_id,) = dispatch_claim.tick(session, settings, now=utcnow(), worker=W).claimed
    spec = dispatch_submit.build_spec(session, session.get(Run, run_id))
    assert spec.begin_at == start and spec.hardware == "h100" and spec.gpu_count == 1
    assert spec.time_limit_minutes >= 30 and spec.power_w_per_gpu > 0


def test_redelivered_submit_finds_the_job_already_on_the_runtime(session, settings, tenant_id, clusters):
    job = add_job(session, tenant_id, command="sleep 0.2")
    write_plan(session, [(job.id, "de", "h100", utcnow(), 30)])
    (run_id,) = dispatch_claim.tick(session, settings, now=utcnow(), worker=W).claimed
    run = session.get(Run, run_id)
    # A worker submitted to the runtime and died before recording it in the database.
    connector = get_connector("local", run.cluster.config)
    assert isinstance(connector, LocalConnector)
    connector.submit(dispatch_submit.build_spec(session, run))
    session.rollback()
    out = dispatch_submit.submit_run(session, settings, run_id, now=utcnow(), worker=W)
    assert out.state == "submitted" and out.adopted
    assert [p.name for p in (connector.state_dir / "runs").iterdir()] == [run.run_key]


def test_first_delivery_skips_find_yet_never_duplicates(session, settings, tenant_id, clusters):
    job = add_job(session, tenant_id, command="sleep 0.2")
    write_plan(session, [(job.id, "de", "h100", utcnow(), 30)])
    (run_id,) = dispatch_claim.tick(session, settings, now=utcnow(), worker=W).claimed
    run = session.get(Run, run_id)
    connector = get_connector("local", run.cluster.config)
    assert isinstance(connector, LocalConnector)
    connector.submit(dispatch_submit.build_spec(session, run))  # the runtime somehow has it already
    session.rollback()
    out = dispatch_submit.submit_run(session, settings, run_id, now=utcnow(), worker=W, fresh=True)
    assert out.state == "submitted" and out.runtime_job_id == run.run_key
    assert len(list((connector.state_dir / "runs").iterdir())) == 1  # submit itself is idempotent


def test_job_replanned_while_its_run_is_active_gets_no_second_run(session, settings, tenant_id, clusters):
    job = add_job(session, tenant_id, command="sleep 5")
    write_plan(session, [(job.id, "de", "h100", utcnow(), 30)])
    (run_id,) = dispatch_claim.tick(session, settings, now=utcnow(), worker=W).claimed
    dispatch_submit.submit_run(session, settings, run_id, now=utcnow(), worker=W)
    # A planner that read the job before the claim writes it back as planned, in a new current plan.
    write_plan(session, [(job.id, "fi", "a100", utcnow(), 30)])
    assert dispatch_claim.tick(session, settings, now=utcnow(), worker=W).to_submit == ()
    session.expire_all()
    assert [r.id for r in runs_of(session, job.id)] == [run_id]
    assert session.get(Job, job.id).state == JobState.SUBMITTED
    run = session.get(Run, run_id)
    get_connector("local", run.cluster.config).cancel(run.runtime_job_id)


def test_stale_claim_is_recovered_and_fresh_one_is_not(session, settings, tenant_id, clusters):
    old, fresh = add_job(session, tenant_id, name="old"), add_job(session, tenant_id, name="fresh")
    now = utcnow()
    write_plan(session, [(old.id, "de", "h100", now - timedelta(minutes=10), 30)])
    (stale_run,) = dispatch_claim.tick(session, settings, now=now - timedelta(seconds=settings.claim_stale_s + 5),
                                 worker="dead-worker").claimed  # fmt: skip
    write_plan(session, [(old.id, "de", "h100", now, 30), (fresh.id, "fi", "a100", now, 30)])
    result = dispatch_claim.tick(session, settings, now=now, worker=W)
    assert result.recovered == (stale_run,)
    assert len(result.claimed) == 1  # the fresh job; the old job keeps its one run
    assert dispatch_claim.tick(session, settings, now=now, worker=W).to_submit == ()
    session.expire_all()
    assert session.get(Run, stale_run).claimed_by == W
    assert len(runs_of(session, old.id)) == 1


def test_sync_records_success_energy_cost_and_carbon(session, settings, tenant_id, clusters):
    add_market(session, "DE", price_per_mwh=100.0, carbon_g_per_kwh=400.0)
    job = add_job(session, tenant_id, command="sleep 0.3; echo done", gpus=2)
    write_plan(session, [(job.id, "de", "h100", utcnow(), 30)])
    (run_id,) = dispatch_claim.tick(session, settings, now=utcnow(), worker=W).claimed
    dispatch_submit.submit_run(session, settings, run_id, now=utcnow(), worker=W)

    def finished():
        result = dispatch_sync.sync(session, settings, now=utcnow())
        return run_id in result.succeeded

    wait_for(finished)
    session.expire_all()
    run = session.get(Run, run_id)
    assert run.state == RunState.SUCCEEDED and run.exit_code == 0
    assert run.started_at and run.finished_at and run.finished_at >= run.started_at
    assert run.energy_kwh > 0 and run.energy_source == "estimate" and run.avg_power_w > 0
    facility_kwh = run.energy_kwh * 1.2  # de has PUE 1.2
    assert run.cost == pytest.approx(facility_kwh * 100.0 / 1000.0)
    assert run.carbon_kg == pytest.approx(facility_kwh * 400.0 / 1000.0)
    assert session.get(Job, job.id).state == JobState.SUCCEEDED
    assert job_states(session, job.id)[-2:] in (["running", "succeeded"], ["submitted", "succeeded"])


def test_job_cancelled_through_api_is_cancelled_on_runtime(session, settings, tenant_id, clusters):
    job = add_job(session, tenant_id, command="sleep 60")
    write_plan(session, [(job.id, "de", "h100", utcnow(), 30)])
    (run_id,) = dispatch_claim.tick(session, settings, now=utcnow(), worker=W).claimed
    dispatch_submit.submit_run(session, settings, run_id, now=utcnow(), worker=W)
    session.expire_all()
    job = session.get(Job, job.id)
    job.state = JobState.CANCELLED  # what POST /jobs/{id}/cancel does
    session.commit()
    result = dispatch_sync.sync(session, settings, now=utcnow())
    assert result.cancelled == (run_id,)
    run = session.get(Run, run_id)
    connector = get_connector("local", run.cluster.config)
    wait_for(lambda: connector.poll(run.runtime_job_id).status.value == "cancelled")
    assert run.state == RunState.CANCELLED


def _cancel_through_api(client, session, job_id: int) -> None:  # type: ignore[no-untyped-def]
    token = make_token(session, "team-a")
    resp = client.post(f"/api/v1/jobs/{job_id}/cancel", headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == 200, resp.json


def test_cancel_made_while_the_submit_is_in_flight_wins(client, session, settings, tenant_id, clusters, monkeypatch):
    job = add_job(session, tenant_id, command="sleep 60")
    write_plan(session, [(job.id, "de", "h100", utcnow(), 30)])
    (run_id,) = dispatch_claim.tick(session, settings, now=utcnow(), worker=W).claimed
    session.expire_all()  # the submit reads the job (still dispatching) before its runtime call
    real_submit = LocalConnector.submit

    def submit_while_user_cancels(self, spec):  # type: ignore[no-untyped-def]
        _cancel_through_api(client, make_session(), job.id)
        return real_submit(self, spec)

    make_session = client.application.extensions["gridshift"].sessions
    monkeypatch.setattr(LocalConnector, "submit", submit_while_user_cancels)
    dispatch_submit.submit_run(session, settings, run_id, now=utcnow(), worker=W, fresh=True)
    monkeypatch.undo()
    session.expire_all()
    assert session.get(Job, job.id).state == JobState.CANCELLED
    assert job_states(session, job.id)[-1] == "cancelled"
    run = session.get(Run, run_id)
    connector = get_connector("local", run.cluster.config)
    wait_for(lambda: connector.poll(run.runtime_job_id).status is RunStatus.CANCELLED)  # it does not run on
    dispatch_sync.sync(session, settings, now=utcnow())
    session.expire_all()
    assert session.get(Run, run_id).state == RunState.CANCELLED
    assert session.get(Job, job.id).state == JobState.CANCELLED


class _CancelledDuringSubmitCancelFails:
    """The real runtime, but the user cancels the job during the submit, and the runtime's cancel fails."""

    def __init__(self, real, cancel_job) -> None:  # type: ignore[no-untyped-def]
        self.real, self.cancel_job = real, cancel_job

    def submit(self, spec):  # type: ignore[no-untyped-def]
        self.cancel_job()
        return self.real.submit(spec)

    def cancel(self, runtime_job_id):  # type: ignore[no-untyped-def]
        raise ConnectorError("controller not answering", retryable=True, kind="fake")

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self.real, name)


def test_a_failed_cancel_after_submit_keeps_the_runtime_job_for_the_sync(client, session, settings, tenant_id,
                                                                          clusters, monkeypatch):  # fmt: skip
    job = add_job(session, tenant_id, command="sleep 60")
    write_plan(session, [(job.id, "de", "h100", utcnow(), 30)])
    (run_id,) = dispatch_claim.tick(session, settings, now=utcnow(), worker=W).claimed
    make_session = client.application.extensions["gridshift"].sessions
    real_connector_for = dispatch_submit.connector_for
    monkeypatch.setattr(dispatch_submit, "connector_for", lambda cluster, cfg: _CancelledDuringSubmitCancelFails(
        real_connector_for(cluster, cfg), lambda: _cancel_through_api(client, make_session(), job.id)))  # fmt: skip
    out = dispatch_submit.submit_run(session, settings, run_id, now=utcnow(), worker=W, fresh=True)
    monkeypatch.undo()
    assert out.state == "submitted"
    session.expire_all()
    run = session.get(Run, run_id)
    assert run.runtime_job_id == run.run_key  # recorded although the cancel failed: the sync can still stop it
    assert dispatch_sync.sync(session, settings, now=utcnow()).cancelled == (run_id,)
    connector = get_connector("local", run.cluster.config)
    wait_for(lambda: connector.poll(run.runtime_job_id).status is RunStatus.CANCELLED)
    session.expire_all()
    assert session.get(Job, job.id).state == JobState.CANCELLED


def test_cancel_made_while_a_failed_run_is_polled_is_not_replanned(client, session, settings, tenant_id, clusters,
                                                                    monkeypatch):  # fmt: skip
    job = add_job(session, tenant_id, command="sleep 60")
    write_plan(session, [(job.id, "de", "h100", utcnow(), 30)])
    (run_id,) = dispatch_claim.tick(session, settings, now=utcnow(), worker=W).claimed
    dispatch_submit.submit_run(session, settings, run_id, now=utcnow(), worker=W)
    session.expire_all()
    session.get(Job, job.id)  # the sync has the job in hand before it polls
    make_session = client.application.extensions["gridshift"].sessions

    def poll_while_user_cancels(self, runtime_job_id):  # type: ignore[no-untyped-def]
        _cancel_through_api(client, make_session(), job.id)
        self.cancel(runtime_job_id)
        return RuntimeState(runtime_job_id, RunStatus.FAILED, utcnow(), utcnow(), 1, "exit code 1")

    monkeypatch.setattr(LocalConnector, "poll", poll_while_user_cancels)
    result = dispatch_sync.sync(session, settings, now=utcnow())
    assert not result.replan
    session.expire_all()
    job = session.get(Job, job.id)
    assert job.state == JobState.CANCELLED and job.allowed_regions is None
    assert session.get(Run, run_id).state == RunState.FAILED
    assert dispatch_claim.tick(session, settings, now=utcnow(), worker=W).to_submit == ()


def test_failed_run_sends_job_back_to_planning_without_its_region(session, settings, tenant_id, clusters):
    job = add_job(session, tenant_id, command="exit 3")
    write_plan(session, [(job.id, "de", "a100", utcnow(), 30)])
    (run_id,) = dispatch_claim.tick(session, settings, now=utcnow(), worker=W).claimed
    dispatch_submit.submit_run(session, settings, run_id, now=utcnow(), worker=W)
    result = wait_for(lambda: (r := dispatch_sync.sync(session, settings, now=utcnow())).failed and r)
    assert result.replan and result.failed == (run_id,)
    session.expire_all()
    job = session.get(Job, job.id)
    assert job.state == JobState.PENDING and job.allowed_regions == ["fi"]
    assert "exit code 3" in job.state_reason and "without region de" in job.state_reason
    assert session.get(Run, run_id).state == RunState.FAILED


def test_runtime_refusal_fails_run_and_requeues(session, settings, tenant_id, clusters):
    job = add_job(session, tenant_id, gpus=3)  # de's local cluster has only two a100 slots
    write_plan(session, [(job.id, "de", "a100", utcnow(), 30)])
    (run_id,) = dispatch_claim.tick(session, settings, now=utcnow(), worker=W).claimed
    out = dispatch_submit.submit_run(session, settings, run_id, now=utcnow(), worker=W)
    assert out.state == "failed" and out.replan
    session.expire_all()
    assert session.get(Job, job.id).state == JobState.PENDING
    assert "wants 3 a100" in session.get(Run, run_id).error


def test_job_fails_for_good_after_max_attempts(session, settings, tenant_id, clusters):
    job = add_job(session, tenant_id, command="exit 1")
    for attempt in range(MAX_ATTEMPTS):
        region = ("de", "fi")[attempt % 2]
        write_plan(session, [(job.id, region, "a100", utcnow(), 30)])
        (run_id,) = dispatch_claim.tick(session, settings, now=utcnow(), worker=W).claimed
        dispatch_submit.submit_run(session, settings, run_id, now=utcnow(), worker=W)
        wait_for(lambda: dispatch_sync.sync(session, settings, now=utcnow()).failed)
        session.expire_all()
        job = session.get(Job, job.id)
        job.allowed_regions = None  # let the next hand-written plan use any region
        session.commit()
    assert job.state == JobState.FAILED and f"after {MAX_ATTEMPTS} failed runs" in job.state_reason


def test_job_without_command_fails_with_reason(session, settings, tenant_id, clusters):
    job = add_job(session, tenant_id, command=None)
    write_plan(session, [(job.id, "de", "h100", utcnow(), 30)])
    (run_id,) = dispatch_claim.tick(session, settings, now=utcnow(), worker=W).claimed
    out = dispatch_submit.submit_run(session, settings, run_id, now=utcnow(), worker=W)
    assert out.state == "failed"
    session.expire_all()
    job = session.get(Job, job.id)
    assert job.state == JobState.FAILED and "command" in job.state_reason


def test_region_without_cluster_requeues_job(session, settings, tenant_id, small_fleet):
    job = add_job(session, tenant_id)
    write_plan(session, [(job.id, "de", "h100", utcnow(), 30)])
    result = dispatch_claim.tick(session, settings, now=utcnow(), worker=W)
    assert result.failed_jobs == (job.id,) and result.claimed == ()
    session.expire_all()
    job = session.get(Job, job.id)
    assert job.state == JobState.PENDING and "no enabled cluster" in job.state_reason


class _Unreachable:
    """A runtime whose every call fails retryably (daemon down)."""

    def find(self, run_key):
        raise ConnectorError("controller not answering", retryable=True, kind="fake")

    submit = poll = cancel = energy = find


class _Empty(_Unreachable):
    def find(self, run_key):
        return None


def test_give_up_only_when_runtime_confirms_it_has_no_job(session, settings, tenant_id, clusters, monkeypatch):
    job = add_job(session, tenant_id)
    write_plan(session, [(job.id, "de", "h100", utcnow(), 30)])
    (run_id,) = dispatch_claim.tick(session, settings, now=utcnow(), worker=W).claimed
    monkeypatch.setattr(dispatch_submit, "connector_for", lambda cluster, settings: _Unreachable())
    with pytest.raises(ConnectorError):
        dispatch_submit.submit_run(session, settings, run_id, now=utcnow(), worker=W)
    kept = dispatch_submit.give_up(session, settings, run_id, "controller not answering", now=utcnow())
    assert kept.state == "dispatching"  # the first submit may have landed: wait for stale-claim recovery
    monkeypatch.setattr(dispatch_submit, "connector_for", lambda cluster, settings: _Empty())
    failed = dispatch_submit.give_up(session, settings, run_id, "controller not answering", now=utcnow())
    assert failed.state == "failed" and failed.replan
    session.expire_all()
    assert session.get(Job, job.id).state == JobState.PENDING


class _Interleaved:
    """The real runtime of a cluster, with ``then`` run once (another worker's step) inside its first ``hook`` call."""

    def __init__(self, real, hook: str, then) -> None:  # type: ignore[no-untyped-def]
        self.real, self.hook, self.then = real, hook, then

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        call = getattr(self.real, name)
        if name != self.hook or self.then is None:
            return call

        def interleaved(*args):  # type: ignore[no-untyped-def]
            then, self.then = self.then, None
            if name == "find":
                answer = call(*args)  # asked before the other worker's step: it held no job then
                then()
                return answer
            then()
            return call(*args)

        return interleaved


def _two_workers(app, settings, monkeypatch, hook: str, then):  # type: ignore[no-untyped-def]
    """Make every connector of this test interleave ``then`` (given a fresh session) into its first ``hook``."""
    real_connector_for = dispatch_submit.connector_for
    steps = [lambda: then(app.extensions["gridshift"].sessions())]
    monkeypatch.setattr(dispatch_submit, "connector_for", lambda cluster, cfg: _Interleaved(
        real_connector_for(cluster, cfg), hook, steps.pop() if steps else None))  # fmt: skip


def test_give_up_racing_a_recovered_submit_does_not_run_the_job_twice(app, session, settings, tenant_id, clusters,
                                                                       monkeypatch):  # fmt: skip
    job = add_job(session, tenant_id, command="sleep 60")
    write_plan(session, [(job.id, "de", "h100", utcnow(), 30)])
    (run_id,) = dispatch_claim.tick(session, settings, now=utcnow(), worker=W).claimed
    # worker A gives up (its find says: no job yet) while worker B, recovering the claim, submits it
    recovered = lambda other: dispatch_submit.submit_run(other, settings, run_id, now=utcnow(), worker="B")  # noqa: E731
    _two_workers(app, settings, monkeypatch, "find", recovered)
    out = dispatch_submit.give_up(session, settings, run_id, "controller not answering", now=utcnow())
    monkeypatch.undo()
    assert out.state != "failed" and not out.replan
    session.expire_all()
    run = session.get(Run, run_id)
    assert run.state == RunState.SUBMITTED and run.runtime_job_id == run.run_key
    assert session.get(Job, job.id).state == JobState.SUBMITTED and len(runs_of(session, job.id)) == 1
    get_connector("local", run.cluster.config).cancel(run.runtime_job_id)


def test_submit_that_lands_after_a_give_up_cancels_its_runtime_job(app, session, settings, tenant_id, clusters,
                                                                    monkeypatch):  # fmt: skip
    if not settings.is_sqlite:
        pytest.skip("on PostgreSQL the submit holds its run's row lock, so a give-up waits for it and loses")
    job = add_job(session, tenant_id, command="sleep 60")
    write_plan(session, [(job.id, "de", "h100", utcnow(), 30)])
    (run_id,) = dispatch_claim.tick(session, settings, now=utcnow(), worker=W).claimed
    # worker B submits; before its job lands, worker A gives up (no job yet), fails the run and re-plans the job
    gave_up = lambda other: dispatch_submit.give_up(other, settings, run_id, "timed out", now=utcnow())  # noqa: E731
    _two_workers(app, settings, monkeypatch, "submit", gave_up)
    out = dispatch_submit.submit_run(session, settings, run_id, now=utcnow(), worker="B")
    monkeypatch.undo()
    assert out.state == "failed"
    session.expire_all()
    run = session.get(Run, run_id)
    assert run.state == RunState.FAILED and session.get(Job, job.id).state == JobState.PENDING
    connector = get_connector("local", run.cluster.config)
    assert run.runtime_job_id == run.run_key  # recorded, and stopped: the re-planned job runs once
    wait_for(lambda: connector.poll(run.runtime_job_id).status is RunStatus.CANCELLED)


def test_unreachable_runtime_leaves_runs_alone_during_sync(session, settings, tenant_id, clusters, monkeypatch):
    job = add_job(session, tenant_id, command="sleep 5")
    write_plan(session, [(job.id, "de", "h100", utcnow(), 30)])
    (run_id,) = dispatch_claim.tick(session, settings, now=utcnow(), worker=W).claimed
    dispatch_submit.submit_run(session, settings, run_id, now=utcnow(), worker=W)
    monkeypatch.setattr(dispatch_sync, "connector_for", lambda cluster, settings: _Unreachable())
    result = dispatch_sync.sync(session, settings, now=utcnow())
    assert result.unreachable == (run_id,) and not result.replan
    session.expire_all()
    assert session.get(Run, run_id).state == RunState.SUBMITTED
    monkeypatch.undo()
    run = session.get(Run, run_id)
    get_connector("local", run.cluster.config).cancel(run.runtime_job_id)


class _RefusesButHoldsIt(_Empty):
    """A runtime that refuses a resubmission of a job it already holds."""

    def find(self, run_key):
        return "7"

    def submit(self, spec):
        raise ConnectorError("job name already in use", retryable=False, kind="fake")


def test_refusal_of_a_job_the_runtime_already_holds_adopts_it(session, settings, tenant_id, clusters, monkeypatch):
    job = add_job(session, tenant_id)
    write_plan(session, [(job.id, "de", "h100", utcnow(), 30)])
    (run_id,) = dispatch_claim.tick(session, settings, now=utcnow(), worker=W).claimed
    monkeypatch.setattr(dispatch_submit, "connector_for", lambda cluster, settings: _RefusesButHoldsIt())
    out = dispatch_submit.submit_run(session, settings, run_id, now=utcnow(), worker=W, fresh=True)
    assert out.state == "submitted" and out.runtime_job_id == "7" and out.adopted and not out.replan
    session.expire_all()
    assert session.get(Job, job.id).state == JobState.SUBMITTED


class _HeldOnRuntime:
    """A runtime whose job stays pending until it is submitted again (like a Slurm job left held)."""

    def __init__(self) -> None:
        self.submits = 0

    def find(self, run_key):
        return "4"

    def submit(self, spec):
        self.submits += 1
        return "4"

    def poll(self, runtime_job_id):
        from connectors.base import RunStatus, RuntimeState

        return RuntimeState(runtime_job_id, RunStatus.PENDING, message="JobHeldUser")


def test_run_still_pending_after_its_start_is_submitted_again(session, settings, tenant_id, clusters, monkeypatch):
    job = add_job(session, tenant_id)
    start = utcnow() - dispatch_sync.REASSERT_AFTER - timedelta(seconds=30)
    write_plan(session, [(job.id, "de", "h100", start, 30)])
    (run_id,) = dispatch_claim.tick(session, settings, now=start, worker=W).claimed
    runtime = _HeldOnRuntime()
    monkeypatch.setattr(dispatch_submit, "connector_for", lambda cluster, settings: runtime)
    monkeypatch.setattr(dispatch_sync, "connector_for", lambda cluster, settings: runtime)
    dispatch_submit.submit_run(session, settings, run_id, now=start, worker=W)
    assert runtime.submits == 1
    dispatch_sync.sync(session, settings, now=utcnow())
    assert runtime.submits == 2  # re-asserted once it was overdue
    dispatch_sync.sync(session, settings, now=utcnow())
    assert runtime.submits == 2  # and not again within REASSERT_AFTER
    session.expire_all()
    assert session.get(Run, run_id).state == RunState.SUBMITTED


def test_hour_weights_split_a_run_across_hours():
    start = utcnow().replace(minute=30, second=0, microsecond=0)
    weights = series.hour_weights(start, start + timedelta(hours=1))
    assert sorted(weights.values()) == [0.5, 0.5]
    assert sum(series.hour_weights(start, start + timedelta(minutes=200)).values()) == pytest.approx(1.0)


def test_runs_of_a_job_are_listed_through_the_api(client, session, settings, tenant_id, clusters):
    from app.enums import Role
    from app.models import Tenant

    job = add_job(session, tenant_id, command="exit 3")
    write_plan(session, [(job.id, "de", "a100", utcnow(), 30)])
    (run_id,) = dispatch_claim.tick(session, settings, now=utcnow(), worker=W).claimed
    dispatch_submit.submit_run(session, settings, run_id, now=utcnow(), worker=W)
    wait_for(lambda: dispatch_sync.sync(session, settings, now=utcnow()).failed)
    _row, token = auth.issue_token(session, session.get(Tenant, tenant_id), "reader", Role.READONLY)
    other = auth.create_tenant(session, "team-b")
    _row, foreign = auth.issue_token(session, other, "reader", Role.ADMIN)
    session.commit()
    resp = client.get(f"/api/v1/jobs/{job.id}/runs", headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == 200, resp.json
    (run,) = resp.json
    assert run["id"] == run_id and run["attempt"] == 1 and run["state"] == "failed" and run["exit_code"] == 3
    assert run["cluster"] and run["runtime_job_id"] and run["planned_start_at"]
    resp = client.get(f"/api/v1/jobs/{job.id}/runs", headers={"Authorization": f"Bearer {foreign}"})
    assert resp.status_code == 404
