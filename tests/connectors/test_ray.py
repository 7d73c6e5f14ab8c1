"""Ray specifics against the real local Ray head (tests/runtimes): the time limit a run is given is enforced."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from connectors import JobSpec, RunStatus, get_connector
from tests.runtimes.ray_head import RayHead


@pytest.mark.ray
@pytest.mark.slow
def test_a_job_that_overruns_its_time_limit_is_stopped(ray_head: RayHead) -> None:
    # a chunk is given its chunk's length as time limit: past it the plan gave its GPUs to other work
    connector = get_connector("ray", ray_head.connector_config())
    spec = JobSpec(run_key=f"gs-overrun-{time.time_ns() % 10**9}", name="overrun", command="sleep 600",
                   hardware="h100", gpu_count=1, time_limit_minutes=1)  # fmt: skip
    job_id = connector.submit(spec)
    deadline = time.monotonic() + 150
    while not (state := connector.poll(job_id)).status.terminal and time.monotonic() < deadline:
        time.sleep(1)
    if not state.status.terminal:
        connector.cancel(job_id)
    assert state.status is RunStatus.FAILED
    assert state.message == "time limit of 1 min reached"


@pytest.mark.ray
@pytest.mark.slow
def test_a_job_within_its_time_limit_runs_after_its_planned_start(ray_head: RayHead) -> None:
    connector = get_connector("ray", ray_head.connector_config())
    key = f"gs-limited-{time.time_ns() % 10**9}"
    spec = JobSpec(run_key=key, name="limited", command=f'test "$GRIDSHIFT_RUN_KEY" = {key} && echo "it\'s on"',
                   hardware="h100", gpu_count=1, time_limit_minutes=1,
                   begin_at=datetime.now(UTC) + timedelta(seconds=3))  # fmt: skip
    job_id = connector.submit(spec)
    deadline = time.monotonic() + 90
    while not (state := connector.poll(job_id)).status.terminal and time.monotonic() < deadline:
        time.sleep(0.5)
    assert state.status is RunStatus.SUCCEEDED and state.exit_code == 0
    assert state.started_at is not None and state.started_at >= spec.begin_at
