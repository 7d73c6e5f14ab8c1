"""One contract for every connector that can run here: local processes, Slurm (CLI and REST), Ray.

Each test runs against the real runtime started on loopback; a runtime that truly cannot run here skips.
"""

from __future__ import annotations

import itertools
import os
import time
from datetime import UTC, datetime, timedelta

from connectors import ClusterConnector, EnergySource, JobSpec, RunStatus, RuntimeState

_counter = itertools.count()


def run_key(prefix: str) -> str:
    """A run key unique across test sessions sharing a runtime."""
    return f"gs-{prefix}-{os.getpid()}-{int(time.time() * 1000) % 10**8}-{next(_counter)}"


def wait_for(connector: ClusterConnector, job_id: str, done, timeout_s: float = 60.0) -> RuntimeState:
    deadline = time.monotonic() + timeout_s
    state = connector.poll(job_id)
    while not done(state) and time.monotonic() < deadline:
        time.sleep(0.2)
        state = connector.poll(job_id)
    return state


def test_submit_runs_to_success_with_times_and_estimated_energy(connector: ClusterConnector) -> None:
    spec = JobSpec(run_key=run_key("ok"), name="contract ok", command="sleep 1; echo done", hardware="h100",
                   gpu_count=2, power_w_per_gpu=450.0, time_limit_minutes=5)  # fmt: skip
    job_id = connector.submit(spec)
    assert connector.find(spec.run_key) == job_id
    state = wait_for(connector, job_id, lambda s: s.status.terminal)
    assert state.status is RunStatus.SUCCEEDED, state
    assert state.exit_code == 0
    assert state.started_at is not None and state.finished_at is not None
    assert state.started_at.tzinfo is not None
    assert state.finished_at >= state.started_at
    reading = connector.energy(job_id)
    assert reading is not None
    assert reading.source in (EnergySource.ESTIMATE, EnergySource.NVML, EnergySource.ACCOUNTING)
    if reading.source is EnergySource.ESTIMATE:
        seconds = (state.finished_at - state.started_at).total_seconds()
        assert reading.avg_power_w == 900.0
        assert abs(reading.energy_kwh - 900.0 * seconds / 3.6e6) < 1e-9


def test_failing_command_reports_failed_with_exit_code(connector: ClusterConnector) -> None:
    spec = JobSpec(
        run_key=run_key("fail"), name="contract fail", command="exit 3", hardware="h100", gpu_count=1
    )
    state = wait_for(connector, connector.submit(spec), lambda s: s.status.terminal)
    assert state.status is RunStatus.FAILED
    assert state.exit_code == 3


def test_resubmitting_the_same_run_key_returns_the_same_job(connector: ClusterConnector) -> None:
    spec = JobSpec(
        run_key=run_key("idem"), name="contract idem", command="sleep 2", hardware="h100", gpu_count=1
    )
    first = connector.submit(spec)
    second = connector.submit(spec)
    assert first == second
    assert connector.find(spec.run_key) == first
    state = wait_for(connector, first, lambda s: s.status.terminal)
    assert state.status is RunStatus.SUCCEEDED
    assert connector.submit(spec) == first  # also after it finished: never run twice


def test_find_unknown_run_key_is_none(connector: ClusterConnector) -> None:
    assert connector.find(run_key("never-submitted")) is None


def test_cancel_stops_a_running_job(connector: ClusterConnector) -> None:
    spec = JobSpec(run_key=run_key("cancel"), name="contract cancel", command="sleep 120", hardware="h100",
                   gpu_count=1, power_w_per_gpu=300.0)  # fmt: skip
    job_id = connector.submit(spec)
    running = wait_for(connector, job_id, lambda s: s.status is RunStatus.RUNNING)
    assert running.status is RunStatus.RUNNING
    connector.cancel(job_id)
    state = wait_for(connector, job_id, lambda s: s.status.terminal, timeout_s=30)
    assert state.status is RunStatus.CANCELLED
    connector.cancel(job_id)  # cancelling a finished job is harmless
    assert connector.poll(job_id).status is RunStatus.CANCELLED


def test_begin_at_in_the_future_delays_the_start(connector: ClusterConnector) -> None:
    begin = datetime.now(UTC) + timedelta(seconds=2.5)
    spec = JobSpec(run_key=run_key("later"), name="contract later", command="true", hardware="h100",
                   gpu_count=1, begin_at=begin)  # fmt: skip
    job_id = connector.submit(spec)
    early = connector.poll(job_id)
    if datetime.now(UTC) < begin:  # polled before the begin time: a loaded machine may take longer to submit
        assert early.status is RunStatus.PENDING
    state = wait_for(connector, job_id, lambda s: s.status.terminal)
    assert state.status is RunStatus.SUCCEEDED
    assert state.started_at is not None
    assert state.started_at >= begin - timedelta(seconds=1)  # runtimes round to whole seconds


def test_capacity_counts_gpus_per_hardware_type_and_what_a_job_holds(connector: ClusterConnector) -> None:
    before = connector.capacity()
    assert before.gpus_total["h100"] == 4
    assert before.gpus_total["a100"] == 2
    spec = JobSpec(
        run_key=run_key("cap"), name="contract capacity", command="sleep 60", hardware="a100", gpu_count=2
    )
    job_id = connector.submit(spec)
    try:
        wait_for(connector, job_id, lambda s: s.status is RunStatus.RUNNING)
        during = connector.capacity()
        assert during.gpus_free["a100"] == 0
        assert during.gpus_total["a100"] == 2
    finally:
        connector.cancel(job_id)
    wait_for(connector, job_id, lambda s: s.status.terminal, timeout_s=30)
    deadline = time.monotonic() + 10
    while connector.capacity().gpus_free["a100"] != 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert connector.capacity().gpus_free["a100"] == 2


def test_energy_of_a_running_job_grows_and_is_none_before_start(connector: ClusterConnector) -> None:
    later = JobSpec(run_key=run_key("e-later"), name="not yet", command="true", hardware="h100", gpu_count=1,
                    begin_at=datetime.now(UTC) + timedelta(minutes=30), power_w_per_gpu=100.0)  # fmt: skip
    pending_id = connector.submit(later)
    try:
        assert connector.energy(pending_id) is None
    finally:
        connector.cancel(pending_id)
    spec = JobSpec(run_key=run_key("e-run"), name="metered", command="sleep 30", hardware="h100", gpu_count=1,
                   power_w_per_gpu=100.0)  # fmt: skip
    job_id = connector.submit(spec)
    try:
        wait_for(connector, job_id, lambda s: s.status is RunStatus.RUNNING)
        first = connector.energy(job_id)
        time.sleep(1.5)
        second = connector.energy(job_id)
        assert first is not None and second is not None
        assert second.energy_kwh > first.energy_kwh
    finally:
        connector.cancel(job_id)
