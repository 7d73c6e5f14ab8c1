"""An interruptible job the planner split into chunks runs as one run per chunk, on the real local runtime.

Between chunks the job is ``paused``: it draws nothing, keeps the capacity of the chunks still to come, and its
next chunk is claimed when due. Reports add up the chunks' metered energy once the last chunk has run.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from app.enums import JobState, RunState
from app.models import Assignment, HardwareType, Job, Region, Run
from app.services import auth, overview, reports
from app.services.assignments import held_intervals
from app.services.dispatch import claim as dispatch_claim
from app.services.dispatch import submit as dispatch_submit
from app.services.dispatch import sync as dispatch_sync
from tests.app.test_dispatch_support import (
    add_job,
    add_local_clusters,
    add_market,
    job_states,
    utcnow,
    wait_for,
)
from tests.app.test_dispatch_support import write_plan as write_plain_plan
from tests.conftest import make_token

W = "chunk-worker"


def _chunked_plan(session, job: Job, chunks):  # type: ignore[no-untyped-def]
    """Make the current plan hold ``job`` on de/h100 in ``chunks`` ([(start, end), ...])."""
    plan = write_plain_plan(session, [])
    session.add(Assignment(
        plan_id=plan.id, job_id=job.id, region_id=session.scalar(select(Region.id).where(Region.code == "de")),
        hardware_type_id=session.scalar(select(HardwareType.id).where(HardwareType.code == "h100")),
        start_at=chunks[0][0], end_at=chunks[-1][1], chunks=[[s.isoformat(), e.isoformat()] for s, e in chunks],
        energy_kwh=2.0, cost=0.2, carbon_kg=0.5,
    ))  # fmt: skip
    session.get(Job, job.id).state = JobState.PLANNED
    session.commit()
    return plan


def _finish(session, settings, run_id: int) -> None:  # type: ignore[no-untyped-def]
    dispatch_submit.submit_run(session, settings, run_id, now=utcnow(), worker=W)
    # a local run starts under a pool user, cleared before and after (slower while other runs hold the pool)
    try:
        wait_for(lambda: run_id in dispatch_sync.sync(session, settings, now=utcnow()).succeeded, timeout_s=60.0)
    except AssertionError as exc:  # say where the run stands (its row and what the local runtime last wrote)
        session.expire_all()
        run = session.get(Run, run_id)
        state_file = Path(run.cluster.config["state_dir"]) / "runs" / str(run.runtime_job_id) / "state.json"
        seen = state_file.read_text() if run.runtime_job_id and state_file.exists() else "(no state file)"
        raise AssertionError(f"{exc}; run {run.state} {run.error!r}; runtime state: {seen}") from exc
    session.expire_all()


def test_each_chunk_is_its_own_run_and_the_job_pauses_between(session, settings, small_fleet, tmp_path,
                                                              job_writable):
    tenant_id = auth.create_tenant(session, "team-a").id
    add_local_clusters(session, tmp_path)
    add_market(session, "DE", 100.0, 300.0)
    log = job_writable / "chunks.log"
    # Each chunk is its own run, and may run as another pool user than the chunk before: the file both write
    # must be writable by any of them (as a job's checkpoint store would be).
    log.touch()
    log.chmod(0o666)
    job = add_job(session, tenant_id, interruptible=True,
                  command=f'echo "$GRIDSHIFT_CHUNK_INDEX/$GRIDSHIFT_CHUNK_COUNT $GRIDSHIFT_CHUNK_END" >> {log}')
    t0 = utcnow()
    # Chunk 0 began an hour ago (the run starts at once); chunk 1 begins 3 s from now and runs for 2 h.
    chunks = [(t0 - timedelta(minutes=60), t0 + timedelta(seconds=2)), (t0 + timedelta(seconds=3), t0 + timedelta(hours=2))]
    _chunked_plan(session, job, chunks)

    (first,) = dispatch_claim.tick(session, settings, now=t0, worker=W).claimed
    spec = dispatch_submit.build_spec(session, session.get(Run, first))
    assert spec.time_limit_minutes == 61 + dispatch_submit.CHUNK_GRACE_MINUTES  # stopped soon after its chunk
    assert spec.env["GRIDSHIFT_CHUNK_END"] == chunks[0][1].isoformat()
    _finish(session, settings, first)
    job = session.get(Job, job.id)
    assert job.state == JobState.PAUSED and job.resume_at == chunks[1][0]
    write_plain_plan(session, [])  # a re-plan: the new current plan holds no row for the paused job
    session.get(Job, job.id).state = JobState.PAUSED  # (the helper marks listed jobs planned; none here)
    session.commit()
    # The chunk still to come keeps its capacity for the planner and shows on the dashboard; the finished one
    # holds nothing.
    held = {a.job_id: iv for a, iv in held_intervals(session, utcnow() + timedelta(minutes=60))}
    assert held[job.id] == [chunks[1]]
    de = next(r for r in overview.regions_overview(session, utcnow(), hours_back=1, hours_ahead=3) if r.code == "de")
    hour = (chunks[1][0] + timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)  # inside chunk 1 only
    assert de.planned_kw[de.slots.index(hour)] > 0
    # Half-done work is reported on its plan, not on the first chunk's energy alone.
    (entry,) = reports.build_entries(session, [job], currency_of={tenant_id: "EUR"})
    assert entry.basis == reports.PLANNED

    assert dispatch_claim.tick(session, settings, now=t0 - timedelta(hours=1), worker=W).to_submit == ()  # not yet due
    (second,) = dispatch_claim.tick(session, settings, now=utcnow(), worker=W).claimed
    last_spec = dispatch_submit.build_spec(session, session.get(Run, second))
    assert last_spec.time_limit_minutes > 115 + dispatch_submit.CHUNK_GRACE_MINUTES  # the last chunk gets the full margin
    _finish(session, settings, second)

    job = session.get(Job, job.id)
    runs = list(session.scalars(select(Run).where(Run.job_id == job.id).order_by(Run.id)))
    assert job.state == JobState.SUCCEEDED and job.resume_at is None
    assert [(r.chunk_index, r.state) for r in runs] == [(0, RunState.SUCCEEDED), (1, RunState.SUCCEEDED)]
    assert log.read_text().split() == ["0/2", chunks[0][1].isoformat(), "1/2", chunks[1][1].isoformat()]
    assert job_states(session, job.id)[-5:] == ["paused", "dispatching", "submitted", "running", "succeeded"] or \
        job_states(session, job.id)[-4:] == ["paused", "dispatching", "submitted", "succeeded"]
    (entry,) = reports.build_entries(session, [job], currency_of={tenant_id: "EUR"})
    assert entry.basis == reports.ESTIMATED  # the local runtime estimates energy from the profile: labelled so
    assert entry.metered_energy_kwh == pytest.approx(sum(r.energy_kwh for r in runs))
    assert entry.cost == pytest.approx(sum(r.cost for r in runs))


def _two_chunks_first_claimed(session, settings, tmp_path) -> tuple[str, Job, int]:
    """A team's token and its interruptible job planned in two chunks, the first due and claimed (its run id)."""
    token = make_token(session, "team-a")
    tenant_id = auth.get_tenant(session, "team-a").id
    add_local_clusters(session, tmp_path)
    job = add_job(session, tenant_id, interruptible=True, command="true")
    t0 = utcnow()
    _chunked_plan(session, job, [(t0 - timedelta(minutes=30), t0 + timedelta(seconds=1)),
                                 (t0 + timedelta(seconds=2), t0 + timedelta(hours=1))])
    (first,) = dispatch_claim.tick(session, settings, now=t0, worker=W).claimed
    return token, job, first


def test_cancelling_a_paused_job_keeps_its_next_chunk_from_running(client, session, settings, small_fleet, tmp_path):
    token, job, first = _two_chunks_first_claimed(session, settings, tmp_path)
    _finish(session, settings, first)
    assert session.get(Job, job.id).state == JobState.PAUSED
    resp = client.post(f"/api/v1/jobs/{job.id}/cancel", headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == 200 and resp.json["state"] == "cancelled"
    assert dispatch_claim.tick(session, settings, now=utcnow() + timedelta(minutes=5), worker=W).to_submit == ()
    session.expire_all()
    assert held_intervals(session, utcnow()) == []  # its chunk to come no longer holds capacity
    assert [r.chunk_index for r in session.scalars(select(Run).where(Run.job_id == job.id))] == [0]


def test_a_paused_job_with_no_chunk_to_continue_goes_back_to_planning(session, settings, small_fleet, tmp_path):
    tenant_id = auth.create_tenant(session, "team-a").id
    add_local_clusters(session, tmp_path)
    job = add_job(session, tenant_id, interruptible=True)
    # its chunk run is gone, and no plan is current: resuming must not wait for one
    job.state, job.resume_at = JobState.PAUSED, utcnow() - timedelta(minutes=1)
    session.commit()
    result = dispatch_claim.tick(session, settings, now=utcnow(), worker=W)
    assert result.to_submit == ()
    assert result.failed_jobs == (job.id,)  # the tick task asks for a re-plan: the job is not left waiting
    session.expire_all()
    job = session.get(Job, job.id)
    assert job.state == JobState.PENDING and job.resume_at is None
    assert job.state_reason == "paused without a chunk to continue"


def test_a_chunk_cancelled_while_it_is_polled_is_not_paused_for_the_next(client, session, settings, small_fleet,
                                                                        tmp_path, monkeypatch):  # fmt: skip
    from connectors.local import LocalConnector

    token, job, first = _two_chunks_first_claimed(session, settings, tmp_path)
    dispatch_submit.submit_run(session, settings, first, now=utcnow(), worker=W)
    real_poll = LocalConnector.poll

    def poll_while_user_cancels(self, runtime_job_id):  # type: ignore[no-untyped-def]
        state = wait_for(lambda: (s := real_poll(self, runtime_job_id)).status.terminal and s)  # chunk 1 is done
        resp = client.post(f"/api/v1/jobs/{job.id}/cancel", headers={"Authorization": f"Bearer {token}"})
        assert resp.status_code == 200, resp.json
        return state

    monkeypatch.setattr(LocalConnector, "poll", poll_while_user_cancels)
    assert first in dispatch_sync.sync(session, settings, now=utcnow()).succeeded
    monkeypatch.undo()
    session.expire_all()
    job = session.get(Job, job.id)
    assert job.state == JobState.CANCELLED and job.resume_at is None
    assert dispatch_claim.tick(session, settings, now=utcnow() + timedelta(minutes=5), worker=W).to_submit == ()
    assert [r.chunk_index for r in session.scalars(select(Run).where(Run.job_id == job.id))] == [0]


def test_chunks_that_succeeded_use_none_of_the_retry_budget(session, settings, small_fleet, tmp_path):
    tenant_id = auth.create_tenant(session, "team-a").id
    add_local_clusters(session, tmp_path)
    job = add_job(session, tenant_id, interruptible=True, command='test "$GRIDSHIFT_CHUNK_INDEX" != 2')
    t0 = utcnow()
    _chunked_plan(session, job, [(t0 - timedelta(minutes=30), t0 + timedelta(seconds=1)),
                                 (t0 + timedelta(seconds=2), t0 + timedelta(seconds=3)),
                                 (t0 + timedelta(seconds=4), t0 + timedelta(hours=1))])  # fmt: skip
    for _chunk in (0, 1):
        (run_id,) = dispatch_claim.tick(session, settings, now=utcnow(), worker=W).claimed
        _finish(session, settings, run_id)
        assert session.get(Job, job.id).state == JobState.PAUSED
    (last,) = dispatch_claim.tick(session, settings, now=utcnow(), worker=W).claimed
    dispatch_submit.submit_run(session, settings, last, now=utcnow(), worker=W)
    result = wait_for(lambda: (r := dispatch_sync.sync(session, settings, now=utcnow())).failed and r)
    assert result.failed == (last,) and result.replan  # its first failure: planned again, elsewhere
    session.expire_all()
    job = session.get(Job, job.id)
    assert job.state == JobState.PENDING and "re-planning without region de" in job.state_reason
