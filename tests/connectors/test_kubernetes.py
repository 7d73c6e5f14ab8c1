"""Kubernetes specifics against the fake API server (no real API server can run on these machines)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from connectors import ConnectorError, JobSpec, RunStatus, get_connector
from connectors.kubernetes import QUEUE_LABEL, build_job
from tests.connectors.fake_k8s import FakeKubernetes, wait_until
from tests.runtimes.optional import require_connector

NODES = [
    {"name": "h100-a", "labels": {"gridshift.io/hardware-type": "h100"}, "allocatable": {"nvidia.com/gpu": 8}},
    {"name": "mi300x-a", "labels": {"pool": "amd-mi300x"}, "allocatable": {"amd.com/gpu": 8}},
    {"name": "ascend-a", "labels": {"gridshift.io/hardware-type": "ascend910b"},
     "allocatable": {"huawei.com/Ascend910": 8}},
]  # fmt: skip


@pytest.fixture
def fake() -> Iterator[FakeKubernetes]:
    server = FakeKubernetes(NODES).start()
    yield server
    server.stop()


def connector_for(fake: FakeKubernetes, **extra):
    require_connector("kubernetes")
    config = {
        "host": fake.url,
        "token": "t",
        "namespace": "ml",
        "node_selectors": {"mi300x": {"pool": "amd-mi300x"}},
    }
    return get_connector("kubernetes", config | extra)


@pytest.mark.parametrize(
    ("hardware", "resource"),
    [("h100", "nvidia.com/gpu"), ("mi300x", "amd.com/gpu"), ("ascend910b", "huawei.com/Ascend910")],
)
def test_job_asks_for_the_vendor_resource_on_matching_nodes(fake: FakeKubernetes, hardware: str,
                                                            resource: str) -> None:  # fmt: skip
    connector = connector_for(fake)
    spec = JobSpec(run_key=f"gs-k8s-{hardware}", name="vendor", command="exit 0", hardware=hardware, gpu_count=2,
                   image="registry.example/train:1")  # fmt: skip
    job_id = connector.submit(spec)
    job = fake.jobs[("ml", job_id)]
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {resource: "2"}
    assert container["image"] == "registry.example/train:1"
    assert container["command"] == ["/bin/sh", "-c", "exit 0"]
    selector = job["spec"]["template"]["spec"]["nodeSelector"]
    assert selector == (
        {"pool": "amd-mi300x"} if hardware == "mi300x" else {"gridshift.io/hardware-type": hardware}
    )
    assert wait_until(lambda: connector.poll(job_id).status is RunStatus.SUCCEEDED)
    assert connector.capacity().gpus_total[hardware] == 8


def test_kueue_queue_label_and_suspended_until_admitted(fake: FakeKubernetes) -> None:
    connector = connector_for(fake, queue="team-a")
    job_id = connector.submit(JobSpec(run_key="gs-kueue", name="q", command="true", hardware="h100"))
    job = fake.jobs[("ml", job_id)]
    assert job["metadata"]["labels"][QUEUE_LABEL] == "team-a"
    assert job["spec"]["suspend"] is True
    time.sleep(0.3)
    assert connector.poll(job_id).status is RunStatus.PENDING
    job["spec"]["suspend"] = False  # what Kueue does when it admits the workload
    assert wait_until(lambda: connector.poll(job_id).status is RunStatus.SUCCEEDED)


def test_future_begin_at_holds_the_job_until_due(fake: FakeKubernetes) -> None:
    connector = connector_for(fake)
    connector.capacity()  # the client is set up before the clock starts (the first call of a process is slow)
    begin = datetime.now(UTC) + timedelta(seconds=1.5)
    job_id = connector.submit(JobSpec(run_key="gs-k8s-later", name="later", command="true", hardware="h100",
                                      begin_at=begin))  # fmt: skip
    created_suspended = fake.jobs[("ml", job_id)]["spec"]["suspend"]
    early = connector.poll(job_id)
    if datetime.now(UTC) < begin:  # submitted and polled before the begin time (not always so on a loaded machine)
        assert created_suspended is True and early.status is RunStatus.PENDING
    assert wait_until(lambda: connector.poll(job_id).status is RunStatus.SUCCEEDED, timeout_s=15)
    assert connector.poll(job_id).started_at >= begin.replace(microsecond=0)


def test_a_job_created_by_another_worker_meanwhile_is_adopted(fake: FakeKubernetes,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    spec = JobSpec(run_key="gs-k8s-race", name="race", command="sleep 1", hardware="h100")
    first = connector_for(fake)
    second = connector_for(fake)
    first.submit(spec)
    real_job = second._job
    blind = [True]  # the second worker's first read happens before the first worker's create

    def read_job(name: str):
        if blind.pop() if blind else False:
            return None
        return real_job(name)

    monkeypatch.setattr(second, "_job", read_job)
    assert second.submit(spec) == spec.run_key
    assert sum(1 for method, path in fake.requests if method == "POST") == 2  # the second POST got 409
    assert len(fake.jobs) == 1


def test_unreachable_api_server_is_a_retryable_error() -> None:
    require_connector("kubernetes")
    connector = get_connector("kubernetes", {"host": "http://127.0.0.1:9", "timeout_s": 2})
    with pytest.raises(ConnectorError) as info:
        connector.find("gs-nowhere")
    assert info.value.retryable is True


def test_deadline_exceeded_is_failed_with_the_reason(fake: FakeKubernetes) -> None:
    connector = connector_for(fake)
    job_id = connector.submit(
        JobSpec(run_key="gs-k8s-deadline", name="d", command="sleep 30", hardware="h100")
    )
    fake.jobs[("ml", job_id)]["spec"]["activeDeadlineSeconds"] = 1
    assert wait_until(lambda: connector.poll(job_id).status.terminal, timeout_s=10)
    state = connector.poll(job_id)
    assert state.status is RunStatus.FAILED
    assert state.message == "DeadlineExceeded"


def test_build_job_is_plain_json_with_the_run_key_everywhere() -> None:
    spec = JobSpec(run_key="gs-run-7", name="n", command="train.py", hardware="h100", gpu_count=4,
                   env={"EPOCHS": "3"}, time_limit_minutes=90, power_w_per_gpu=650.0)  # fmt: skip
    job = build_job(spec, namespace="ml", image="img", resource_name="nvidia.com/gpu",
                    node_selector={"a": "b"}, queue=None, hold=False)  # fmt: skip
    assert job["metadata"]["name"] == "gs-run-7"
    assert job["metadata"]["labels"]["gridshift.io/run-key"] == "gs-run-7"
    assert job["spec"]["activeDeadlineSeconds"] == 5400
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["suspend"] is False
    env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env == {"EPOCHS": "3", "GRIDSHIFT_RUN_KEY": "gs-run-7"}
    assert job["metadata"]["annotations"]["gridshift.io/power-w-per-gpu"] == "650"


def test_capacity_ignores_cpu_and_memory_limits_of_other_pods(fake: FakeKubernetes) -> None:
    fake.pods[("web", "api-1")] = {
        "metadata": {"name": "api-1", "namespace": "web", "labels": {}},
        "spec": {"nodeName": "h100-a", "containers": [
            {"name": "api", "resources": {"limits": {"cpu": "500m", "memory": "4Gi", "nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running"},
    }  # fmt: skip
    capacity = connector_for(fake).capacity()
    assert capacity.gpus_total["h100"] == 8
    assert capacity.gpus_free["h100"] == 7


def test_log_is_the_tail_of_the_jobs_pod(fake: FakeKubernetes) -> None:
    connector = connector_for(fake)
    job_id = connector.submit(JobSpec(run_key="gs-log", name="l", command="true", hardware="h100"))
    assert wait_until(lambda: ("ml", job_id) in fake.pods)
    pod = fake.pods[("ml", job_id)]["metadata"]["name"]
    assert connector.log(job_id, 100) is None  # the pod has no output yet
    fake.pod_logs[pod] = "".join(f"line {i}\n" for i in range(100))
    assert connector.log(job_id, 8) == b"line 99\n"
    assert connector.log("no-such-job", 8) is None
