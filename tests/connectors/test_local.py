"""Local runtime specifics: GPU pinning per vendor, GPU pools, logs, cross-process idempotency, NVML meter."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import types
from collections.abc import Callable
from pathlib import Path

import pytest

from connectors import ConfigError, JobSpec, RunStatus, get_connector
from connectors.local import LocalConnector
from connectors.local_supervisor import Meter, read_json

REPO = Path(__file__).resolve().parents[2]
GPUS = {"h100": [0, 1, 2, 3], "mi300x": [0, 1], "ascend910b": [0, 1]}


@pytest.fixture
def local(tmp_path: Path) -> LocalConnector:
    connector = get_connector("local", {"state_dir": str(tmp_path / "state"), "gpus": GPUS})
    assert isinstance(connector, LocalConnector)
    return connector


def finish(connector: LocalConnector, job_id: str, timeout_s: float = 20.0) -> RunStatus:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = connector.poll(job_id).status
        if status.terminal:
            return status
        time.sleep(0.05)
    raise AssertionError(f"{job_id} did not finish: {connector.poll(job_id)}")


@pytest.mark.parametrize(
    ("hardware", "variable"),
    [
        ("h100", "CUDA_VISIBLE_DEVICES"),
        ("mi300x", "HIP_VISIBLE_DEVICES"),
        ("ascend910b", "ASCEND_RT_VISIBLE_DEVICES"),
    ],
)
def test_gpus_are_pinned_with_the_vendor_variable(
    local: LocalConnector, hardware: str, variable: str
) -> None:
    spec = JobSpec(run_key=f"gs-pin-{hardware}", name="pin", hardware=hardware, gpu_count=2,
                   command=f'echo "pinned=${variable}"; echo "key=$GRIDSHIFT_RUN_KEY extra=$EXTRA" >&2',
                   env={"EXTRA": "x y"})  # fmt: skip
    job_id = local.submit(spec)
    assert finish(local, job_id) is RunStatus.SUCCEEDED
    log = local.log_path(job_id).read_text()
    assert f"pinned={','.join(str(d) for d in GPUS[hardware][:2])}" in log
    assert f"key={spec.run_key} extra=x y" in log  # stderr captured too, env passed


def wait_until(check: Callable[[], bool], timeout_s: float = 20.0) -> None:
    """Poll ``check`` until it holds; the bound only ends a hung test (a loaded machine starts processes late)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_concurrent_jobs_get_disjoint_gpus_and_a_third_waits(local: LocalConnector, job_writable: Path) -> None:
    release = job_writable / "release"  # the jobs hold their GPUs until the test has looked at all three
    specs = [JobSpec(run_key=f"gs-pool-{i}", name="pool", hardware="h100", gpu_count=2,
                     command=f'echo "gpus=$CUDA_VISIBLE_DEVICES"; while [ ! -e {release} ]; do sleep 0.05; done')
             for i in range(3)]  # fmt: skip
    ids = [local.submit(spec) for spec in specs]

    def two_run_and_one_waits() -> bool:
        states = [local.poll(i) for i in ids]
        running = [s for s in states if s.status is RunStatus.RUNNING]
        return len(running) == 2 and any("waiting for 2 free h100" in s.message for s in states)

    wait_until(two_run_and_one_waits)
    states = [local.poll(i) for i in ids]
    assert [s.status for s in states].count(RunStatus.PENDING) == 1
    assert local.capacity().gpus_free["h100"] == 0
    release.touch()
    for job_id in ids:
        assert finish(local, job_id) is RunStatus.SUCCEEDED
    pinned = [local.log_path(i).read_text().split("gpus=")[1].split()[0] for i in ids]
    first_two = [
        set(p.split(",")) for p, s in zip(pinned, states, strict=True) if s.status is RunStatus.RUNNING
    ]
    assert not first_two[0] & first_two[1]
    assert local.capacity().gpus_free["h100"] == 4


def test_more_gpus_than_the_host_has_is_refused(local: LocalConnector) -> None:
    with pytest.raises(ConfigError) as info:
        local.submit(JobSpec(run_key="gs-too-big", name="big", command="true", hardware="h100", gpu_count=5))
    assert info.value.field == "gpu_count"
    assert local.find("gs-too-big") is None


def test_submit_is_idempotent_across_processes(tmp_path: Path, job_writable: Path) -> None:
    marker = job_writable / "ran.txt"
    script = textwrap.dedent(f"""
        from connectors import get_connector, JobSpec
        c = get_connector("local", {{"state_dir": {str(tmp_path / "state")!r}, "gpus": {{"h100": [0]}}}})
        print(c.submit(JobSpec(run_key="gs-race", name="race", hardware="h100", gpu_count=1,
                               command="echo ran >> {marker}")))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
             for _ in range(4)]  # fmt: skip
    outputs = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert outputs == ["gs-race"] * 4
    other = get_connector("local", {"state_dir": str(tmp_path / "state"), "gpus": {"h100": [0]}})
    assert isinstance(other, LocalConnector)
    assert finish(other, "gs-race") is RunStatus.SUCCEEDED  # a fresh instance (another worker) polls it
    assert marker.read_text() == "ran\n"


def test_a_killed_supervisor_is_reported_failed(local: LocalConnector) -> None:
    job_id = local.submit(
        JobSpec(
            run_key="gs-orphan",
            name="o",
            command="sleep 30 & echo $! > child.pid; wait",
            hardware="h100",
            gpu_count=1,
        )
    )
    deadline = time.monotonic() + 10
    while local.poll(job_id).status is not RunStatus.RUNNING and time.monotonic() < deadline:
        time.sleep(0.05)
    deadline = time.monotonic() + 10
    work_dir = Path((read_json(local.run_dir(job_id) / "state.json") or {})["work_dir"])
    while not (work_dir / "child.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int((work_dir / "child.pid").read_text())
    state = read_json(local.run_dir(job_id) / "state.json") or {}
    os.kill(state["supervisor_pid"], signal.SIGKILL)  # the supervisor alone: its job lives on, orphaned
    wait_until(lambda: local.poll(job_id).status.terminal)
    polled = local.poll(job_id)
    assert polled.status is RunStatus.FAILED
    assert "supervisor process lost" in polled.message
    assert local.capacity().gpus_free["h100"] == 4
    assert wait_gone(child), "the orphaned job process was not stopped"


def wait_gone(pid: int, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if ") Z " in Path(f"/proc/{pid}/stat").read_text():
                return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_meter_reads_the_nvml_total_energy_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    counters = {0: 1_000_000, 1: 5_000_000}  # mJ since driver load

    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetTotalEnergyConsumption=lambda h: counters[h],
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    meter = Meter([0, 1], interval_s=60)
    assert meter.active
    meter.start(lambda: None)
    counters[0] += 350_000  # 350 J
    counters[1] += 650_000  # 650 J
    meter.stop()
    assert meter.energy_j == pytest.approx(1000.0)
    assert meter.seconds > 0


def test_meter_is_inactive_without_a_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_library() -> None:
        raise RuntimeError("NVML Shared Library Not Found")

    monkeypatch.setitem(sys.modules, "pynvml", types.SimpleNamespace(nvmlInit=no_library))
    assert not Meter([0], interval_s=1).active


def test_a_submission_interrupted_before_launch_is_completed_by_the_retry(tmp_path: Path, job_writable: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    config = {"state_dir": str(tmp_path / "state"), "gpus": {"h100": [0]}}
    marker = job_writable / "ran.txt"
    spec = JobSpec(
        run_key="gs-crash", name="c", command=f"echo ran >> {marker}", hardware="h100", gpu_count=1
    )
    crashing = get_connector("local", config)
    monkeypatch.setattr(crashing, "_launch", lambda run_dir, env=None: None)  # the worker died before starting it
    crashing.submit(spec)
    assert crashing.poll("gs-crash").status is RunStatus.PENDING
    retry = get_connector("local", config)  # the redelivered task, in another worker
    assert isinstance(retry, LocalConnector)
    assert retry.submit(spec) == "gs-crash"
    assert finish(retry, "gs-crash") is RunStatus.SUCCEEDED
    assert retry.submit(spec) == "gs-crash"  # once finished, never again
    time.sleep(0.3)
    assert marker.read_text() == "ran\n"


def test_the_time_limit_stops_a_job_and_fails_it(
    local: LocalConnector, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a real 1-minute limit would make this test slow: shrink the spec's limit to 1.2 s before the supervisor reads it
    monkeypatch.setattr(local, "_launch", lambda run_dir, env=None: None)
    job_id = local.submit(
        JobSpec(run_key="gs-limit", name="l", command="sleep 30", hardware="h100", gpu_count=1)
    )
    spec_path = local.run_dir(job_id) / "spec.json"
    spec_path.write_text(
        spec_path.read_text().replace('"time_limit_minutes": 60', '"time_limit_minutes": 0.02')
    )
    monkeypatch.undo()
    local._launch(local.run_dir(job_id))
    assert finish(local, job_id) is RunStatus.FAILED
    state = local.poll(job_id)
    assert "time limit" in state.message
    assert state.finished_at is not None and state.started_at is not None
    assert (state.finished_at - state.started_at).total_seconds() < 10


def test_a_cancel_marker_stops_a_run_that_waits_for_gpus(tmp_path: Path) -> None:
    """A canceller that read the run's state before its supervisor recorded a pid leaves only the ``cancel``
    marker; the supervisor must honour it while it waits (here for the one GPU, held by another run), not only
    once its job has started."""
    local = get_connector("local", {"state_dir": str(tmp_path / "state"), "gpus": {"h100": [0]}})
    assert isinstance(local, LocalConnector)
    spec = JobSpec(run_key="gs-holder", name="h", command="sleep 30", hardware="h100", gpu_count=1)
    holder = local.submit(spec)
    wait_until(lambda: local.poll(holder).status is RunStatus.RUNNING)
    waiter = local.submit(JobSpec(run_key="gs-waiter", name="w", command="true", hardware="h100", gpu_count=1))
    wait_until(lambda: "waiting for 1 free h100" in local.poll(waiter).message)
    (local.run_dir(waiter) / "cancel").touch()  # what cancel() leaves when it knows no supervisor pid
    assert finish(local, waiter, timeout_s=10.0) is RunStatus.CANCELLED
    assert local.poll(holder).status is RunStatus.RUNNING
    local.cancel(holder)
    assert finish(local, holder) is RunStatus.CANCELLED
