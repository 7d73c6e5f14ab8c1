"""Ray runtime: Ray Jobs through ``JobSubmissionClient``, one job per run, ``submission_id`` = run key.

Hardware types map to Ray custom resources (``entrypoint_resources``), by default the upper-case code
(``h100`` -> ``H100``). Ray has no delayed start: a ``begin_at`` in the future is honoured by a wait in
the entrypoint (the resources are held while it waits) and reported as pending until then. Nor has it a time
limit: the command runs under coreutils ``timeout`` (``time_limit_minutes`` from the end of that wait, then SIGTERM,
and SIGKILL ``KILL_AFTER_S`` later), so a chunk or a run that overruns is stopped as on the other runtimes.

Tenants: every job of a Ray cluster can read every job's ``runtime_env`` (hence its env), entrypoint and logs
through the Jobs API on the dashboard, and all jobs run as the cluster's one OS user; one Ray cluster is one trust
domain. So a cluster is bound to one tenant (config ``tenant``) and refuses the jobs of any other; an unbound cluster
refuses every tenant's job unless ``shared_between_tenants`` says that its tenants accept to see each other's.
"""

from __future__ import annotations

import importlib.util
import math
import shlex
from datetime import UTC, datetime
from typing import Any, ClassVar

from connectors.base import (
    TENANT_SCHEMA,
    Capacity,
    ConfigError,
    ConnectorError,
    EnergyReading,
    JobSpec,
    RunStatus,
    RuntimeState,
    check_tenant,
    estimate_energy,
)

__all__ = ["RayConnector"]

#: Seconds between the SIGTERM at the time limit and the SIGKILL [s].
KILL_AFTER_S = 30
#: Exit status of coreutils ``timeout`` when the time limit stopped the command.
TIMED_OUT = (124, 137)

_STATES = {
    "PENDING": RunStatus.PENDING,
    "RUNNING": RunStatus.RUNNING,
    "SUCCEEDED": RunStatus.SUCCEEDED,
    "FAILED": RunStatus.FAILED,
    "STOPPED": RunStatus.CANCELLED,
}


def _client_class(timeout_s: float):
    """A JobSubmissionClient whose every HTTP request carries ``timeout_s`` (the SDK sets none)."""
    from ray.job_submission import JobSubmissionClient

    class _TimedClient(JobSubmissionClient):
        def _do_request(self, method, endpoint, **kwargs):  # type: ignore[override]
            kwargs.setdefault("timeout", timeout_s)
            return super()._do_request(method, endpoint, **kwargs)

    return _TimedClient


class RayConnector:
    """Jobs on a Ray cluster, addressed by its dashboard (Job Submission) URL."""

    kind: ClassVar[str] = "ray"
    #: every job of a Ray cluster can read every job's runtime_env: an unbound cluster runs tenants' jobs only with
    #: ``shared_between_tenants`` (connectors.registry.accepts_tenant; dispatch skips it otherwise)
    unbound_needs_consent: ClassVar[bool] = True
    config_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["address"],
        "properties": {
            "address": {"type": "string", "description": "dashboard URL, e.g. http://127.0.0.1:8265"},
            "resources": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "default": {},
                "description": "hardware code -> Ray resource name (default: the code upper-cased)",
            },
            "request_num_gpus": {"type": "boolean", "default": False},
            "timeout_s": {"type": "number", "minimum": 0.1, "default": 15.0},
            "tenant": dict(TENANT_SCHEMA),
            "shared_between_tenants": {
                "type": "boolean",
                "default": False,
                "description": "accept jobs of any tenant although each can read the others' env (no tenant set)",
            },
        },
    }

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.timeout_s = float(config["timeout_s"])
        self.resource_of = {hw.lower(): name for hw, name in config["resources"].items()}
        self.hardware_of = {name: hw for hw, name in self.resource_of.items()}
        self._client: Any = None

    @classmethod
    def enabled(cls) -> bool:
        """True when the ``ray`` package (with its job submission SDK) is installed."""
        return importlib.util.find_spec("ray") is not None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._call(
                "connect", lambda: _client_class(self.timeout_s)(self.config["address"])
            )
        return self._client

    def _resource(self, hardware: str) -> str:
        return self.resource_of.get(hardware.lower(), hardware.upper())

    def _call(self, what: str, fn):
        """Run an SDK call, wrapping its errors in ConnectorError."""
        try:
            return fn()
        except ConnectorError:
            raise
        except Exception as exc:
            raise self._wrap(what, exc) from exc

    def _wrap(self, what: str, exc: Exception) -> ConnectorError:
        text = str(exc)
        transient = isinstance(exc, ConnectionError | TimeoutError) or any(
            s in text for s in ("Failed to connect", "timed out", "Connection", "503", "502", "504", "try again later")
        )
        return ConnectorError(f"ray {what}: {text[:300]}", retryable=transient, kind=self.kind)

    # -- protocol ------------------------------------------------------------------------------------------
    def capacity(self) -> Capacity:
        """Resources per hardware type from the nodes' totals, less the GPUs of live jobs submitted here."""
        import requests

        def nodes() -> list[dict[str, Any]]:
            url = self.config["address"].rstrip("/") + "/api/v0/nodes"
            response = requests.get(url, timeout=self.timeout_s)
            response.raise_for_status()
            return response.json()["data"]["result"]["result"]

        total: dict[str, int] = {}
        for node in self._call("nodes", nodes):
            if node.get("state") != "ALIVE":
                continue
            for name, amount in (node.get("resources_total") or {}).items():
                hw = self.hardware_of.get(name) or (
                    name.lower() if name.isupper() and name.isalnum() else None
                )
                if hw and name not in ("CPU", "GPU", "TPU"):
                    total[hw] = total.get(hw, 0) + int(amount)
        used: dict[str, int] = {}
        for job in self._call("list_jobs", self.client.list_jobs):
            if _STATES.get(str(getattr(job.status, "value", job.status))) in (
                RunStatus.PENDING,
                RunStatus.RUNNING,
            ):
                meta = (
                    job.metadata or {}
                )  # JobDetails does not echo entrypoint_resources; submit records them
                if meta.get("gpu_resource"):
                    hw = self.hardware_of.get(meta["gpu_resource"], meta["gpu_resource"].lower())
                    used[hw] = used.get(hw, 0) + int(meta.get("gpu_count", 0))
        return Capacity(
            gpus_total=total, gpus_free={hw: max(0, n - used.get(hw, 0)) for hw, n in total.items()}
        )

    def submit(self, spec: JobSpec) -> str:
        """Submit with ``submission_id=spec.run_key``; an existing job of that id is returned instead."""
        if spec.command is None:
            raise ConfigError(f"run {spec.run_key}: Ray needs a command", field="command", kind=self.kind)
        self.check_tenant(spec)
        if self.find(spec.run_key) is not None:
            return spec.run_key
        limited = (f"exec timeout --kill-after={KILL_AFTER_S} {spec.time_limit_minutes * 60} "
                   f"sh -c {shlex.quote(spec.command)}")  # fmt: skip
        wait_s = math.ceil((spec.begin_at - datetime.now(UTC)).total_seconds()) if spec.begin_at else 0
        entrypoint = f"sleep {wait_s}; {limited}" if wait_s > 0 else limited
        kwargs: dict[str, Any] = {
            "entrypoint": entrypoint,
            "submission_id": spec.run_key,
            "runtime_env": {"env_vars": {**spec.env, "GRIDSHIFT_RUN_KEY": spec.run_key}},
            "metadata": {
                "gridshift_name": spec.name,
                "power_w_per_gpu": f"{spec.power_w_per_gpu:g}",
                "gpu_count": str(spec.gpu_count),
                "gpu_resource": self._resource(spec.hardware) if spec.gpu_count else "",
                "begin_at": spec.begin_at.isoformat() if spec.begin_at else "",
                "time_limit_minutes": str(spec.time_limit_minutes),
            },
        }
        if spec.gpu_count:
            kwargs["entrypoint_resources"] = {self._resource(spec.hardware): float(spec.gpu_count)}
            if self.config["request_num_gpus"]:
                kwargs["entrypoint_num_gpus"] = spec.gpu_count
        try:
            self.client.submit_job(**kwargs)
        except Exception as exc:
            if "already exists" in str(exc) and self.find(spec.run_key) is not None:
                return spec.run_key  # another worker submitted it between our find and submit
            raise self._wrap("submit_job", exc) from exc
        return spec.run_key

    def check_tenant(self, spec: JobSpec) -> None:
        """Refuse a job of a tenant this cluster is not bound to (:class:`ConfigError`); nothing reaches Ray."""
        check_tenant(self.config, spec, self.kind)
        if spec.tenant is not None and not self.config["tenant"] and not self.config["shared_between_tenants"]:
            raise ConfigError(
                f"run {spec.run_key}: this Ray cluster is bound to no tenant, and any of its jobs can read every "
                "job's env through the Jobs API: set config.tenant to the one tenant it serves (or "
                "config.shared_between_tenants to true to accept that)",
                field="config.tenant",
                kind=self.kind,
            )

    def find(self, run_key: str) -> str | None:
        """``run_key`` when Ray knows a job of that submission id, else None."""
        return run_key if self._info(run_key) is not None else None

    def poll(self, runtime_job_id: str) -> RuntimeState:
        """State of a Ray job; a job still waiting for its ``begin_at`` is reported pending."""
        info = self._info(runtime_job_id)
        if info is None:
            raise ConnectorError(f"Ray job {runtime_job_id} does not exist", retryable=False, kind=self.kind)
        status = _STATES.get(str(getattr(info.status, "value", info.status)), RunStatus.UNKNOWN)
        started, finished = _ms(info.start_time), _ms(info.end_time)
        begin = _begin_at(info)
        if begin and started and started < begin:
            started = begin if status is not RunStatus.RUNNING or datetime.now(UTC) >= begin else None
            if status is RunStatus.RUNNING and started is None:
                status = RunStatus.PENDING
        exit_code = getattr(info, "driver_exit_code", None) if status.terminal else None
        message = (info.message or "") if status is not RunStatus.RUNNING else ""
        limit = (info.metadata or {}).get("time_limit_minutes")
        if status is RunStatus.FAILED and exit_code in TIMED_OUT and limit:
            message = f"time limit of {limit} min reached"
        return RuntimeState(
            runtime_job_id=runtime_job_id,
            status=status,
            started_at=started if status is not RunStatus.PENDING else None,
            finished_at=finished if status.terminal else None,
            exit_code=exit_code,
            message=message,
        )

    def cancel(self, runtime_job_id: str) -> None:
        """Stop the Ray job; finished jobs are left as they are."""
        self._call("stop_job", lambda: self.client.stop_job(runtime_job_id))

    def energy(self, runtime_job_id: str) -> EnergyReading | None:
        """Profile estimate (Ray meters no energy): power per GPU x GPUs x run time."""
        state = self.poll(runtime_job_id)
        info = self._info(runtime_job_id)
        meta = (info.metadata or {}) if info is not None else {}
        finished = state.finished_at or (datetime.now(UTC) if state.started_at else None)
        return estimate_energy(float(meta.get("power_w_per_gpu", 0)), int(meta.get("gpu_count", 0)),
                               state.started_at, finished)  # fmt: skip

    def log(self, runtime_job_id: str, max_bytes: int) -> bytes | None:
        """Tail of the job's driver log from the Ray job server."""
        text = self._call("logs", lambda: self.client.get_job_logs(runtime_job_id))
        return None if text is None else str(text).encode()[-max_bytes:]

    def _info(self, submission_id: str) -> Any:
        try:
            return self.client.get_job_info(submission_id)
        except Exception as exc:
            if "does not exist" in str(exc) or "404" in str(exc):
                return None
            raise self._wrap("get_job_info", exc) from exc


def _ms(value: int | None) -> datetime | None:
    return datetime.fromtimestamp(value / 1000, UTC) if value else None


def _begin_at(info: Any) -> datetime | None:
    text = (info.metadata or {}).get("begin_at")
    return datetime.fromisoformat(text) if text else None
