"""Local runtime: jobs run as processes on this host, one supervisor process per run.

Run state lives under ``state_dir`` so that any process (another Celery worker) can find, poll and cancel a
run by its run key: ``runs/<run_key>/`` is created with ``mkdir`` (atomic), which makes ``submit``
idempotent across processes. GPUs are pinned with the vendor's visible-devices variable; energy comes from
NVML's total-energy counter on NVIDIA GPUs, else from the profile power (``spec.power_w_per_gpu``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from connectors import local_supervisor as sup
from connectors.base import (
    Capacity,
    ConfigError,
    ConnectorError,
    EnergyReading,
    EnergySource,
    JobSpec,
    RunStatus,
    RuntimeState,
    estimate_energy,
    read_tail,
    vendor_of,
)

__all__ = ["LocalConnector", "detect_nvidia_gpus"]

#: The supervisor's whole environment: nothing of the service's (the job's env reaches it through stdin).
SUPERVISOR_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "LANG": "C.UTF-8"}
#: A run whose supervisor has not reported within this time is considered lost [s].
START_GRACE_S = 30.0
_NVIDIA_CODES = ("h200", "h100", "a100", "l40s", "l4", "v100", "a10")


def detect_nvidia_gpus() -> dict[str, list[int]]:
    """NVIDIA GPUs of this host by hardware type code, from NVML; empty without a driver.

    Returns
    -------
    dict[str, list[int]]
        e.g. ``{"h200": [0]}``; device indices in NVML (PCI bus) order.
    """
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound without a GPU driver
        return {}
    found: dict[str, list[int]] = {}
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(index))
            name = name.decode() if isinstance(name, bytes) else name
            code = next((c for c in _NVIDIA_CODES if c in name.lower().replace(" ", "")), name.lower())
            found.setdefault(code, []).append(index)
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    return found


class LocalConnector:
    """Runs jobs as local processes (the embedded default's runtime)."""

    kind: ClassVar[str] = "local"
    config_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "state_dir": {"type": "string", "default": "var/local-runtime"},
            "gpus": {
                "type": ["object", "null"],
                "additionalProperties": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                "default": None,
                "description": "device indices per hardware type; null detects NVIDIA GPUs through NVML",
            },
            "vendors": {
                "type": "object",
                "additionalProperties": {"type": "string", "enum": ["nvidia", "amd", "huawei"]},
                "default": {},
            },
            "meter_interval_s": {"type": "number", "minimum": 0.1, "default": 2.0},
            "shell": {"type": "string", "default": "/bin/sh"},
            "workdir": {
                "type": ["string", "null"],
                "default": None,
                "description": "job cwd; null: its private work dir (also its HOME and TMPDIR)",
            },
            "jobs_dir": {
                "type": ["string", "null"],
                "default": None,
                "description": "where private work dirs are made (deleted when the run ends); null: the system temp dir",
            },
            "base_env": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "default": {},
                "description": "variables every job gets (e.g. PATH, LD_LIBRARY_PATH); never the service's own",
            },
            "run_as": {
                "type": "string",
                "enum": ["auto", "pool", "service_user"],
                "default": "auto",
                "description": "pool: jobs run as unprivileged pool users (needs root); service_user: as the "
                "service's user (refused when that is root); auto: pool when the service is root, else service_user",
            },
            "run_users": {
                "type": ["array", "null"],
                "items": {"type": "string"},
                "default": None,
                "description": "names of dedicated run users; null: <run_user_prefix>0..N-1, created with useradd",
            },
            "run_user_prefix": {"type": "string", "default": "gridshift-run-"},
            "run_user_count": {"type": "integer", "minimum": 1, "default": 8},
            "run_user_lock_dir": {"type": "string", "default": "/run/gridshift-run-users"},
        },
    }

    def __init__(self, config: dict[str, Any]) -> None:
        defaults = {k: v["default"] for k, v in self.config_schema["properties"].items() if "default" in v}
        config = self.config = {**defaults, **config}
        self.state_dir = Path(config["state_dir"]).resolve()
        gpus = config["gpus"] if config["gpus"] is not None else detect_nvidia_gpus()
        self.gpus: dict[str, list[int]] = {hw.lower(): list(devs) for hw, devs in gpus.items()}
        self.vendors: dict[str, str] = dict(config["vendors"])
        self.run_users_enabled = _run_users_enabled(config["run_as"])
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):  # a job never reads the bookkeeping of any run
            os.chmod(self.state_dir, 0o700)
        for sub in ("runs", "active"):
            (self.state_dir / sub).mkdir(mode=0o700, exist_ok=True)

    @classmethod
    def enabled(cls) -> bool:
        """Always available: it needs nothing but this host."""
        return True

    def run_dir(self, run_key: str) -> Path:
        """Directory of a run's spec, state and log."""
        return self.state_dir / "runs" / run_key

    def log_path(self, runtime_job_id: str) -> Path:
        """File holding the run's stdout and stderr."""
        return self.run_dir(runtime_job_id) / "job.log"

    def log(self, runtime_job_id: str, max_bytes: int) -> bytes | None:
        """Tail of the run's ``job.log`` (stdout and stderr)."""
        return read_tail(self.log_path(runtime_job_id), max_bytes)

    # -- protocol ------------------------------------------------------------------------------------------
    def capacity(self) -> Capacity:
        """GPUs per hardware type, total and not held by an active run."""
        held = sup.read_json(self.state_dir / "gpus.json") or {}
        busy: dict[str, int] = {}
        for device, run_key in held.items():
            if sup._run_active(self.state_dir, run_key):
                hw = device.split(":", 1)[0]
                busy[hw] = busy.get(hw, 0) + 1
        total = {hw: len(devs) for hw, devs in self.gpus.items()}
        return Capacity(
            gpus_total=total, gpus_free={hw: max(0, n - busy.get(hw, 0)) for hw, n in total.items()}
        )

    def submit(self, spec: JobSpec) -> str:
        """Start a supervisor for ``spec`` unless a run with ``spec.run_key`` exists; return the run key."""
        hardware = spec.hardware.lower()
        vendor = vendor_of(hardware, self.vendors)
        pool = self.gpus.get(hardware, [])
        if spec.gpu_count > len(pool):
            raise ConfigError(
                f"run {spec.run_key}: wants {spec.gpu_count} {hardware} GPU(s), this host has {len(pool)} "
                f"(configured: {', '.join(f'{k}={len(v)}' for k, v in sorted(self.gpus.items())) or 'none'})",
                field="gpu_count",
                kind=self.kind,
            )
        if spec.command is None:
            raise ConfigError(f"run {spec.run_key}: the local runtime needs a command", field="command")
        run_dir = self.run_dir(spec.run_key)
        try:
            run_dir.mkdir(mode=0o700)
        except FileExistsError:  # already submitted, by this or another process
            self._resume(run_dir, spec, vendor, pool)
            return spec.run_key
        try:
            self._write_run(run_dir, spec, vendor, pool)
            self._launch(run_dir, dict(spec.env))
        except OSError as exc:
            raise ConnectorError(f"local run {spec.run_key}: {exc}", retryable=True, kind=self.kind) from exc
        return spec.run_key

    def _resume(self, run_dir: Path, spec: JobSpec, vendor: str, pool: list[int]) -> None:
        """Finish a submission that a crashed submitter left half done (no supervisor ever claimed it).

        Racing resumers are harmless: the supervisor claims ``supervisor.claim`` with O_EXCL, a second exits.
        """
        if (run_dir / "supervisor.claim").exists():
            return
        if sup.read_json(run_dir / "spec.json") is None:
            self._write_run(run_dir, spec, vendor, pool)
        self._launch(run_dir, dict(spec.env))

    def _write_run(self, run_dir: Path, spec: JobSpec, vendor: str, pool: list[int]) -> None:
        record = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.name != "env"}
        record.update(  # never the job's env: the supervisor gets it through its stdin
            hardware=spec.hardware.lower(),
            begin_at=spec.begin_at.isoformat() if spec.begin_at else None,
            vendor=vendor,
            devices_of_hardware=pool,
            meter_interval_s=self.config["meter_interval_s"],
            shell=self.config["shell"],
            workdir=self.config["workdir"],
            jobs_dir=self.config["jobs_dir"],
            base_env=dict(self.config["base_env"]),
            run_users_enabled=self.run_users_enabled,
            run_users=self.config["run_users"],
            run_user_prefix=self.config["run_user_prefix"],
            run_user_count=self.config["run_user_count"],
            run_user_lock_dir=self.config["run_user_lock_dir"],
        )
        sup.write_json(run_dir / "spec.json", record)
        if sup.read_json(run_dir / "state.json") is None:
            sup.write_json(
                run_dir / "state.json", {"status": "pending", "submitted_at": sup.utc_now().isoformat()}
            )
        (self.state_dir / "active" / spec.run_key).touch()

    def find(self, run_key: str) -> str | None:
        """The run key itself when that run exists here, else None."""
        return run_key if self.run_dir(run_key).is_dir() else None

    def poll(self, runtime_job_id: str) -> RuntimeState:
        """State of a run, marking it failed when its supervisor died without a final state."""
        state = self._state(runtime_job_id)
        status = RunStatus(state.get("status", "pending"))
        if not status.terminal and not self._supervisor_alive(runtime_job_id, state):
            state = self._state(runtime_job_id)  # it may have finished in between
            status = RunStatus(state.get("status", "pending"))
            if not status.terminal:
                lost = (
                    "supervisor process lost" if state.get("supervisor_pid") else "supervisor never started"
                )
                if state.get("supervisor_pid"):
                    _kill_leftovers(int(state["supervisor_pid"]), runtime_job_id)
                if state.get("work_dir"):  # its run user is scrubbed by the next run that takes it
                    from connectors import local_users

                    local_users.remove_work_dir(state["work_dir"])
                state.update(status="failed", message=lost, finished_at=sup.utc_now().isoformat())
                sup.write_json(self.run_dir(runtime_job_id) / "state.json", state)
                with contextlib.suppress(FileNotFoundError):
                    (self.state_dir / "active" / runtime_job_id).unlink()
                status = RunStatus.FAILED
        return RuntimeState(
            runtime_job_id=runtime_job_id,
            status=status,
            started_at=_dt(state.get("started_at")),
            finished_at=_dt(state.get("finished_at")),
            exit_code=state.get("exit_code"),
            message=state.get("message", ""),
        )

    def cancel(self, runtime_job_id: str) -> None:
        """Stop a run: its supervisor terminates the job's process group and records ``cancelled``."""
        if RunStatus(self._state(runtime_job_id).get("status", "pending")).terminal:
            return
        (self.run_dir(runtime_job_id) / "cancel").touch()
        # The state read after the marker is written: a supervisor that recorded its pid before this read is
        # signalled; one that records it later finds the marker (it checks after recording its pid).
        pid = self._state(runtime_job_id).get("supervisor_pid")
        if pid and sup.pid_alive(pid, str(self.run_dir(runtime_job_id))):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)

    def energy(self, runtime_job_id: str) -> EnergyReading | None:
        """NVML-metered energy when the run had NVIDIA GPUs, else the profile estimate; None before start."""
        state = self._state(runtime_job_id)
        if state.get("energy_source") == "nvml" and state.get("metered_s"):
            joules = float(state["energy_j"])
            return EnergyReading(joules / 3.6e6, joules / float(state["metered_s"]), EnergySource.NVML)
        spec = sup.read_json(self.run_dir(runtime_job_id) / "spec.json") or {}
        started = _dt(state.get("started_at"))
        finished = _dt(state.get("finished_at")) or (sup.utc_now() if started else None)
        return estimate_energy(
            float(spec.get("power_w_per_gpu", 0.0)), int(spec.get("gpu_count", 0)), started, finished
        )

    # -- helpers -------------------------------------------------------------------------------------------
    def _state(self, runtime_job_id: str) -> dict[str, Any]:
        run_dir = self.run_dir(runtime_job_id)
        state = sup.read_json(run_dir / "state.json")
        if state is None:
            if not run_dir.is_dir():
                raise ConnectorError(
                    f"local run {runtime_job_id!r} does not exist", retryable=False, kind=self.kind
                )
            return {
                "status": "pending",
                "submitted_at": datetime.fromtimestamp(run_dir.stat().st_mtime).isoformat(),
            }
        return state

    def _supervisor_alive(self, run_key: str, state: dict[str, Any]) -> bool:
        pid = state.get("supervisor_pid")
        if pid:
            return sup.pid_alive(pid, str(self.run_dir(run_key)))
        age_s = time.time() - self.run_dir(run_key).stat().st_mtime
        return age_s < START_GRACE_S

    def _launch(self, run_dir: Path, env: dict[str, str] | None = None) -> None:
        """Start the supervisor detached (it forks and calls setsid), and reap the intermediate process.

        The supervisor gets an environment of its own (none of the service's variables: a job can read its
        parent's ``/proc/PID/environ`` when it runs as the same user) and the job's ``env`` through its stdin.
        """
        fd = os.open(run_dir / "supervisor.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with open(fd, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-I", sup.__file__, str(run_dir), "--detach"],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, close_fds=True,
                env=SUPERVISOR_ENV,
            )  # fmt: skip
        try:
            proc.communicate(json.dumps(env or {}).encode(), timeout=10)
        except subprocess.TimeoutExpired as exc:
            proc.kill()
            raise ConnectorError(
                f"local supervisor for {run_dir.name} did not detach", retryable=True
            ) from exc
        if proc.returncode != 0:
            raise ConnectorError(f"local supervisor for {run_dir.name} failed to start", retryable=True)


_warned: list[bool] = []


def _run_users_enabled(run_as: str) -> bool:
    """Whether jobs run as pool users; refuses a setting that would run them as root."""
    root = os.geteuid() == 0
    if run_as == "auto" and not root and not _warned:
        _warned.append(True)
        logging.getLogger(__name__).warning(
            "local runtime: the service is not root, so jobs run as its own user and can read its processes "
            "(/proc/PID/environ) and files; fine for one user, not for several tenants (docs/security.md)")
    if run_as == "pool" and not root:
        raise ConfigError("config.run_as: 'pool' needs the service to run as root (to switch users); use 'auto'",
                          field="config.run_as", kind="local")  # fmt: skip
    if run_as == "service_user" and root:
        raise ConfigError("config.run_as: 'service_user' would run jobs as root; use 'pool' or 'auto'",
                          field="config.run_as", kind="local")  # fmt: skip
    return root


def _kill_leftovers(pgid: int, run_key: str) -> None:
    """SIGKILL the job processes a dead supervisor left in its process group (checked by their run key)."""
    marker = f"GRIDSHIFT_RUN_KEY={run_key}\0".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) == pgid and marker in (entry / "environ").read_bytes():
                os.kill(int(entry.name), signal.SIGKILL)
        except OSError:
            continue


def _dt(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None
