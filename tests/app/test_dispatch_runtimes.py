"""Dispatch to real Slurm (CLI and slurmrestd) and Ray runtimes on loopback (tests/runtimes fixtures).

The fixtures skip with their reason where a runtime cannot be installed or started here.
"""

from __future__ import annotations

import pytest

from app.enums import JobState, RunState
from app.models import Job, Run
from app.services import auth, fleet
from app.services.dispatch import claim as dispatch_claim
from app.services.dispatch import submit as dispatch_submit
from app.services.dispatch import sync as dispatch_sync
from connectors.registry import get_connector
from tests.app.test_dispatch_support import add_job, runs_of, utcnow, wait_for, write_plan
from tests.runtimes.fixtures import ray_head, slurm_clusters  # noqa: F401 - fixtures

W = "test-worker"


def _dispatch_and_finish(session, settings, job: Job, region: str, hw: str, timeout_s: float = 40.0) -> Run:
    write_plan(session, [(job.id, region, hw, utcnow(), 30)])
    (run_id,) = dispatch_claim.tick(session, settings, now=utcnow(), worker=W).claimed
    assert dispatch_submit.submit_run(session, settings, run_id, now=utcnow(), worker=W).state == "submitted"
    # A redelivered submit must not create a second runtime job.
    session.expire_all()
    run = session.get(Run, run_id)
    run.state, run.runtime_job_id = RunState.DISPATCHING, None
    session.commit()
    again = dispatch_submit.submit_run(session, settings, run_id, now=utcnow(), worker=W)
    assert again.state == "submitted" and again.adopted
    wait_for(lambda: run_id in dispatch_sync.sync(session, settings, now=utcnow()).succeeded, timeout_s=timeout_s)
    session.expire_all()
    return session.get(Run, run_id)


@pytest.mark.parametrize("mode", ["cli", "rest"])
def test_dispatch_to_slurm(session, settings, small_fleet, slurm_clusters, mode):  # noqa: F811
    cluster = slurm_clusters["gs-eu"]  # GRES h100:4, a100:2
    config = cluster.connector_config(mode)
    secrets = {"rest_token": config.pop("rest_token")} if mode == "rest" else None  # a credential: never in config
    fleet.upsert_cluster(session, f"slurm-{mode}", "de", "slurm", config, secrets=secrets,
                         keys=settings.encryption_keys)  # fmt: skip
    tenant = auth.create_tenant(session, "team-a")
    session.commit()
    job = add_job(session, tenant.id, command="sleep 1; echo on-slurm", gpus=1, name=f"slurm-{mode}")
    run = _dispatch_and_finish(session, settings, job, "de", "h100")
    assert run.state == RunState.SUCCEEDED and run.energy_kwh is not None and run.started_at
    assert session.get(Job, job.id).state == JobState.SUCCEEDED
    connector = get_connector("slurm", cluster.connector_config("cli"))
    assert connector.find(run.run_key) == run.runtime_job_id  # exactly one job carries the run key
    assert len(runs_of(session, job.id)) == 1


def test_dispatch_to_ray(session, settings, small_fleet, ray_head):  # noqa: F811
    tenant = auth.create_tenant(session, "team-a")
    # a Ray cluster serves one tenant (any of its jobs can read every job's runtime_env): bound to team-a
    fleet.upsert_cluster(session, "ray-fi", "fi", "ray", {**ray_head.connector_config(), "tenant": "team-a"})
    session.commit()  # resources H100=4, A100=2
    job = add_job(session, tenant.id, command="echo on-ray", gpus=1, name="ray")
    run = _dispatch_and_finish(session, settings, job, "fi", "a100", timeout_s=60.0)
    assert run.state == RunState.SUCCEEDED and run.runtime_job_id == run.run_key
    assert session.get(Job, job.id).state == JobState.SUCCEEDED
