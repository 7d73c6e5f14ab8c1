"""Start a local Ray head on loopback, on free ports (never 6379, which Redis holds), and stop only it.

``ray start --block`` runs in its own session; terminating that process group stops every Ray process this
head started, so other Ray heads on the machine (another engineer's, a benchmark's) are left alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tests.runtimes.slurm import RuntimeStartError, RuntimeUnavailable, free_port

#: Ray custom resources of the test head, by hardware type code (the connector's default naming).
DEFAULT_RESOURCES = {"h100": 4, "a100": 2}


@dataclass
class RayHead:
    """A running Ray head; ``dashboard_url`` is the Job Submission address."""

    gcs_port: int
    dashboard_port: int
    temp_dir: Path
    resources: dict[str, int]
    proc: subprocess.Popen

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def connector_config(self) -> dict:
        """Config for ``get_connector("ray", ...)`` pointing at this head."""
        return {"address": self.dashboard_url, "resources": {hw: hw.upper() for hw in self.resources}}

    def stop(self) -> None:
        """Terminate the head's process group, then SIGKILL what lingers, and remove its temp dir."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)
        deadline = time.monotonic() + 5  # workers run in process groups of their own, in the head's session
        while time.monotonic() < deadline and _session_pids(self.proc.pid):
            time.sleep(0.1)
        for pid in _session_pids(self.proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def start_ray_head(resources: dict[str, int] | None = None, timeout_s: float = 120.0, attempts: int = 2) -> RayHead:
    """:func:`_start_ray_head`, tried again once when Ray gave up on its own raylet: ``ray start`` waits a fixed 30 s
    for it, which a loaded machine (several test sessions on two cores) can overrun."""
    for attempt in range(attempts):
        try:
            return _start_ray_head(resources, timeout_s)
        except RuntimeStartError as exc:
            if attempt == attempts - 1 or "timed out during startup" not in str(exc):
                raise
    raise AssertionError("unreachable")


def _start_ray_head(resources: dict[str, int] | None = None, timeout_s: float = 120.0) -> RayHead:
    """Start ``ray start --head --block`` with custom resources named by upper-case hardware codes.

    Raises
    ------
    RuntimeUnavailable
        When ray is not installed in this interpreter's environment.
    RuntimeStartError
        When the head does not come up.
    """
    ray_bin = Path(sys.executable).with_name("ray")
    if not ray_bin.exists():
        raise RuntimeUnavailable(f"ray is not installed in {sys.prefix} (`make runtimes` installs it from uv.lock)")
    resources = dict(resources or DEFAULT_RESOURCES)
    temp_dir = Path(tempfile.mkdtemp(prefix="gs-ray-", dir="/tmp"))
    gcs_port, dashboard_port, agent_port = free_port(), free_port(), free_port()
    low = 10000 + (os.getpid() * 37) % 20000  # below Linux's ephemeral range, where free_port() picks
    args = [
        str(ray_bin), "start", "--head", "--block", "--disable-usage-stats",
        f"--port={gcs_port}", "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard_port}", f"--ray-client-server-port={free_port()}",
        f"--dashboard-agent-listen-port={agent_port}", f"--dashboard-agent-grpc-port={free_port()}",
        f"--runtime-env-agent-port={free_port()}", f"--metrics-export-port={free_port()}",
        f"--node-manager-port={free_port()}", f"--object-manager-port={free_port()}",
        f"--min-worker-port={low}", f"--max-worker-port={low + 200}",
        "--num-cpus=2", "--num-gpus=0", f"--temp-dir={temp_dir}", "--object-store-memory=100000000",
        "--include-log-monitor=false",
        "--resources=" + json.dumps({hw.upper(): n for hw, n in resources.items()}),
    ]  # fmt: skip
    env = {  # a Ray cluster is not the service: none of the service's (or the test run's) GRIDSHIFT_* variables
        **{k: v for k, v in os.environ.items() if not k.startswith("GRIDSHIFT_")},
        "RAY_USAGE_STATS_ENABLED": "0",
        "PATH": f"{ray_bin.parent}:{os.environ.get('PATH', '')}",
    }
    log = open(temp_dir / "ray-start.log", "wb")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, env=env)  # fmt: skip
    log.close()
    head = RayHead(gcs_port, dashboard_port, temp_dir, resources, proc)
    deadline = time.monotonic() + timeout_s
    # ready when the Jobs API answers and the head's dashboard agent (which starts the job drivers) does too: on a
    # loaded machine the agent comes up seconds after the API, and a submit before it fails ("No available agent")
    urls = [f"{head.dashboard_url}/api/jobs/", f"http://127.0.0.1:{agent_port}/api/healthz"]
    while time.monotonic() < deadline and urls:
        if proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(urls[0], timeout=2) as response:
                if response.status == 200:
                    urls.pop(0)
                    continue
        except OSError:
            pass
        time.sleep(0.25)
    if not urls:
        return head
    text = (temp_dir / "ray-start.log").read_text(errors="replace")[-1500:]
    head.stop()
    raise RuntimeStartError(f"Ray head did not come up within {timeout_s} s: {text}")


def _session_pids(sid: int) -> list[int]:
    """Live (non-zombie) processes of session ``sid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                found.append(int(entry.name))
    return found
