"""ORM models: persistence only (market data and forecasts: :mod:`app.models.market`). The schema changes only through Alembic migrations (migrations/)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.db import Base, JSONType, utcnow
from app.enums import (
    JobState,
    PlanRunState,
    PlanStatus,
    ProfileSource,
    Role,
    RunState,
    WorkloadClass,
)


def _enum(cls: type, name: str) -> Enum:
    return Enum(cls, name=name, native_enum=False, length=24, values_callable=lambda e: [m.value for m in e])


# market data, forecasts and energy contracts live in app/models/market.py; imported here so that every model is
# ``app.models.<Name>`` and registered with Base's metadata (Alembic, create_all)
from app.models.market import (  # noqa: E402
    EnergyContract,
    ForecastPoint,
    ForecastRun,
    MarketSeries,
    ModelSelection,
)

__all__ = [
    "ApiToken", "Assignment", "AuditEntry", "Cluster", "EnergyContract", "ForecastPoint", "ForecastRun",
    "HardwareType", "IdempotencyKey", "Inventory", "Job", "JobEvent", "JobProfile", "MarketSeries", "ModelSelection",
    "Plan", "PlanRun", "PowerBudgetOverride", "Region", "Run", "Simulation", "Tenant", "TenantPolicy", "UnplannedJob",
    "WebSession",
]


class Tenant(Base):
    __tablename__ = "tenants"
    id: Mapped[int] = mapped_column(primary_key=True)
    slug: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    is_operator: Mapped[bool] = mapped_column(Boolean, default=False)  # may manage the fleet (regions, budgets)
    reporting_currency: Mapped[str] = mapped_column(String(3), default="EUR")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class TenantPolicy(Base):
    """What the operator set for one tenant: its weight in fair share, its quotas and its budgets (migration 0009).

    Budgets hold per ``budget_period`` (calendar month or quarter, UTC) in the reporting currency, kWh and kg CO2eq
    (location-based); quotas cap GPUs of a hardware type at once (``max_gpus``: code -> GPUs), GPU-hours per UTC day
    and per month, and jobs waiting to be planned. None means no cap.
    """

    __tablename__ = "tenant_policies"
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True)
    weight: Mapped[float] = mapped_column(Float, default=1.0)
    max_gpus: Mapped[dict[str, Any]] = mapped_column(default=dict)
    max_gpu_hours_per_day: Mapped[float | None] = mapped_column(Float)
    max_gpu_hours_per_month: Mapped[float | None] = mapped_column(Float)
    max_queued_jobs: Mapped[int | None] = mapped_column(Integer)
    budget_period: Mapped[str] = mapped_column(String(16), default="month")
    cost_budget: Mapped[float | None] = mapped_column(Float)
    energy_budget_kwh: Mapped[float | None] = mapped_column(Float)
    carbon_budget_kg: Mapped[float | None] = mapped_column(Float)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    tenant: Mapped[Tenant] = relationship()


class ApiToken(Base):
    __tablename__ = "api_tokens"
    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    prefix: Mapped[str] = mapped_column(String(16), index=True)  # shown in listings, never the secret
    token_hash: Mapped[str] = mapped_column(String(128), unique=True)  # sha256 of the whole token
    role: Mapped[Role] = mapped_column(_enum(Role, "role"), default=Role.MEMBER)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]
    last_used_at: Mapped[datetime | None]
    tenant: Mapped[Tenant] = relationship()


class WebSession(Base):
    """A dashboard session, server side: the cookie carries its random id; signing out deletes the row."""

    __tablename__ = "web_sessions"
    id: Mapped[int] = mapped_column(primary_key=True)
    sid_hash: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 of the cookie's session id
    token_id: Mapped[int] = mapped_column(ForeignKey("api_tokens.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Region(Base):
    __tablename__ = "regions"
    id: Mapped[int] = mapped_column(primary_key=True)
    code: Mapped[str] = mapped_column(String(32), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    zone: Mapped[str] = mapped_column(String(32), index=True)  # grid bidding zone, e.g. "DE"
    timezone: Mapped[str] = mapped_column(String(64), default="UTC")
    currency: Mapped[str] = mapped_column(String(3), default="EUR")
    pue: Mapped[float] = mapped_column(Float, default=1.2)
    power_budget_kw: Mapped[float] = mapped_column(Float)
    residency_tags: Mapped[list[Any]] = mapped_column(default=list)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    overrides: Mapped[list[PowerBudgetOverride]] = relationship(
        back_populates="region", cascade="all, delete-orphan", order_by="PowerBudgetOverride.start_at"
    )
    inventory: Mapped[list[Inventory]] = relationship(
        back_populates="region", cascade="all, delete-orphan", order_by="Inventory.id"
    )


class PowerBudgetOverride(Base):
    """A time window with a lower (or higher) power budget, e.g. a demand-response curtailment."""

    __tablename__ = "power_budget_overrides"
    id: Mapped[int] = mapped_column(primary_key=True)
    region_id: Mapped[int] = mapped_column(ForeignKey("regions.id", ondelete="CASCADE"), index=True)
    start_at: Mapped[datetime]
    end_at: Mapped[datetime]
    power_kw: Mapped[float] = mapped_column(Float)
    reason: Mapped[str] = mapped_column(String(200), default="")
    region: Mapped[Region] = relationship(back_populates="overrides")


class HardwareType(Base):
    __tablename__ = "hardware_types"
    id: Mapped[int] = mapped_column(primary_key=True)
    code: Mapped[str] = mapped_column(String(32), unique=True)  # e.g. "h100"
    vendor: Mapped[str] = mapped_column(String(32))
    model: Mapped[str] = mapped_column(String(100))
    memory_gb: Mapped[float] = mapped_column(Float)
    memory_bandwidth_gbs: Mapped[float | None] = mapped_column(Float)
    bf16_tflops: Mapped[float | None] = mapped_column(Float)  # dense
    tdp_w: Mapped[float] = mapped_column(Float)
    idle_w: Mapped[float] = mapped_column(Float)
    resource_name: Mapped[str] = mapped_column(String(64), default="nvidia.com/gpu")
    relative_throughput: Mapped[dict[str, Any]] = mapped_column(default=dict)  # workload class -> x reference
    sources: Mapped[dict[str, Any]] = mapped_column(default=dict)  # figure -> {source, estimate: bool}
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Inventory(Base):
    __tablename__ = "inventory"
    __table_args__ = (UniqueConstraint("region_id", "hardware_type_id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    region_id: Mapped[int] = mapped_column(ForeignKey("regions.id", ondelete="CASCADE"))
    hardware_type_id: Mapped[int] = mapped_column(ForeignKey("hardware_types.id", ondelete="RESTRICT"))
    gpu_count: Mapped[int] = mapped_column(Integer)
    region: Mapped[Region] = relationship(back_populates="inventory")
    hardware_type: Mapped[HardwareType] = relationship()


class Cluster(Base):
    __tablename__ = "clusters"
    id: Mapped[int] = mapped_column(primary_key=True)
    region_id: Mapped[int] = mapped_column(ForeignKey("regions.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    kind: Mapped[str] = mapped_column(String(32))  # connector kind: local, slurm, ray, kubernetes
    config: Mapped[dict[str, Any]] = mapped_column(default=dict)
    secrets_encrypted: Mapped[str | None] = mapped_column(Text)  # Fernet token of a JSON object
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    region: Mapped[Region] = relationship()


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_tenant_state", "tenant_id", "state"),
        Index("ix_jobs_tenant_deadline", "tenant_id", "deadline_at"),
    )
    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    batch_id: Mapped[str | None] = mapped_column(String(64), index=True)
    name: Mapped[str] = mapped_column(String(200))
    workload_class: Mapped[WorkloadClass] = mapped_column(_enum(WorkloadClass, "workload_class"))
    gpu_count: Mapped[int] = mapped_column(Integer)
    reference_gpu_hours: Mapped[float | None] = mapped_column(Float)  # work on the reference hardware
    reference_hardware: Mapped[str | None] = mapped_column(String(32))
    durations_minutes: Mapped[dict[str, Any] | None] = mapped_column()  # explicit per-hardware durations
    memory_gb_per_gpu: Mapped[float] = mapped_column(Float, default=0.0)
    allowed_regions: Mapped[list[Any] | None] = mapped_column()
    residency_tag: Mapped[str | None] = mapped_column(String(32))
    allowed_hardware: Mapped[list[Any] | None] = mapped_column()
    home_region: Mapped[str | None] = mapped_column(String(32))  # where it would run "now" (counterfactual)
    release_at: Mapped[datetime]
    deadline_at: Mapped[datetime]
    priority: Mapped[int] = mapped_column(Integer, default=0)
    interruptible: Mapped[bool] = mapped_column(Boolean, default=False)
    checkpoint_overhead_minutes: Mapped[int] = mapped_column(Integer, default=0)
    min_chunk_minutes: Mapped[int] = mapped_column(Integer, default=60)
    command: Mapped[str | None] = mapped_column(Text)
    image: Mapped[str | None] = mapped_column(String(500))
    env: Mapped[dict[str, Any]] = mapped_column(default=dict)
    secret_env_encrypted: Mapped[str | None] = mapped_column(Text)  # Fernet token of the job's secret env (app/crypto)
    state: Mapped[JobState] = mapped_column(_enum(JobState, "job_state"), default=JobState.PENDING)
    state_reason: Mapped[str | None] = mapped_column(Text)
    resume_at: Mapped[datetime | None]  # state paused: planned start of the next chunk
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    events: Mapped[list[JobEvent]] = relationship(
        back_populates="job", cascade="all, delete-orphan", order_by="JobEvent.id"
    )


class JobEvent(Base):
    """The job's state timeline."""

    __tablename__ = "job_events"
    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    at: Mapped[datetime] = mapped_column(default=utcnow)
    state: Mapped[str] = mapped_column(String(24))
    message: Mapped[str] = mapped_column(Text, default="")
    job: Mapped[Job] = relationship(back_populates="events")


class IdempotencyKey(Base):
    __tablename__ = "idempotency_keys"
    __table_args__ = (UniqueConstraint("tenant_id", "key"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(200))
    request_hash: Mapped[str] = mapped_column(String(64))
    status_code: Mapped[int] = mapped_column(Integer)
    response: Mapped[dict[str, Any]] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Plan(Base):
    __tablename__ = "plans"
    id: Mapped[int] = mapped_column(primary_key=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    horizon_start: Mapped[datetime]
    horizon_end: Mapped[datetime]
    slot_minutes: Mapped[int] = mapped_column(Integer)
    objective: Mapped[str] = mapped_column(String(32))
    solver: Mapped[str] = mapped_column(String(32))
    trigger: Mapped[str] = mapped_column(String(32), default="manual")
    status: Mapped[PlanStatus] = mapped_column(_enum(PlanStatus, "plan_status"))
    objective_value: Mapped[float | None] = mapped_column(Float)
    best_bound: Mapped[float | None] = mapped_column(Float)
    gap_pct: Mapped[float | None] = mapped_column(Float)
    is_current: Mapped[bool] = mapped_column(Boolean, default=False, index=True)
    stats: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # set when the retention clean-up deleted the assignment rows of this superseded plan that nothing needs
    pruned_at: Mapped[datetime | None]
    assignments: Mapped[list[Assignment]] = relationship(back_populates="plan", cascade="all, delete-orphan")
    unplanned: Mapped[list[UnplannedJob]] = relationship(cascade="all, delete-orphan")


class PlanRun(Base):
    """A plan someone asked for (``POST /api/v1/plans``), run by a worker; polled until it is done."""

    __tablename__ = "plan_runs"
    id: Mapped[int] = mapped_column(primary_key=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    trigger: Mapped[str] = mapped_column(String(32), default="manual")
    objective: Mapped[str | None] = mapped_column(String(32))  # None: the configured objective
    requested_by: Mapped[str | None] = mapped_column(String(200))
    state: Mapped[PlanRunState] = mapped_column(_enum(PlanRunState, "plan_run_state"), default=PlanRunState.QUEUED)
    phase: Mapped[str] = mapped_column(String(32), default="queued")  # queued, problem, solve, store, done
    progress: Mapped[float] = mapped_column(Float, default=0.0)  # 0..1
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    plan_id: Mapped[int | None] = mapped_column(ForeignKey("plans.id", ondelete="SET NULL"))
    error: Mapped[str | None] = mapped_column(Text)
    summary: Mapped[dict[str, Any] | None] = mapped_column(JSONType)



class Simulation(Base):
    """A what-if replay of a past period an operator asked for (``POST /api/v1/simulations``, migration 0010)."""

    __tablename__ = "simulations"
    id: Mapped[int] = mapped_column(primary_key=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    requested_by: Mapped[str | None] = mapped_column(String(200))
    state: Mapped[PlanRunState] = mapped_column(_enum(PlanRunState, "simulation_state"), default=PlanRunState.QUEUED)
    period_start: Mapped[datetime]
    days: Mapped[int] = mapped_column(Integer)
    days_done: Mapped[int] = mapped_column(Integer, default=0)  # of 2 * days: the current settings, then the scenario
    scenario: Mapped[dict[str, Any]] = mapped_column(JSONType)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    error: Mapped[str | None] = mapped_column(Text)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONType)

class Assignment(Base):
    __tablename__ = "assignments"
    __table_args__ = (Index("ix_assignments_start", "start_at"), Index("ix_assignments_job", "job_id"))
    id: Mapped[int] = mapped_column(primary_key=True)
    plan_id: Mapped[int] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), index=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    region_id: Mapped[int] = mapped_column(ForeignKey("regions.id"))
    hardware_type_id: Mapped[int] = mapped_column(ForeignKey("hardware_types.id"))
    start_at: Mapped[datetime]
    end_at: Mapped[datetime]
    chunks: Mapped[list[Any] | None] = mapped_column()  # [[start_iso, end_iso], ...] for interruptible jobs
    energy_kwh: Mapped[float] = mapped_column(Float)
    cost: Mapped[float] = mapped_column(Float)
    currency: Mapped[str] = mapped_column(String(3), default="EUR")
    carbon_kg: Mapped[float] = mapped_column(Float)
    run_now_energy_kwh: Mapped[float | None] = mapped_column(Float)
    run_now_cost: Mapped[float | None] = mapped_column(Float)
    run_now_carbon_kg: Mapped[float | None] = mapped_column(Float)
    plan: Mapped[Plan] = relationship(back_populates="assignments")
    job: Mapped[Job] = relationship()
    region: Mapped[Region] = relationship()
    hardware_type: Mapped[HardwareType] = relationship()


class UnplannedJob(Base):
    __tablename__ = "unplanned_jobs"
    id: Mapped[int] = mapped_column(primary_key=True)
    plan_id: Mapped[int] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), index=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    reason: Mapped[str] = mapped_column(String(64))
    detail: Mapped[str] = mapped_column(Text, default="")


class Run(Base):
    """One dispatch attempt of a job on a cluster; its id is the runtime's idempotency key."""

    __tablename__ = "runs"
    __table_args__ = (Index("ix_runs_state", "state"), Index("ix_runs_assignment", "assignment_id"))
    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    assignment_id: Mapped[int | None] = mapped_column(ForeignKey("assignments.id", ondelete="SET NULL"))
    cluster_id: Mapped[int | None] = mapped_column(ForeignKey("clusters.id", ondelete="SET NULL"))
    # the hardware the run was placed on; kept when its plan's assignment is pruned (migration 0004)
    hardware_type_id: Mapped[int | None] = mapped_column(ForeignKey("hardware_types.id", ondelete="SET NULL"))
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    chunk_index: Mapped[int | None] = mapped_column(Integer)  # which chunk of a chunked assignment (from 0)
    run_key: Mapped[str] = mapped_column(String(64), unique=True)
    state: Mapped[RunState] = mapped_column(_enum(RunState, "run_state"), default=RunState.DISPATCHING)
    runtime_job_id: Mapped[str | None] = mapped_column(String(128))
    claimed_by: Mapped[str | None] = mapped_column(String(128))
    claimed_at: Mapped[datetime | None]
    planned_start_at: Mapped[datetime | None]
    submitted_at: Mapped[datetime | None]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    exit_code: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    energy_kwh: Mapped[float | None] = mapped_column(Float)
    avg_power_w: Mapped[float | None] = mapped_column(Float)
    energy_source: Mapped[str | None] = mapped_column(String(16))  # nvml | accounting | estimate
    cost: Mapped[float | None] = mapped_column(Float)
    carbon_kg: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    job: Mapped[Job] = relationship()
    cluster: Mapped[Cluster | None] = relationship()
    hardware_type: Mapped[HardwareType | None] = relationship()

    @property
    def hardware_code(self) -> str | None:
        """Code of the hardware the run was placed on, or None for a run stored without it."""
        return self.hardware_type.code if self.hardware_type is not None else None


class JobProfile(Base):
    """Throughput and power of a workload class (or one job) on a hardware type, estimated or measured."""

    __tablename__ = "job_profiles"
    __table_args__ = (Index("ix_job_profiles_key", "workload_class", "hardware_type_id", "job_id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    workload_class: Mapped[str | None] = mapped_column(String(32))
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    hardware_type_id: Mapped[int] = mapped_column(ForeignKey("hardware_types.id", ondelete="CASCADE"))
    relative_throughput: Mapped[float] = mapped_column(Float)  # work per hour relative to the reference [x]
    steps_per_s: Mapped[float | None] = mapped_column(Float)
    power_w: Mapped[float] = mapped_column(Float)  # average draw per GPU [W]
    utilisation: Mapped[float | None] = mapped_column(Float)
    energy_per_step_j: Mapped[float | None] = mapped_column(Float)
    source: Mapped[ProfileSource] = mapped_column(_enum(ProfileSource, "profile_source"))
    method: Mapped[str] = mapped_column(Text, default="")
    measured_at: Mapped[datetime | None]
    deviation_pct: Mapped[float | None] = mapped_column(Float)  # measurement vs previous estimate
    flagged: Mapped[bool] = mapped_column(Boolean, default=False)  # disproved by > 20 %
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    hardware_type: Mapped[HardwareType] = relationship()


class AuditEntry(Base):
    __tablename__ = "audit_log"
    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    tenant_id: Mapped[int | None] = mapped_column(ForeignKey("tenants.id", ondelete="SET NULL"), index=True)
    token_id: Mapped[int | None] = mapped_column(ForeignKey("api_tokens.id", ondelete="SET NULL"))
    actor: Mapped[str] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(64))
    target_type: Mapped[str] = mapped_column(String(64))
    target_id: Mapped[str | None] = mapped_column(String(64))
    details: Mapped[dict[str, Any]] = mapped_column(default=dict)
