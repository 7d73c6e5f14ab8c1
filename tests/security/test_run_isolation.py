"""Run isolation against the real runtimes: a job sees neither the service's secrets nor another tenant's run.

The test process plays the worker: its environment holds the service's secrets (database URL with a password,
broker URL, secret key, encryption keys). A job of tenant bravo then tries what an attacker would: it dumps its
environment, its parent's ``/proc`` entries, the runtime's state directory, every process environment it can read and
alpha's work directory, while alpha's job (holding a secret in its ``env``) runs beside it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from connectors import ClusterConnector, JobSpec, RunStatus, get_connector
from connectors.local import LocalConnector
from connectors.local_supervisor import read_json

SERVICE_SECRETS = {
    "GRIDSHIFT_SECRET_KEY": "svc-secret-key-5f1d0c",
    "GRIDSHIFT_ENCRYPTION_KEYS": "svc-fernet-key-9a7b2e",
    "GRIDSHIFT_DATABASE_URL": "postgresql+psycopg://gridshift:svc-db-password-77c1@127.0.0.1/gridshift",
    "GRIDSHIFT_BROKER_URL": "redis://:svc-broker-password-31aa@127.0.0.1:6379/0",
}
SECRET_WORDS = (
    "svc-secret-key-5f1d0c",
    "svc-fernet-key-9a7b2e",
    "svc-db-password-77c1",
    "svc-broker-password-31aa",
)
ALPHA_SECRET = "alpha-job-secret-4242"


def probe(state_dir: str | None = None) -> str:
    """A shell command that prints everything a curious job can reach."""
    lines = [
        "echo '== env'; env",
        "echo '== parent environ'; tr '\\0' '\\n' < /proc/$PPID/environ 2>&1",
        "echo '== parent cmdline'; tr '\\0' ' ' < /proc/$PPID/cmdline 2>&1; echo",
        "echo '== readable process environments'; for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; done 2>/dev/null",
        "echo '== other work dirs'; for d in /tmp/gridshift-*; do ls $d; cat $d/secret.txt; done 2>&1",
    ]
    if state_dir:
        lines.append(f"echo '== state dir'; grep -ra . {state_dir} 2>&1 | head -c 1000000")
    return "; ".join([*lines, "true"])


def wait(connector: ClusterConnector, job_id: str, timeout_s: float = 60.0) -> RunStatus:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = connector.poll(job_id).status
        if status.terminal:
            return status
        time.sleep(0.2)
    raise AssertionError(f"{job_id} did not finish: {connector.poll(job_id)}")


def section(output: str, name: str) -> str:
    """The lines the probe printed under its ``== name`` heading (a line of its own)."""
    lines = output.splitlines()
    start = len(lines) - 1 - lines[::-1].index(f"== {name}")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("== ")), len(lines))
    return "\n".join(lines[start + 1 : end])


def assert_nothing_leaked(output: str, *, other_tenant: bool = True) -> None:
    assert "== env" in output, output[:2000]  # the probe ran
    for word in SECRET_WORDS:
        assert word not in output, f"the job saw the service's secret {word!r}"
    env_part = section(output, "env")
    service_vars = [line for line in env_part.splitlines() if line.startswith("GRIDSHIFT_")
                    and not line.startswith(("GRIDSHIFT_RUN_KEY=", "GRIDSHIFT_CHUNK_"))]  # fmt: skip
    assert not service_vars, f"service variables in the job's environment: {service_vars}"
    if other_tenant:
        assert ALPHA_SECRET not in output, "bravo's job read alpha's secret"


@pytest.fixture
def service_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's environment, as a deployment sets it."""
    for key, value in SERVICE_SECRETS.items():
        monkeypatch.setenv(key, value)


def test_a_local_job_sees_no_service_secret_and_nothing_of_another_tenants_run(
    tmp_path: Path, service_env: None
) -> None:
    state_dir = tmp_path / "state"
    local = get_connector("local", {"state_dir": str(state_dir), "gpus": {"h100": [0, 1]}})
    assert isinstance(local, LocalConnector)
    alpha = local.submit(JobSpec(run_key="gs-alpha-1", name="alpha", hardware="h100", gpu_count=1,
                                 env={"ALPHA_TOKEN": ALPHA_SECRET},
                                 command='echo "$ALPHA_TOKEN" > secret.txt; echo "$ALPHA_TOKEN"; sleep 4'))  # fmt: skip
    deadline = time.monotonic() + 20
    while local.poll(alpha).status is not RunStatus.RUNNING and time.monotonic() < deadline:
        time.sleep(0.1)
    bravo = local.submit(JobSpec(run_key="gs-bravo-1", name="bravo", hardware="h100", gpu_count=1,
                                 command=probe(str(state_dir))))  # fmt: skip
    assert wait(local, bravo) is RunStatus.SUCCEEDED
    output = local.log_path(bravo).read_text(errors="replace")
    root = os.geteuid() == 0
    assert_nothing_leaked(output, other_tenant=root)
    env_lines = set(section(output, "env").splitlines())
    work = (read_json(local.run_dir(bravo) / "state.json") or {})["work_dir"]
    assert f"TMPDIR={work}" in env_lines and f"HOME={work}" in env_lines
    assert wait(local, alpha) is RunStatus.SUCCEEDED
    assert ALPHA_SECRET in local.log_path(alpha).read_text()  # alpha itself did have its secret
    # nothing of alpha's secret is on disk (its env never is; its log is the service's alone), and its work dir is gone
    for path in state_dir.rglob("*"):
        if path.is_file() and path.name != "job.log":
            assert ALPHA_SECRET not in path.read_text(errors="replace"), path
    alpha_state = read_json(local.run_dir(alpha) / "state.json") or {}
    assert not Path(alpha_state["work_dir"]).exists()
    if not root:
        pytest.skip(
            "not root: jobs run as the service's own user (one trust domain); run users were not tested"
        )
    assert alpha_state["run_user"] != (read_json(local.run_dir(bravo) / "state.json") or {})["run_user"]
    assert (
        "Permission denied" in section(output, "other work dirs")
    )  # alpha's work dir was there, and closed
    assert "Permission denied" in section(output, "state dir")
    for path in (state_dir, local.run_dir(alpha), local.run_dir(bravo)):
        mode = path.stat().st_mode
        assert path.stat().st_uid == 0 and not mode & 0o077, f"{path} is open to run users ({oct(mode)})"


def test_a_local_job_never_runs_as_root_and_its_user_is_scrubbed_after(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the service is not root here: jobs run as its own user, never root")
    local = get_connector("local", {"state_dir": str(tmp_path / "state"), "gpus": {"h100": [0]},
                                    "run_users": None, "run_user_count": 1})  # fmt: skip
    assert isinstance(local, LocalConnector)
    leftover = JobSpec(
        run_key="gs-leftover",
        name="l",
        hardware="h100",
        gpu_count=1,
        command="id -u; echo left > /tmp/gs-leftover-$GRIDSHIFT_RUN_KEY; (setsid sleep 300 &)",
    )
    assert wait(local, local.submit(leftover)) is RunStatus.SUCCEEDED
    assert local.log_path("gs-leftover").read_text().split()[0] != "0"
    assert not Path("/tmp/gs-leftover-gs-leftover").exists()  # files it left in /tmp went with it
    after = JobSpec(
        run_key="gs-after",
        name="a",
        hardware="h100",
        gpu_count=1,
        command="for p in $(pgrep -u $(id -u) sleep); do grep -q '^State:.*Z' /proc/$p/status || "
        "echo alive $p; done; echo 'no sleeper'",
    )
    assert wait(local, local.submit(after)) is RunStatus.SUCCEEDED
    assert (
        local.log_path("gs-after").read_text().strip() == "no sleeper"
    )  # the same pool user, with nothing left running


def test_running_jobs_as_root_is_refused(tmp_path: Path) -> None:
    from connectors import ConfigError

    if os.geteuid() != 0:
        pytest.skip("only root could run jobs as root")
    with pytest.raises(ConfigError) as info:
        get_connector("local", {"state_dir": str(tmp_path), "run_as": "service_user"})
    assert info.value.field == "config.run_as"


# -- Slurm (CLI and slurmrestd) and Ray: the real runtimes started by tests.runtimes.fixtures ----------------------


def _slurm_output(config: dict, run_key: str, job_id: str, timeout_s: float = 10.0) -> str:
    path = Path(config["workdir"]) / f"{run_key}-{job_id}.out"
    deadline = time.monotonic() + timeout_s
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    return path.read_text(errors="replace")


@pytest.mark.slurm
@pytest.mark.parametrize("mode", ["cli", "rest"])
def test_a_slurm_job_sees_no_service_secret(slurm_clusters: dict, service_env: None, mode: str) -> None:
    config = slurm_clusters["gs-eu"].connector_config(mode)
    Path(config["workdir"]).mkdir(parents=True, exist_ok=True)
    slurm = get_connector("slurm", config)
    run_key = f"gs-probe-{mode}-{int(time.time() * 1000) % 10**8}"
    job_id = slurm.submit(JobSpec(run_key=run_key, name="probe", hardware="h100", gpu_count=1,
                                  env={"JOB_OWN": "mine"}, command=probe()))  # fmt: skip
    assert wait(slurm, job_id) is RunStatus.SUCCEEDED
    output = _slurm_output(config, run_key, job_id)
    assert_nothing_leaked(output, other_tenant=False)
    env_part = section(output, "env")
    assert "JOB_OWN=mine" in env_part and f"GRIDSHIFT_RUN_KEY={run_key}" in env_part
    assert "TZ=UTC" not in env_part  # the sbatch process's own environment is not exported to the job


@pytest.mark.ray
@pytest.mark.slow
def test_a_ray_job_sees_no_service_secret(ray_head, service_env: None) -> None:  # type: ignore[no-untyped-def]
    ray = get_connector("ray", ray_head.connector_config())
    run_key = f"gs-probe-ray-{int(time.time() * 1000) % 10**8}"
    job_id = ray.submit(JobSpec(run_key=run_key, name="probe", hardware="h100", gpu_count=1,
                                env={"JOB_OWN": "mine"}, command=probe()))  # fmt: skip
    assert wait(ray, job_id, timeout_s=120) is RunStatus.SUCCEEDED
    output = ray.client.get_job_logs(job_id)  # type: ignore[attr-defined]
    assert_nothing_leaked(output, other_tenant=False)
    assert "JOB_OWN=mine" in section(output, "env")


def test_a_kubernetes_pod_gets_only_the_jobs_variables_and_no_service_account_token(service_env: None) -> None:
    from connectors.kubernetes import build_job

    spec = JobSpec(run_key="gs-k8s-1", name="k", hardware="h100", command="env", env={"JOB_OWN": "mine"})
    manifest = build_job(spec, namespace="ns", image="busybox", resource_name="nvidia.com/gpu", node_selector={},
                         queue=None, hold=False)  # fmt: skip
    pod = manifest["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert {e["name"]: e["value"] for e in container["env"]} == {"JOB_OWN": "mine", "GRIDSHIFT_RUN_KEY": "gs-k8s-1"}
    assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
    assert not any(word in str(manifest) for word in SECRET_WORDS)


# -- tenants sharing one Slurm cluster or one Ray cluster (docs/security.md, "Trust domains") ------------------------


def _alpha_spec(run_key: str, command: str = "sleep 20", tenant: str | None = "alpha") -> JobSpec:
    return JobSpec(run_key=run_key, name="alpha", hardware="h100", gpu_count=1, env={"ALPHA_TOKEN": ALPHA_SECRET},
                   command=command, tenant=tenant)  # fmt: skip


def _slurm_log(slurm: ClusterConnector, job_id: str) -> str:
    text = slurm.log(job_id, 1 << 20)  # type: ignore[attr-defined]
    return (text or b"").decode(errors="replace")


def _wait_running(connector: ClusterConnector, job_id: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while connector.poll(job_id).status is not RunStatus.RUNNING:
        assert time.monotonic() < deadline, f"{job_id} did not start: {connector.poll(job_id)}"
        time.sleep(0.2)


@pytest.mark.slurm
def test_a_slurm_job_cannot_read_another_tenants_script_env_or_output(slurm_clusters: dict) -> None:
    """Each tenant's jobs are submitted as its own user: Slurm refuses bravo alpha's batch script, and alpha's output
    lies in a directory of alpha's user alone. A job of alpha itself does read the script (the probe works)."""
    cluster = slurm_clusters["gs-eu"]
    config = cluster.connector_config("cli")
    slurm = get_connector("slurm", config)
    users = {t: slurm.user_of(t) for t in ("alpha", "bravo")}  # type: ignore[attr-defined]
    assert users["alpha"] and users["bravo"] and users["alpha"] != users["bravo"]
    tail = int(time.time() * 1000) % 10**8
    alpha = slurm.submit(_alpha_spec(f"gs-alpha-s-{tail}", command='echo "out:$ALPHA_TOKEN"; sleep 30'))
    try:
        _wait_running(slurm, alpha)
        deadline = time.monotonic() + 10
        while ALPHA_SECRET not in _slurm_log(slurm, alpha) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ALPHA_SECRET in _slurm_log(slurm, alpha)  # alpha's output (holding its secret) is there to find
        read = (f"id -un; scontrol write batch_script {alpha} - 2>&1; "
                f"for f in {config['workdir']}/*.out {config['workdir']}/*/*.out; do cat $f; done 2>&1; "
                f"grep -ra ALPHA_TOKEN {cluster.base_dir / 'spool'} {cluster.base_dir / 'state'} 2>&1 | head -c 100000; "
                "for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; done 2>/dev/null; true")  # fmt: skip
        bravo = slurm.submit(JobSpec(run_key=f"gs-bravo-s-{tail}", name="b", hardware="h100", gpu_count=0,
                                     command=read, tenant="bravo"))  # fmt: skip
        assert wait(slurm, bravo) is RunStatus.SUCCEEDED
        output = _slurm_log(slurm, bravo)
        assert output.splitlines()[0] == users["bravo"], output[:500]
        assert ALPHA_SECRET not in output, "bravo's job read alpha's secret"
        assert "job script retrieval failed" in output, output[:2000]  # Slurm refused it ("Invalid user id")
        assert "Permission denied" in output, output[:2000]  # and the file system alpha's spool
        same = slurm.submit(JobSpec(run_key=f"gs-alpha2-s-{tail}", name="a2", hardware="h100", gpu_count=0,
                                    command=read, tenant="alpha"))  # fmt: skip
        assert wait(slurm, same) is RunStatus.SUCCEEDED
        assert ALPHA_SECRET in _slurm_log(slurm, same)  # one tenant is one trust domain: the probe does find it
    finally:
        slurm.cancel(alpha)


def test_a_cluster_bound_to_a_tenant_refuses_another_tenants_job_before_any_call() -> None:
    from connectors import ConfigError

    slurm = get_connector("slurm", {"tenant": "alpha", "bin_dir": "/nonexistent"})
    with pytest.raises(ConfigError) as info:
        slurm.submit(JobSpec(run_key="gs-b-1", name="b", hardware="h100", command="true", tenant="bravo"))
    assert info.value.field == "tenant" and "alpha" in str(info.value)


def test_slurm_rest_mode_cannot_run_jobs_as_tenant_users_nor_cli_jobs_as_root() -> None:
    from connectors import ConfigError

    with pytest.raises(ConfigError) as info:
        get_connector("slurm", {"mode": "rest", "rest_url": "http://127.0.0.1:9", "rest_user": "u",
                                "rest_token": "t", "run_as": "tenant"})  # fmt: skip
    assert info.value.field == "config.run_as"
    if os.geteuid() == 0:
        with pytest.raises(ConfigError) as info:
            get_connector("slurm", {"run_as": "service"})
        assert info.value.field == "config.run_as" and "root" in str(info.value)


@pytest.mark.ray
@pytest.mark.slow
def test_a_ray_job_cannot_read_another_tenants_env(ray_head) -> None:  # type: ignore[no-untyped-def]
    """A Ray cluster is bound to one tenant: bravo's job never reaches alpha's cluster, so it cannot read alpha's
    runtime_env through the Jobs API; an unbound cluster takes no tenant's job unless told it is shared."""
    from connectors import ConfigError

    alphas = get_connector("ray", {**ray_head.connector_config(), "tenant": "alpha"})
    tail = int(time.time() * 1000) % 10**8
    alpha = alphas.submit(_alpha_spec(f"gs-alpha-r-{tail}"))
    try:
        read = f"import urllib.request; print(urllib.request.urlopen('{ray_head.dashboard_url}/api/jobs/').read())"
        bravo = JobSpec(run_key=f"gs-bravo-r-{tail}", name="b", hardware="h100", gpu_count=0,
                        command=f"python3 -c \"{read}\"", tenant="bravo")  # fmt: skip
        with pytest.raises(ConfigError) as info:
            alphas.submit(bravo)
        assert info.value.field == "tenant"
        unbound = get_connector("ray", ray_head.connector_config())
        with pytest.raises(ConfigError) as info:
            unbound.submit(bravo)
        assert info.value.field == "config.tenant"
        assert alphas.find(bravo.run_key) is None  # nothing of bravo's ran on the cluster that holds alpha's env
        # alpha's own jobs still run there, and a cluster its tenants agreed to share takes any tenant's job
        assert alphas.find(alpha) == alpha
        shared = get_connector("ray", {**ray_head.connector_config(), "shared_between_tenants": True})
        assert shared.submit(JobSpec(run_key=f"gs-carol-r-{tail}", name="c", hardware="h100", gpu_count=0,
                                     command="true", tenant="carol")) == f"gs-carol-r-{tail}"  # fmt: skip
    finally:
        alphas.cancel(alpha)
