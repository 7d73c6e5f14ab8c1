"""The one small protocol every cluster runtime speaks, and the values it exchanges.

A connector turns a :class:`JobSpec` into a job on a runtime (local processes, Slurm, Ray, Kubernetes) and
reports back in plain frozen dataclasses; it never hands out SDK objects. ``spec.run_key`` is the idempotency
key: submitting a spec whose run key already exists on the runtime returns that job instead of a second one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar, Protocol, runtime_checkable

__all__ = [
    "Capacity",
    "ClusterConnector",
    "ConfigError",
    "ConnectorError",
    "EnergyReading",
    "EnergySource",
    "JobSpec",
    "RunStatus",
    "RuntimeState",
    "check_tenant",
    "estimate_energy",
    "serves_tenant",
    "vendor_of",
]

#: Run keys become Slurm job names, Ray submission ids and Kubernetes Job names (DNS-1123 labels).
RUN_KEY_PATTERN = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
#: Tenant slugs, as the service accepts them.
TENANT_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")

#: Default vendor of each hardware type code; a cluster's config may extend it (``vendors``).
DEFAULT_VENDORS: Mapping[str, str] = {
    "h200": "nvidia",
    "h100": "nvidia",
    "a100": "nvidia",
    "l40s": "nvidia",
    "l4": "nvidia",
    "v100": "nvidia",
    "mi300x": "amd",
    "mi250x": "amd",
    "mi210": "amd",
    "ascend910b": "huawei",
    "ascend910": "huawei",
}


class RunStatus(StrEnum):
    """State of a job on its runtime."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"

    @property
    def terminal(self) -> bool:
        """True once the job can no longer change state."""
        return self in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)


class EnergySource(StrEnum):
    """Where an energy figure comes from, best first."""

    NVML = "nvml"
    ACCOUNTING = "accounting"
    ESTIMATE = "estimate"


class ConnectorError(RuntimeError):
    """A runtime refused or failed a call.

    Parameters
    ----------
    message : str
        What went wrong, naming the runtime and job where known.
    retryable : bool
        True when the same call may succeed later (daemon down, timeout, HTTP 5xx); False when retrying
        cannot help (bad spec, unknown job, HTTP 4xx).
    kind : str, optional
        The connector kind that raised it.
    """

    def __init__(self, message: str, *, retryable: bool, kind: str | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.kind = kind


class ConfigError(ConnectorError, ValueError):
    """A cluster config or job spec is invalid; ``field`` names the offending entry."""

    def __init__(self, message: str, *, field: str, kind: str | None = None) -> None:
        super().__init__(message, retryable=False, kind=kind)
        self.field = field


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What to run, on which hardware, and from when.

    Attributes
    ----------
    run_key : str
        Idempotency key, our run id (e.g. ``"gs-run-42"``): lowercase letters, digits and ``-``, at most 63.
    name : str
        Human-readable job name.
    command : str or None
        Shell command line to run (``/bin/sh -c``); None only for runtimes that run ``image``'s entrypoint.
    image : str or None
        Container image (Kubernetes); ignored by runtimes without containers.
    env : Mapping[str, str]
        Extra environment variables.
    gpu_count : int
        GPUs wanted [count], >= 0.
    hardware : str
        Hardware type code, e.g. ``"h100"``.
    begin_at : datetime or None
        Earliest start [UTC, timezone-aware]; None means now.
    time_limit_minutes : int
        Wall-clock limit [min], > 0.
    power_w_per_gpu : float
        Profile estimate of the draw of one GPU [W], used when nothing is metered.
    tenant : str or None
        Slug of the tenant that owns the job: its trust domain. A runtime that cannot keep tenants' jobs apart
        refuses a tenant other than the one its cluster is bound to (config ``tenant``); Slurm runs each
        tenant's jobs as that tenant's own user. None for jobs of no tenant (tests, direct use).
    """

    run_key: str
    name: str
    command: str | None
    hardware: str
    gpu_count: int = 1
    image: str | None = None
    env: Mapping[str, str] = field(default_factory=dict, repr=False)  # may hold secrets: never in a repr or log
    begin_at: datetime | None = None
    time_limit_minutes: int = 60
    power_w_per_gpu: float = 0.0
    tenant: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.run_key, str) or not RUN_KEY_PATTERN.match(self.run_key):
            raise ConfigError(
                f"JobSpec.run_key {self.run_key!r} must be 1-63 lowercase letters, digits or '-', "
                "starting and ending with a letter or digit",
                field="run_key",
            )
        if self.command is None and self.image is None:
            raise ConfigError("JobSpec needs a command or an image", field="command")
        if not self.hardware:
            raise ConfigError("JobSpec.hardware must name a hardware type", field="hardware")
        if not isinstance(self.gpu_count, int) or self.gpu_count < 0:
            raise ConfigError(
                f"JobSpec.gpu_count must be an integer >= 0, got {self.gpu_count!r}", field="gpu_count"
            )
        if not isinstance(self.time_limit_minutes, int) or self.time_limit_minutes <= 0:
            raise ConfigError(
                f"JobSpec.time_limit_minutes must be an integer > 0, got {self.time_limit_minutes!r}",
                field="time_limit_minutes",
            )
        if self.power_w_per_gpu < 0:
            raise ConfigError(
                f"JobSpec.power_w_per_gpu must be >= 0, got {self.power_w_per_gpu!r}", field="power_w_per_gpu"
            )
        if self.begin_at is not None and self.begin_at.utcoffset() is None:
            raise ConfigError("JobSpec.begin_at must be timezone-aware (UTC)", field="begin_at")
        for key, value in self.env.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ConfigError(f"JobSpec.env entry {key!r} must map a str to a str", field=f"env.{key}")
        if self.tenant is not None and not (isinstance(self.tenant, str) and TENANT_PATTERN.match(self.tenant)):
            raise ConfigError(f"JobSpec.tenant {self.tenant!r} must be a tenant slug (lowercase letters, digits, '-')",
                              field="tenant")  # fmt: skip


@dataclass(frozen=True, slots=True)
class RuntimeState:
    """A job's state as its runtime reports it.

    Attributes
    ----------
    runtime_job_id : str
        The runtime's id for the job (Slurm job id, Ray submission id, ...).
    status : RunStatus
        Current state.
    started_at, finished_at : datetime or None
        Actual start and end [UTC], when known.
    exit_code : int or None
        Process exit code once finished, when known.
    message : str
        Runtime's own words on the state (reason, error), possibly empty.
    """

    runtime_job_id: str
    status: RunStatus
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    message: str = ""


@dataclass(frozen=True, slots=True)
class Capacity:
    """GPUs of a cluster by hardware type code.

    Attributes
    ----------
    gpus_total : Mapping[str, int]
        Configured GPUs per hardware type [count].
    gpus_free : Mapping[str, int]
        GPUs not allocated to a job right now [count].
    """

    gpus_total: Mapping[str, int]
    gpus_free: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class EnergyReading:
    """Energy one job used.

    Attributes
    ----------
    energy_kwh : float
        Energy over the job's run [kWh].
    avg_power_w : float
        Mean power over the run [W].
    source : EnergySource
        ``nvml`` (metered GPU counters), ``accounting`` (the runtime's accounting) or ``estimate``
        (profile power times run time).
    """

    energy_kwh: float
    avg_power_w: float
    source: EnergySource


@runtime_checkable
class ClusterConnector(Protocol):
    """A cluster runtime. Instances are built by :func:`connectors.registry.get_connector`.

    Every method may raise :class:`ConnectorError`; every outbound call is bounded by a timeout.
    """

    kind: ClassVar[str]
    #: JSON schema of the cluster's config (the subset checked by ``connectors.registry.validate_config``).
    config_schema: ClassVar[dict[str, Any]]

    @classmethod
    def enabled(cls) -> bool:
        """True when the connector's optional SDK or CLI is importable here."""
        ...

    def capacity(self) -> Capacity:
        """GPUs per hardware type, total and free."""
        ...

    def submit(self, spec: JobSpec) -> str:
        """Start ``spec`` (or find the job already started with ``spec.run_key``); return its runtime job id."""
        ...

    def find(self, run_key: str) -> str | None:
        """Runtime job id of the job submitted with ``run_key``, or None."""
        ...

    def poll(self, runtime_job_id: str) -> RuntimeState:
        """Current state of a job."""
        ...

    def cancel(self, runtime_job_id: str) -> None:
        """Stop a job; a finished job is left as it is."""
        ...

    def energy(self, runtime_job_id: str) -> EnergyReading | None:
        """Energy of a finished (or running) job, or None when it never started."""
        ...


@runtime_checkable
class LogSource(Protocol):
    """Optional connector method: the tail of a job's output (stdout and stderr).

    A connector that can read its jobs' output implements it; the API answers "no log" for one that cannot.
    """

    def log(self, runtime_job_id: str, max_bytes: int) -> bytes | None:
        """The last ``max_bytes`` bytes [bytes] of the job's output, or None when it has none (yet)."""
        ...


#: The config entry that binds a cluster to one tenant (any connector kind may declare it in its schema).
TENANT_SCHEMA: Mapping[str, Any] = {
    "type": ["string", "null"],
    "default": None,
    "description": "slug of the one tenant whose jobs this cluster runs (its trust domain); null: any tenant",
}


def serves_tenant(config: Mapping[str, Any], tenant: str | None) -> bool:
    """True when a cluster whose config is ``config`` may run jobs of ``tenant`` (config ``tenant`` unset, or it)."""
    bound = config.get("tenant")
    return not bound or tenant is None or bound == tenant


def check_tenant(config: Mapping[str, Any], spec: JobSpec, kind: str) -> None:
    """Refuse ``spec`` when the cluster is bound to another tenant (:class:`ConfigError`, field ``tenant``)."""
    if not serves_tenant(config, spec.tenant):
        raise ConfigError(
            f"run {spec.run_key}: this {kind} cluster runs only tenant {config['tenant']!r}'s jobs, not "
            f"{spec.tenant!r}'s (config.tenant)",
            field="tenant",
            kind=kind,
        )


def read_tail(path: str | os.PathLike[str], max_bytes: int) -> bytes | None:
    """The last ``max_bytes`` bytes of the file at ``path``, or None when there is no such file."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - max_bytes))
            return f.read(max_bytes)
    except (FileNotFoundError, NotADirectoryError):
        return None


def vendor_of(hardware: str, vendors: Mapping[str, str] | None = None) -> str:
    """Vendor (``nvidia``, ``amd``, ``huawei``) of a hardware type code.

    Parameters
    ----------
    hardware : str
        Hardware type code, e.g. ``"h100"``.
    vendors : Mapping[str, str], optional
        Extra or overriding entries from a cluster config.

    Raises
    ------
    ConfigError
        When the code is unknown; the message lists the known codes.
    """
    table = {**DEFAULT_VENDORS, **(vendors or {})}
    try:
        return table[hardware.lower()]
    except KeyError:
        raise ConfigError(
            f"unknown hardware type {hardware!r}; known: {', '.join(sorted(table))} (add it under 'vendors')",
            field="hardware",
        ) from None


def estimate_energy(
    power_w_per_gpu: float, gpu_count: int, started_at: datetime | None, finished_at: datetime | None
) -> EnergyReading | None:
    """Energy estimated from the profile power and the run time.

    Parameters
    ----------
    power_w_per_gpu : float
        Profile power of one GPU [W].
    gpu_count : int
        GPUs used [count].
    started_at, finished_at : datetime or None
        Actual start and end [UTC]; None for a job that never started.

    Returns
    -------
    EnergyReading or None
        ``source="estimate"``; None when the job has no start time or no end time.
    """
    if started_at is None or finished_at is None:
        return None
    seconds = max(0.0, (finished_at - started_at).total_seconds())
    power_w = power_w_per_gpu * max(gpu_count, 0)
    return EnergyReading(
        energy_kwh=power_w * seconds / 3.6e6, avg_power_w=power_w, source=EnergySource.ESTIMATE
    )
