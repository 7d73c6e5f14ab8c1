"""Start one-node Slurm clusters on loopback: one cluster per region, GPU GRES of two hardware types.

Each start gets its own munged (private socket and key), so concurrent test sessions never share or stop
each other's daemons. Needs root (mknod of the fake GPU devices, SlurmUser=root) and Debian's slurm-wlm,
munge, slurmrestd and slurm-wlm-jwt-plugin; :func:`ensure_slurm_installed` runs ``.ci/runtimes.sh`` when they
are missing. Facts behind the config: /work/shared/RUNTIME-NOTES.md (Slurm section).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sacct", "scancel", "scontrol", "slurmrestd")
JWT_PLUGIN = Path("/usr/lib/x86_64-linux-gnu/slurm-wlm/auth_jwt.so")
REST_USER = "nobody"


class RuntimeUnavailable(RuntimeError):
    """The runtime cannot be installed here (no apt, not root); the message says why (used as a skip reason)."""


class RuntimeStartError(RuntimeError):
    """The runtime is installed but did not start: a defect to fix, so tests fail rather than skip."""


@dataclass
class SlurmCluster:
    """A running one-node cluster; ``env`` holds the SLURM_CONF its clients need."""

    name: str
    node: str
    base_dir: Path
    ctld_port: int
    slurmd_port: int
    gres: dict[str, int]
    restd_port: int | None = None
    token: str | None = None
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def conf_path(self) -> Path:
        return self.base_dir / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf_path)}

    @property
    def rest_url(self) -> str | None:
        return f"http://127.0.0.1:{self.restd_port}" if self.restd_port else None

    def connector_config(self, mode: str = "cli") -> dict:
        """Config for ``get_connector("slurm", ...)`` pointing at this cluster (``mode`` cli or rest)."""
        config: dict = {
            "mode": mode,
            "slurm_conf": str(self.conf_path),
            "gres_types": {hw: hw for hw in self.gres},
            "workdir": str(self.base_dir / "jobs"),
        }
        if mode == "rest":
            config.update(rest_url=self.rest_url, rest_user=REST_USER, rest_token=self.token)
        return config

    def run(self, *args: str, timeout: float = 10.0) -> str:
        """Run a Slurm client command against this cluster and return its stdout."""
        done = subprocess.run(args, env={**os.environ, **self.env}, capture_output=True, text=True,
                              timeout=timeout, check=True)  # fmt: skip
        return done.stdout


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ensure_slurm_installed() -> None:
    """Install Slurm and munge through .ci/runtimes.sh when missing; raise RuntimeUnavailable if impossible."""
    missing = [b for b in BINARIES if shutil.which(b) is None and not Path(f"/usr/sbin/{b}").exists()]
    if missing or not JWT_PLUGIN.exists():
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            raise RuntimeUnavailable(
                f"Slurm is not installed ({', '.join(missing)}) and apt-get as root is unavailable"
            )
        done = subprocess.run(["bash", str(REPO_ROOT / ".ci" / "runtimes.sh")], capture_output=True, text=True,
                              timeout=600)  # fmt: skip
        missing = [b for b in BINARIES if shutil.which(b) is None and not Path(f"/usr/sbin/{b}").exists()]
        if missing:
            raise RuntimeUnavailable(f"installing Slurm failed: {done.stderr[-500:]}")
    if os.geteuid() != 0:
        raise RuntimeUnavailable(
            "the Slurm test clusters need root (SlurmUser=root, mknod of fake GPU devices)"
        )


def _sbin(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


class SlurmLab:
    """Owner of a private munged and several one-node clusters under one temporary directory.

    Parameters
    ----------
    regions : dict[str, dict[str, int]]
        Cluster name -> GPUs per hardware type, e.g. ``{"gs-eu": {"h100": 4, "a100": 2}}``.
    rest : bool
        Also start slurmrestd (JWT) for each cluster.
    """

    def __init__(self, regions: dict[str, dict[str, int]], rest: bool = True) -> None:
        self.regions = regions
        self.rest = rest
        self.base_dir = Path(tempfile.mkdtemp(prefix="gs-slurm-"))
        self.base_dir.chmod(0o755)
        self.clusters: dict[str, SlurmCluster] = {}
        self.munged_pid: int | None = None
        self._procs: dict[tuple[str, str], subprocess.Popen] = {}

    @property
    def munge_socket(self) -> Path:
        return self.base_dir / "munge" / "munge.socket"

    def start(self) -> dict[str, SlurmCluster]:
        ensure_slurm_installed()
        try:
            self._start_munge()
            for name, gres in self.regions.items():
                self.clusters[name] = self._start_cluster(name, gres)
            for cluster in self.clusters.values():
                self._wait_idle(cluster)
                if self.rest:
                    self._start_rest(cluster)
        except Exception:
            self.stop()
            raise
        return self.clusters

    def stop(self) -> None:
        """Stop every daemon and job process this lab started and remove its directory (about 1-3 s)."""
        for cluster in self.clusters.values():
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                ids = cluster.run("squeue", "-h", "-o", "%i", timeout=5).split()
                if ids:
                    cluster.run("scancel", *ids, timeout=5)
        deadline = time.monotonic() + 3.0
        for cluster in self.clusters.values():
            while time.monotonic() < deadline:
                try:
                    if not cluster.run("squeue", "-h", "-o", "%i", timeout=2).split():
                        break
                except (subprocess.SubprocessError, OSError):
                    break
                time.sleep(0.1)
        daemons = [
            (pid, self._procs.get((c.name, n))) for c in self.clusters.values() for n, pid in c.pids.items()
        ]
        _terminate_all(daemons)
        _terminate_all([(pid, None) for pid in _pids_under(self.base_dir)])  # slurmstepd and job leftovers
        if self.munged_pid:
            _terminate_all([(self.munged_pid, None)])
        shutil.rmtree(self.base_dir, ignore_errors=True)

    # -- daemons -------------------------------------------------------------------------------------------
    def _start_munge(self) -> None:
        munge_dir = self.munge_socket.parent
        munge_dir.mkdir()
        key = munge_dir / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o600)
        munge = pwd.getpwnam("munge")
        for path in (munge_dir, key):
            os.chown(path, munge.pw_uid, munge.pw_gid)
        munge_dir.chmod(0o755)
        subprocess.run(
            ["runuser", "-u", "munge", "--", _sbin("munged"), f"--socket={self.munge_socket}",
             f"--key-file={key}", f"--pid-file={munge_dir / 'munged.pid'}", f"--log-file={munge_dir / 'munged.log'}",
             f"--seed-file={munge_dir / 'munged.seed'}"],
            check=True, capture_output=True, timeout=15,
        )  # fmt: skip
        self.munged_pid = int(_wait_for_file(munge_dir / "munged.pid").read_text())
        _wait_for_file(self.munge_socket)

    def _start_cluster(self, name: str, gres: dict[str, int]) -> SlurmCluster:
        base = self.base_dir / name
        for sub in ("state", "spool", "log", "dev", "jobs"):
            (base / sub).mkdir(parents=True)
        (base / "jobs").chmod(0o1777)  # jobs submitted through slurmrestd run as the REST user
        cluster = SlurmCluster(name=name, node=f"{name}-n1", base_dir=base, ctld_port=free_port(),
                               slurmd_port=free_port(), gres=dict(gres),
                               restd_port=free_port() if self.rest else None)  # fmt: skip
        gres_lines, minor = [], 0
        for hw, count in gres.items():
            for _ in range(count):
                dev = base / "dev" / f"nvidia{minor}"
                os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))  # character device like /dev/null
                gres_lines.append(f"NodeName={cluster.node} Name=gpu Type={hw} File={dev}")
                minor += 1
        (base / "gres.conf").write_text("\n".join(gres_lines) + "\n")
        jwt_key = base / "jwt.key"
        jwt_key.write_bytes(os.urandom(32))
        jwt_key.chmod(0o600)
        node_gres = ",".join(f"gpu:{hw}:{count}" for hw, count in gres.items())
        cluster.conf_path.write_text(f"""\
ClusterName={name}
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={cluster.ctld_port}
SlurmdPort={cluster.slurmd_port}
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key={jwt_key}
StateSaveLocation={base / "state"}
SlurmdSpoolDir={base / "spool"}/%n
SlurmctldPidFile={base / "slurmctld.pid"}
SlurmdPidFile={base / "slurmd.pid"}
SlurmctldLogFile={base / "log" / "slurmctld.log"}
SlurmdLogFile={base / "log" / "slurmd.log"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
JobCompType=jobcomp/filetxt
JobCompLoc={base / "log" / "jobcomp.txt"}
MinJobAge=3600
MaxJobCount=100000
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
MpiDefault=none
NodeName={cluster.node} NodeAddr=127.0.0.1 NodeHostname={cluster.node} CPUs=2 RealMemory=4000 Gres={node_gres} State=UNKNOWN
PartitionName=gpu Nodes={cluster.node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
""")
        env = {**os.environ, **cluster.env}
        subprocess.run([_sbin("slurmctld"), "-i"], env=env, check=True, capture_output=True, timeout=15)
        cluster.pids["slurmctld"] = int(_wait_for_file(base / "slurmctld.pid").read_text())
        subprocess.run(
            [_sbin("slurmd"), "-N", cluster.node], env=env, check=True, capture_output=True, timeout=15
        )
        cluster.pids["slurmd"] = int(_wait_for_file(base / "slurmd.pid").read_text())
        return cluster

    def _wait_idle(self, cluster: SlurmCluster, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        state = ""
        while time.monotonic() < deadline:
            try:
                state = cluster.run("sinfo", "-h", "-N", "-o", "%T").strip()
            except subprocess.SubprocessError:
                state = "controller not answering"
            if state in ("idle", "mixed", "allocated"):
                return
            time.sleep(0.1)
        log = (cluster.base_dir / "log" / "slurmd.log").read_text()[-800:]
        raise RuntimeStartError(f"Slurm node of {cluster.name} not idle after {timeout_s} s ({state}): {log}")

    def _start_rest(self, cluster: SlurmCluster) -> None:
        out = cluster.run("scontrol", "token", f"username={REST_USER}", "lifespan=86400")
        cluster.token = out.strip().split("=", 1)[1]
        env = {**os.environ, **cluster.env, "SLURM_JWT": "daemon"}
        log = open(cluster.base_dir / "log" / "slurmrestd.log", "ab")  # noqa: SIM115 - handed to the daemon
        proc = subprocess.Popen(
            ["runuser", "-u", REST_USER, "--", _sbin("slurmrestd"), "-a", "rest_auth/jwt",
             "-s", "openapi/v0.0.38", f"127.0.0.1:{cluster.restd_port}"],
            env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        log.close()
        cluster.pids["slurmrestd"] = proc.pid
        self._procs[(cluster.name, "slurmrestd")] = proc
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", cluster.restd_port)) == 0:
                    return
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        text = (cluster.base_dir / "log" / "slurmrestd.log").read_text()[-800:]
        raise RuntimeStartError(f"slurmrestd of {cluster.name} did not start: {text}")


def _wait_for_file(path: Path, timeout_s: float = 10.0) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and (path.is_socket() or path.stat().st_size > 0):
            return path
        time.sleep(0.02)
    raise RuntimeStartError(f"{path} did not appear within {timeout_s} s")


def _pids_under(base_dir: Path) -> list[int]:
    """Processes whose working directory lies under ``base_dir`` (slurmstepd and job processes)."""
    found = []
    prefix = str(base_dir) + "/"
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if cwd.startswith(prefix) and not _gone(int(entry.name)):
            found.append(int(entry.name))
    return found


def _gone(pid: int) -> bool:
    try:
        return ") Z " in Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True


def _terminate_all(targets: list[tuple[int, subprocess.Popen | None]], timeout_s: float = 3.0) -> None:
    """SIGTERM processes we started, SIGKILL those that linger; reap the ones that are our children."""
    for pid, _ in targets:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    waiting = list(targets)
    while waiting and time.monotonic() < deadline:
        waiting = [
            (pid, proc) for pid, proc in waiting if not (proc.poll() is not None if proc else _gone(pid))
        ]
        time.sleep(0.02)
    for pid, proc in waiting:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if proc is not None:
            proc.wait(timeout=5)
