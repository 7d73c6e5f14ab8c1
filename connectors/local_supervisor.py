"""Supervisor of one local run: waits for ``begin_at``, claims GPUs, runs the command, meters energy.

Started by :class:`connectors.local.LocalConnector` as ``python local_supervisor.py RUN_DIR`` in a new
session, so the job's processes share the supervisor's process group and ``killpg`` stops them all. It uses
only the standard library (and nvidia-ml-py when present) so that it runs from its file path alone.

Isolation: the supervisor is started with an environment of its own (no variable of the service) and gets the
job's ``env`` through its stdin, never through argv, its environment or a file. The job's environment is built
from nothing (:func:`job_environment`). When the service runs as root, the job runs as an unprivileged user of a
pool (:mod:`connectors.local_users`), in a private work directory (0700, owned by that user) that is deleted when
the run ends; the run directory (0700, the service's) holds the supervisor's bookkeeping, out of the job's reach.

Files of a run directory (all JSON written atomically by rename):
``spec.json`` (written by submit; never the job's env), ``state.json`` (status, pids, times, exit code, devices,
energy, run user, work dir), ``job.log`` (the command's stdout and stderr), ``cancel`` (marker written by cancel).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

VISIBLE_DEVICES_VAR = {
    "nvidia": "CUDA_VISIBLE_DEVICES",
    "amd": "HIP_VISIBLE_DEVICES",
    "huawei": "ASCEND_RT_VISIBLE_DEVICES",
}
KILL_GRACE_S = 10.0


def utc_now() -> datetime:
    """Current time [UTC]."""
    return datetime.now(UTC)


def read_json(path: Path) -> dict[str, Any] | None:
    """Contents of a JSON file, or None when it does not exist."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write JSON atomically (temp file + rename), so readers never see half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(data, sort_keys=True))
    os.replace(tmp, path)


@contextlib.contextmanager
def locked(path: Path):
    """Hold an exclusive ``flock`` on ``path`` (created if missing)."""
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def pid_alive(pid: int | None, marker: str) -> bool:
    """True when ``pid`` runs and its command line contains ``marker`` (guards against pid reuse)."""
    if not pid:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return marker in cmdline and ") Z " not in stat


class Meter:
    """Energy of a set of NVIDIA GPUs from NVML's total-energy counter [mJ], sampled in a thread."""

    def __init__(self, device_indices: list[int], interval_s: float) -> None:
        self.interval_s = interval_s
        self.energy_j = 0.0
        self.seconds = 0.0
        self._stop = threading.Event()
        self._handles: list[Any] = []
        self._start: float | None = None
        self._t0 = 0.0
        self._nvml: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in device_indices]
            self._nvml = pynvml
            self._start = self._read_mj()
        except Exception:  # no driver (NVMLError_LibraryNotFound), no such device, counter unsupported
            self._handles = []
            self._start = None

    @property
    def active(self) -> bool:
        return self._start is not None and bool(self._handles)

    def _read_mj(self) -> float:
        return float(sum(self._nvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in self._handles))

    def start(self, on_sample) -> None:
        self._t0 = time.monotonic()
        if not self.active:
            return
        self._start = self._read_mj()

        def loop() -> None:
            while not self._stop.wait(self.interval_s):
                self.sample()
                on_sample()

        threading.Thread(target=loop, daemon=True).start()

    def sample(self) -> None:
        if not self.active:
            return
        with contextlib.suppress(Exception):
            assert self._start is not None
            self.energy_j = (self._read_mj() - self._start) / 1000.0
            self.seconds = time.monotonic() - self._t0

    def stop(self) -> None:
        self._stop.set()
        self.sample()


class Supervisor:
    def __init__(self, run_dir: Path, env: dict[str, str] | None = None) -> None:
        self.run_dir = run_dir
        self.state_dir = run_dir.parent.parent
        self.spec: dict[str, Any] = read_json(run_dir / "spec.json") or {}
        self.spec["env"] = dict(env or {})  # the job's own variables come through stdin, never from a file
        self.state: dict[str, Any] = read_json(run_dir / "state.json") or {}
        self.child: subprocess.Popen | None = None
        self.cancelled = threading.Event()
        self._lock = threading.Lock()
        self.user: Any = None  # the pool user held while the job runs (connectors.local_users.RunUser)

    def save(self, **changes: Any) -> None:
        with self._lock:
            self.state.update(changes)
            write_json(self.run_dir / "state.json", self.state)

    def on_term(self, signum: int, frame: Any) -> None:
        self.cancelled.set()
        if self.child is not None and self.child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.child.terminate()

    def cancel_requested(self) -> bool:
        """True once the run is cancelled: by SIGTERM, or by the ``cancel`` marker alone (a canceller that read
        the state before this supervisor recorded its pid writes the marker and sends no signal)."""
        if (self.run_dir / "cancel").exists():
            self.cancelled.set()
        return self.cancelled.is_set()

    def wait_or_cancel(self, seconds: float) -> bool:
        """Wait up to ``seconds``; True when the run was cancelled meanwhile (signal or marker)."""
        return self.cancelled.wait(seconds) or self.cancel_requested()

    def wait_for_begin(self) -> bool:
        begin = self.spec.get("begin_at")
        while begin and utc_now() < datetime.fromisoformat(begin):
            if self.wait_or_cancel(min(1.0, (datetime.fromisoformat(begin) - utc_now()).total_seconds())):
                return False
        return not self.cancel_requested()

    def claim_devices(self) -> list[int] | None:
        """Take ``gpu_count`` free devices of the spec's hardware; None when cancelled while waiting."""
        wanted = int(self.spec["gpu_count"])
        hardware = self.spec["hardware"]
        pool = [int(d) for d in self.spec["devices_of_hardware"]]
        run_key = self.spec["run_key"]
        while True:
            with locked(self.state_dir / "gpus.lock"):
                held = read_json(self.state_dir / "gpus.json") or {}
                held = {k: v for k, v in held.items() if _run_active(self.state_dir, v)}
                free = [d for d in pool if f"{hardware}:{d}" not in held]
                if len(free) >= wanted:
                    chosen = free[:wanted]
                    held.update({f"{hardware}:{d}": run_key for d in chosen})
                    write_json(self.state_dir / "gpus.json", held)
                    return chosen
            self.save(message=f"waiting for {wanted} free {hardware} GPU(s)")
            if self.wait_or_cancel(1.0):
                return None

    def release_devices(self) -> None:
        with locked(self.state_dir / "gpus.lock"):
            held = read_json(self.state_dir / "gpus.json") or {}
            held = {k: v for k, v in held.items() if v != self.spec["run_key"]}
            write_json(self.state_dir / "gpus.json", held)

    def run(self) -> int:
        try:  # exactly one supervisor per run, however many submitters launched one
            os.close(os.open(self.run_dir / "supervisor.claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            return 0
        self.state = read_json(self.run_dir / "state.json") or {}
        signal.signal(signal.SIGTERM, self.on_term)
        signal.signal(signal.SIGINT, self.on_term)
        self.save(supervisor_pid=os.getpid())
        devices: list[int] = []
        try:
            if not self.wait_for_begin():
                return self.finish("cancelled", None, "cancelled before start")
            claimed = self.claim_devices()
            if claimed is None:
                return self.finish("cancelled", None, "cancelled while waiting for GPUs")
            devices = claimed
            return self.execute(devices)
        except _Cancelled as exc:
            return self.finish("cancelled", None, str(exc))
        except Exception as exc:  # report, never leave a run without a final state
            return self.finish("failed", None, f"supervisor error: {exc!r}")
        finally:
            self.clean_up()
            if devices:
                self.release_devices()

    def clean_up(self) -> None:
        """Remove the job's work dir and hand its run user back, scrubbed (nothing of the run stays behind)."""
        users = _users()
        if self.user is not None or self.state.get("run_user") is None:
            users.remove_work_dir(self.state.get("work_dir"))
        if self.user is not None:
            users.release(self.user)
            self.user = None

    def claim_user(self) -> Any:
        """The pool user the job runs as (None: the service's own user); None-with-cancel is reported by raising."""
        if not self.spec.get("run_users_enabled"):
            return None
        users = _users()
        names = users.pool_names(self.spec)
        while True:
            with locked(self.state_dir / "users.lock"):
                user = users.claim(names, Path(self.spec["run_user_lock_dir"]))
            if user is not None:
                self.user = user
                return user
            self.save(message=f"waiting for a free run user (pool of {len(names)})")
            if self.wait_or_cancel(1.0):
                raise _Cancelled("cancelled while waiting for a run user")

    def execute(self, devices: list[int]) -> int:
        users = _users()
        user = self.claim_user()
        if self.cancel_requested():
            raise _Cancelled("cancelled before start")
        work_dir = users.make_work_dir(self.spec["run_key"], self.spec.get("jobs_dir"), user)
        self.save(work_dir=str(work_dir), run_user=user.name if user else None)
        env = job_environment(self.spec, devices, work_dir, user.name if user else None)
        meter = Meter(
            devices if self.spec["vendor"] == "nvidia" else [], float(self.spec["meter_interval_s"])
        )
        as_user: dict[str, Any] = {}
        if user is not None:
            as_user = {"user": user.uid, "group": user.gid, "extra_groups": []}
        with _private_file(self.run_dir / "job.log") as log:
            self.child = subprocess.Popen(
                [self.spec["shell"], "-c", self.spec["command"]],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, cwd=self.spec.get("workdir") or str(work_dir), umask=0o077, **as_user,
            )  # fmt: skip
        self.save(status="running", started_at=utc_now().isoformat(), job_pid=self.child.pid,
                  devices=devices, message="")  # fmt: skip
        meter.start(lambda: self.save(**self.energy_fields(meter)))
        deadline = time.monotonic() + 60.0 * float(self.spec["time_limit_minutes"])
        timed_out = False
        while True:
            try:
                code = self.child.wait(timeout=max(0.01, min(1.0, deadline - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                if self.cancel_requested() or time.monotonic() >= deadline:
                    timed_out = not self.cancelled.is_set()
                    code = self.stop_child()
                    break
        meter.stop()
        self.save(**self.energy_fields(meter))
        if self.cancelled.is_set():
            return self.finish("cancelled", code, "cancelled")
        if timed_out:
            return self.finish("failed", code, f"time limit of {self.spec['time_limit_minutes']} min reached")
        return self.finish(
            "succeeded" if code == 0 else "failed", code, "" if code == 0 else f"exit code {code}"
        )

    def stop_child(self) -> int:
        assert self.child is not None
        self.child.terminate()
        try:
            return self.child.wait(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            self.child.kill()
            return self.child.wait()

    @staticmethod
    def energy_fields(meter: Meter) -> dict[str, Any]:
        if not meter.active:
            return {}
        return {"energy_j": meter.energy_j, "metered_s": meter.seconds, "energy_source": "nvml"}

    def finish(self, status: str, code: int | None, message: str) -> int:
        with contextlib.suppress(Exception):  # before the final state: a finished run has left nothing behind
            self.clean_up()
        self.save(status=status, exit_code=code, finished_at=utc_now().isoformat(), message=message)
        with contextlib.suppress(FileNotFoundError):
            (self.state_dir / "active" / self.spec["run_key"]).unlink()
        return 0


def _run_active(state_dir: Path, run_key: str) -> bool:
    """True while a run still may hold GPUs (its supervisor runs and it has no final state)."""
    run_dir = state_dir / "runs" / run_key
    state = read_json(run_dir / "state.json") or {}
    if state.get("status") in ("succeeded", "failed", "cancelled"):
        return False
    return pid_alive(state.get("supervisor_pid"), str(run_dir))


def job_environment(spec: dict[str, Any], devices: list[int], work_dir: Path, user: str | None) -> dict[str, str]:
    """A job's whole environment, built from nothing: a minimal base (with ``HOME`` and ``TMPDIR`` in its own work
    dir), the cluster's ``base_env``, the job's ``env``, then the run key and the GPU visibility variables (which
    the job cannot override). No variable of the service or of the supervisor is ever passed on."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(work_dir),
           "TMPDIR": str(work_dir), "SHELL": str(spec.get("shell") or "/bin/sh")}  # fmt: skip
    if user:
        env.update(USER=user, LOGNAME=user)
    env.update({str(k): str(v) for k, v in (spec.get("base_env") or {}).items()})
    env.update({str(k): str(v) for k, v in (spec.get("env") or {}).items()})
    env["GRIDSHIFT_RUN_KEY"] = spec["run_key"]
    var = VISIBLE_DEVICES_VAR.get(spec["vendor"])
    if var:
        env[var] = ",".join(str(d) for d in devices)
        if spec["vendor"] == "nvidia":
            env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    return env


class _Cancelled(Exception):
    """The run was cancelled while it waited for something."""


@contextlib.contextmanager
def _private_file(path: Path):
    """``path`` opened for appending, created 0600 (readable by the service alone)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with open(fd, "ab") as handle:
        yield handle


def _users() -> Any:
    """The run-user module, imported from the package or, when run by file path (``python -I``), from beside us."""
    if __package__:
        from connectors import local_users

        return local_users
    module = sys.modules.get("gridshift_local_users")
    if module is None:
        import importlib.util

        loader = importlib.util.spec_from_file_location("gridshift_local_users", Path(__file__).with_name("local_users.py"))
        assert loader is not None and loader.loader is not None
        module = importlib.util.module_from_spec(loader)
        sys.modules["gridshift_local_users"] = module
        loader.loader.exec_module(module)
    return module


def main(argv: list[str]) -> int:
    """Entry point: ``local_supervisor.py RUN_DIR [--detach]``; the job's env arrives as JSON on stdin."""
    run_dir = Path(argv[1]).resolve()
    os.umask(0o077)
    env = json.loads(sys.stdin.read() or "{}")  # read before detaching: the submitter waits for it
    if "--detach" in argv[2:]:
        if os.fork():
            return 0  # the submitter reaps this parent at once; the child lives on in its own session
        os.setsid()
    return Supervisor(run_dir, env).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
