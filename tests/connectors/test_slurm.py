"""Slurm specifics: state and GRES parsing, the second region's hardware types, racing submitters, errors."""

from __future__ import annotations

import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from connectors import ConnectorError, JobSpec, RunStatus, get_connector
from connectors.slurm import SlurmConnector, map_state, parse_gres
from tests.runtimes.slurm import SlurmCluster


def test_map_state_covers_terminal_and_live_states() -> None:
    assert map_state("COMPLETED") is RunStatus.SUCCEEDED
    assert map_state("CANCELLED by 0") is RunStatus.CANCELLED
    assert map_state("TIMEOUT") is RunStatus.FAILED
    assert map_state("NODE_FAIL") is RunStatus.FAILED
    assert map_state("COMPLETING") is RunStatus.RUNNING
    assert map_state("PENDING") is RunStatus.PENDING
    assert map_state("") is RunStatus.UNKNOWN


def test_parse_gres_reads_config_and_usage_strings() -> None:
    assert parse_gres("gpu:h100:4(S:0-1),gpu:a100:2") == {"h100": 4, "a100": 2}
    assert parse_gres("gpu:h100:1(IDX:0),gpu:a100:0(IDX:N/A)") == {"h100": 1, "a100": 0}
    assert parse_gres("(null)") == {}


@pytest.mark.slurm
@pytest.mark.parametrize("mode", ["cli", "rest"])
def test_second_region_maps_its_gres_types_to_hardware_codes(slurm_clusters: dict[str, SlurmCluster],
                                                             mode: str) -> None:  # fmt: skip
    us = slurm_clusters["gs-us"]
    config = us.connector_config(mode) | {"gres_types": {"h200": "h200", "l40s-48g": "l40s"}}
    connector = get_connector("slurm", config)
    capacity = connector.capacity()
    assert capacity.gpus_total == {"h200": 2, "l40s-48g": 4}
    spec = JobSpec(run_key=f"gs-us-{mode}-{time.time_ns() % 10**9}", name="us", hardware="l40s-48g", gpu_count=3,
                   command='echo "gpus=$CUDA_VISIBLE_DEVICES"; sleep 2')  # fmt: skip
    job_id = connector.submit(spec)
    deadline = time.monotonic() + 30
    while connector.poll(job_id).status is not RunStatus.RUNNING and time.monotonic() < deadline:
        time.sleep(0.1)
    assert connector.capacity().gpus_free["l40s-48g"] == 1
    eu = get_connector("slurm", slurm_clusters["gs-eu"].connector_config(mode))
    assert eu.find(spec.run_key) is None  # regions are separate clusters
    connector.cancel(job_id)


@pytest.mark.slurm
def test_racing_submitters_leave_exactly_one_job(slurm_clusters: dict[str, SlurmCluster]) -> None:
    cluster = slurm_clusters["gs-eu"]
    workers = [get_connector("slurm", cluster.connector_config("cli")) for _ in range(4)]
    spec = JobSpec(run_key=f"gs-race-{time.time_ns() % 10**9}", name="race", command="sleep 1", hardware="h100",
                   gpu_count=1)  # fmt: skip
    with ThreadPoolExecutor(4) as pool:
        ids = list(pool.map(lambda w: w.submit(spec), workers))
    assert len(set(ids)) == 1
    jobs = cluster.run("squeue", "--states=all", "-h", "-n", spec.run_key, "-o", "%i %T").splitlines()
    live = [line for line in jobs if "CANCELLED" not in line]
    assert [line.split()[0] for line in live] == [ids[0]]  # twins were cancelled while still held
    deadline = time.monotonic() + 30
    while not workers[0].poll(ids[0]).status.terminal and time.monotonic() < deadline:
        time.sleep(0.2)
    assert workers[0].poll(ids[0]).status is RunStatus.SUCCEEDED


@pytest.mark.slurm
def test_unknown_job_is_a_non_retryable_error(slurm_clusters: dict[str, SlurmCluster]) -> None:
    connector = get_connector("slurm", slurm_clusters["gs-eu"].connector_config("cli"))
    with pytest.raises(ConnectorError) as info:
        connector.poll("987654")
    assert info.value.retryable is False


@pytest.mark.slurm
def test_controller_down_is_a_retryable_error(slurm_clusters: dict[str, SlurmCluster], tmp_path) -> None:
    cluster = slurm_clusters["gs-eu"]
    text = cluster.conf_path.read_text().replace(f"SlurmctldPort={cluster.ctld_port}", "SlurmctldPort=9")
    conf = tmp_path / "slurm.conf"
    conf.write_text(text)
    connector = get_connector(
        "slurm", cluster.connector_config("cli") | {"slurm_conf": str(conf), "timeout_s": 3}
    )
    with pytest.raises(ConnectorError) as info:
        connector.find("gs-anything")
    assert info.value.retryable is True


@pytest.mark.slurm
def test_rest_with_a_bad_token_is_a_connector_error(slurm_clusters: dict[str, SlurmCluster]) -> None:
    # slurmrestd 22.05 answers a bad JWT with HTTP 500 "Unspecified error", so it cannot be told from an outage
    config = slurm_clusters["gs-eu"].connector_config("rest") | {"rest_token": "not-a-jwt"}
    with pytest.raises(ConnectorError, match="slurmrestd GET /nodes"):
        get_connector("slurm", config).capacity()


def test_a_job_the_controller_forgot_is_read_from_the_completion_log(monkeypatch: pytest.MonkeyPatch) -> None:
    # recorded from Slurm 22.05: scontrol has dropped job 42 (MinJobAge passed); sacct -c still lists it
    outputs = {
        "squeue": "",
        "scontrol": "",
        "sacct": "41|gs-run-other|COMPLETED|2026-11-29T16:05:01|2026-11-29T16:05:02|0:0\n"
                 "42|gs-run-old|COMPLETED|2026-11-29T16:05:04|2026-11-29T16:05:09|0:0\n"
                 "42.batch|batch|COMPLETED|2026-11-29T16:05:04|2026-11-29T16:05:09|0:0\n",
    }  # fmt: skip
    connector = get_connector("slurm", {})
    calls: list[tuple[str, ...]] = []

    def run(*args: str, **kwargs: object) -> str:
        calls.append(args)
        if args[0] == "sacct" and "-j" in args:  # sacct -c lists every job: keep the asked one, as Slurm does
            wanted = args[args.index("-j") + 1]
            return "".join(
                line + "\n"
                for line in outputs["sacct"].splitlines()
                if line.split(".")[0].split("|")[0] == wanted
            )
        return outputs[args[0]]

    monkeypatch.setattr(connector, "_run", run)
    assert connector.find("gs-run-old") == "42"
    assert [a[-1] for a in calls if a[0] == "scontrol"] == ["42"]  # the other job in the log is not looked up
    state = connector.poll("42")
    assert state.status is RunStatus.SUCCEEDED
    assert state.exit_code == 0
    assert state.started_at is not None and state.started_at.isoformat() == "2026-11-29T16:05:04+00:00"
    assert (state.finished_at - state.started_at).total_seconds() == 5


@pytest.mark.slurm
def test_failed_release_is_raised_and_the_retried_submit_releases(
    slurm_clusters: dict[str, SlurmCluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job must never stay held because `scontrol release` failed: the error surfaces and the retry settles it."""
    cluster = slurm_clusters["gs-eu"]
    connector = get_connector("slurm", cluster.connector_config("cli"))
    spec = JobSpec(run_key=f"gs-held-{time.time_ns() % 10**9}", name="held", command="sleep 0.5", hardware="h100",
                   gpu_count=1)  # fmt: skip
    assert isinstance(connector, SlurmConnector)
    real_run = connector._run

    def release_fails(*args: str, **kwargs: object) -> str:
        if args[:2] == ("scontrol", "release"):  # the controller refuses: a real Slurm error for a real call
            return real_run("scontrol", "release", "999999999", **kwargs)  # type: ignore[arg-type]
        return real_run(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(connector, "_run", release_fails)
    with pytest.raises(ConnectorError):
        connector.submit(spec)
    (held,) = cluster.run("squeue", "-h", "-n", spec.run_key, "-o", "%i %r").splitlines()
    assert "JobHeldUser" in held or "Held" in held
    monkeypatch.setattr(connector, "_run", real_run)
    job_id = connector.submit(spec)  # the dispatcher's retry: finds the held job, releases it
    assert job_id == held.split()[0]
    deadline = time.monotonic() + 30
    while not connector.poll(job_id).status.terminal and time.monotonic() < deadline:
        time.sleep(0.2)
    assert connector.poll(job_id).status is RunStatus.SUCCEEDED


class _Recorded:
    """A slurmrestd reply recorded from Slurm 22.05 (openapi v0.0.38)."""

    def __init__(self, status_code: int, errors: list[dict[str, object]]) -> None:
        self.status_code, self.errors, self.text = status_code, errors, ""

    def json(self) -> dict[str, object]:
        return {"errors": self.errors}


# slurmctld down: slurmrestd says "Unable to find JobId" for any job, with no Slurm error number
_CONTROLLER_DOWN_GET = _Recorded(500, [{"description": "Unable to find JobId=42", "error_number": -1,
                                        "error": "Unspecified error", "source": "slurm_load_job"}])  # fmt: skip
_CONTROLLER_DOWN_DELETE = _Recorded(500, [{
    "description": "unable to kill JobId=42 with signal 9: Unable to contact slurm controller (connect failure)",
    "error_number": 1800, "error": "Unable to contact slurm controller (connect failure)", "source": "slurm_kill_job",
}])  # fmt: skip
_CONTROLLER_DOWN_RELEASE = _Recorded(500, [{"description": "job update from [localhost]:53750 failed",
                                            "error_number": 1000, "error": "Unexpected message received",
                                            "source": "_parse_job_list"}])  # fmt: skip
_UNKNOWN_JOB_GET = _Recorded(500, [{"description": "Unable to find JobId=42", "error_number": 2017,
                                    "error": "Invalid job id specified", "source": "slurm_load_job"}])  # fmt: skip
_UNKNOWN_JOB_DELETE = _Recorded(500, [{"description": "unable to kill JobId=42 with signal 9: Invalid job id specified",
                                       "error_number": 2017, "error": "Invalid job id specified",
                                       "source": "slurm_kill_job"}])  # fmt: skip


def _rest_connector_answering(monkeypatch: pytest.MonkeyPatch, reply: _Recorded):  # type: ignore[no-untyped-def]
    connector = get_connector("slurm", {"mode": "rest", "rest_url": "http://127.0.0.1:9", "rest_user": "nobody",
                                        "rest_token": "t"})  # fmt: skip
    assert isinstance(connector, SlurmConnector)
    monkeypatch.setattr(connector.rest.session, "request", lambda *args, **kwargs: reply)
    return connector


def test_rest_controller_outage_is_retryable_not_a_missing_job(monkeypatch: pytest.MonkeyPatch) -> None:
    # a run whose job is reported missing is marked lost and dispatched again: an outage must not look like that
    connector = _rest_connector_answering(monkeypatch, _CONTROLLER_DOWN_GET)
    with pytest.raises(ConnectorError) as info:
        connector.poll("42")
    assert info.value.retryable is True and "unknown to the cluster" not in str(info.value)
    for reply, call in ((_CONTROLLER_DOWN_DELETE, connector.cancel), (_CONTROLLER_DOWN_RELEASE, connector.rest.release)):
        monkeypatch.setattr(connector.rest.session, "request", lambda *args, reply=reply, **kwargs: reply)
        with pytest.raises(ConnectorError) as info:  # a cancel or release that did not happen is not swallowed
            call("42")
        assert info.value.retryable is True


def test_rest_unknown_job_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    connector = _rest_connector_answering(monkeypatch, _UNKNOWN_JOB_GET)
    with pytest.raises(ConnectorError, match="unknown to the cluster") as info:
        connector.poll("42")
    assert info.value.retryable is False
    monkeypatch.setattr(connector.rest.session, "request", lambda *args, **kwargs: _UNKNOWN_JOB_DELETE)
    connector.cancel("42")  # nothing to cancel


def test_a_failed_sacct_is_retryable_not_a_missing_job(monkeypatch: pytest.MonkeyPatch) -> None:
    # the controller forgot the job (MinJobAge), and the completion log cannot be read right now
    def run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        if args[:3] == ["scontrol", "show", "job"]:
            return subprocess.CompletedProcess(args, 1, "", "slurm_load_jobs error: Invalid job id specified\n")
        if args[0] == "squeue":
            return subprocess.CompletedProcess(args, 0, "", "")
        assert args[0] == "sacct"
        return subprocess.CompletedProcess(args, 1, "", "sacct: error: Opening /var/log/slurm/jobcomp.log: "
                                                        "Permission denied\n")  # fmt: skip

    monkeypatch.setattr(subprocess, "run", run)
    connector = get_connector("slurm", {})
    with pytest.raises(ConnectorError) as info:
        connector.poll("42")
    assert info.value.retryable is True and "unknown to the cluster" not in str(info.value)
    with pytest.raises(ConnectorError) as info:  # "no job with this key" would let the run be failed and run again
        connector.find("gs-run-old")
    assert info.value.retryable is True


def test_a_job_no_source_knows_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    def run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        if args[0] == "scontrol":
            return subprocess.CompletedProcess(args, 1, "", "slurm_load_jobs error: Invalid job id specified\n")
        return subprocess.CompletedProcess(args, 0, "", "")  # squeue and sacct: no such job

    monkeypatch.setattr(subprocess, "run", run)
    connector = get_connector("slurm", {})
    with pytest.raises(ConnectorError, match="unknown to the cluster") as info:
        connector.poll("42")
    assert info.value.retryable is False
    assert connector.find("gs-run-old") is None
