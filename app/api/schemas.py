"""Marshmallow schemas shared by the API blueprints (they generate the OpenAPI document)."""

from __future__ import annotations

from typing import Any

from marshmallow import EXCLUDE, Schema, ValidationError, fields, validate, validates_schema

from app.db import FIRST_YEAR, LAST_YEAR, utcnow
from app.enums import JobState, SeriesKind, WorkloadClass

MIN_GPU_HOURS = 1 / 60
MAX_ENV_VARS = 100
MAX_ENV_BYTES = 64 * 1024
CODE = validate.Regexp(r"^[A-Za-z0-9_.-]{1,32}$", error="letters, digits, '_', '.' or '-' (1-32)")


class Aware(fields.AwareDateTime):
    """ISO-8601 with a UTC offset; a naive timestamp is rejected, not guessed."""

    def __init__(self, **kw):  # type: ignore[no-untyped-def]
        super().__init__(format="iso", default_timezone=None, **kw)

    def _deserialize(self, value, attr, data, **kwargs):  # type: ignore[no-untyped-def]
        out = super()._deserialize(value, attr, data, **kwargs)
        if not FIRST_YEAR <= out.year <= LAST_YEAR:
            raise ValidationError(f"must be a date between the years {FIRST_YEAR} and {LAST_YEAR}")
        return out


class Text(fields.String):
    """A string without NUL characters (PostgreSQL's text cannot hold them; nothing we store needs one)."""

    def _deserialize(self, value, attr, data, **kwargs):  # type: ignore[no-untyped-def]
        out = super()._deserialize(value, attr, data, **kwargs)
        if "\x00" in out:
            raise ValidationError("must not contain NUL characters (\\u0000)")
        return out


class SeriesRangeQuery(Schema):
    """One zone's series of one kind over [from, to): the query of market series and of forecasts."""

    zone = fields.String(required=True, validate=CODE)
    kind = fields.Enum(SeriesKind, by_value=True, required=True)
    from_ = Aware(required=True, data_key="from")
    to = Aware(required=True)


class JobIn(Schema):
    class Meta:
        unknown = EXCLUDE

    name = Text(required=True, validate=validate.Length(1, 200))
    workload_class = fields.Enum(WorkloadClass, by_value=True, load_default=WorkloadClass.TRAINING)
    gpu_count = fields.Integer(required=True, strict=True, validate=validate.Range(min=1, max=100_000))
    # one GPU-minute at least: 1e-300 GPU-hours was accepted and planned as a zero-length job
    reference_gpu_hours = fields.Float(validate=validate.Range(min=MIN_GPU_HOURS, max=1e7), allow_nan=False)
    reference_hardware = fields.String(validate=CODE)
    durations_minutes = fields.Dict(
        keys=fields.String(validate=CODE),
        values=fields.Integer(strict=True, validate=validate.Range(min=1, max=10_000_000)),
    )
    memory_gb_per_gpu = fields.Float(validate=validate.Range(min=0, max=100_000), allow_nan=False, load_default=0.0)
    allowed_regions = fields.List(fields.String(validate=CODE), validate=validate.Length(max=200))
    residency_tag = fields.String(validate=CODE)
    allowed_hardware = fields.List(fields.String(validate=CODE), validate=validate.Length(max=200))
    home_region = fields.String(validate=CODE)
    release_at = Aware()
    deadline_at = Aware(required=True)
    priority = fields.Integer(strict=True, validate=validate.Range(min=-1000, max=1000), load_default=0)
    interruptible = fields.Boolean(load_default=False)
    checkpoint_overhead_minutes = fields.Integer(strict=True, validate=validate.Range(min=0, max=1440), load_default=0)
    min_chunk_minutes = fields.Integer(strict=True, validate=validate.Range(min=1, max=100_000), load_default=60)
    command = Text(validate=validate.Length(max=20_000))
    image = Text(validate=validate.Length(max=500))
    env = fields.Dict(keys=Text(validate=validate.Length(1, 200)), values=Text(validate=validate.Length(max=10_000)),
                      validate=validate.Length(max=MAX_ENV_VARS),
                      metadata={"description": f"at most {MAX_ENV_VARS} variables and {MAX_ENV_BYTES} bytes in all"})
    secret_env = fields.Dict(
        keys=Text(validate=validate.Length(1, 200)), values=Text(validate=validate.Length(max=10_000)), load_only=True,
        validate=validate.Length(max=MAX_ENV_VARS),
        metadata={"description": "variables holding credentials: stored encrypted, given to the job's process only, "
                                 "never returned (answers say has_secret_env)"})

    @validates_schema
    def _work(self, data, **_kw):  # type: ignore[no-untyped-def]
        errors: dict[str, list[str]] = {}
        if ("reference_gpu_hours" in data) == ("durations_minutes" in data and bool(data["durations_minutes"])):
            errors["reference_gpu_hours"] = ["give exactly one of reference_gpu_hours or durations_minutes"]
        if not data.get("command") and not data.get("image"):
            # a job with neither was accepted, planned, and failed at dispatch ("JobSpec needs a command or an image")
            msg = "give a command or an image (or both): a job with neither cannot run"
            errors["command"] = errors["image"] = [msg]
        deadline = data.get("deadline_at")
        if deadline is not None and deadline <= utcnow():
            errors["deadline_at"] = ["is already past: the job could never meet it"]
        for name in ("env", "secret_env"):
            env = data.get(name) or {}
            if sum(len(k) + len(v) for k, v in env.items()) > MAX_ENV_BYTES:
                errors[name] = [f"names and values take more than {MAX_ENV_BYTES} characters in all"]
        if errors:
            raise ValidationError(errors)


class BatchIn(Schema):
    jobs = fields.List(fields.Nested(JobIn), required=True, validate=validate.Length(min=1))


class JobOut(Schema):
    id = fields.Integer()
    tenant_id = fields.Integer(metadata={"description": "the owning tenant (operators list every tenant's jobs)"})
    name = fields.String()
    workload_class = fields.Enum(WorkloadClass, by_value=True)
    gpu_count = fields.Integer()
    reference_gpu_hours = fields.Float(allow_none=True)
    reference_hardware = fields.String(allow_none=True)
    durations_minutes = fields.Dict(keys=fields.String(), values=fields.Integer(), allow_none=True)
    memory_gb_per_gpu = fields.Float()
    allowed_regions = fields.List(fields.String(), allow_none=True)
    residency_tag = fields.String(allow_none=True)
    allowed_hardware = fields.List(fields.String(), allow_none=True)
    home_region = fields.String(allow_none=True)
    release_at = fields.DateTime(format="iso")
    deadline_at = fields.DateTime(format="iso")
    priority = fields.Integer()
    interruptible = fields.Boolean()
    checkpoint_overhead_minutes = fields.Integer()
    min_chunk_minutes = fields.Integer()
    command = fields.String(allow_none=True)
    image = fields.String(allow_none=True)
    env = fields.Dict(keys=fields.String(), values=fields.String())
    has_secret_env = fields.Function(lambda j: j.secret_env_encrypted is not None, metadata={
        "type": "boolean", "description": "the job has secret variables (never shown)"})
    state = fields.Enum(JobState, by_value=True)
    state_reason = fields.String(allow_none=True)
    resume_at = fields.DateTime(
        format="iso", allow_none=True,
        metadata={"description": "state paused: planned start of the next chunk of an interruptible job"},
    )
    batch_id = fields.String(allow_none=True)
    created_at = fields.DateTime(format="iso")


def job_json(job: Any) -> dict[str, Any]:
    """``JobOut().dump(job)``, built directly.

    Job listings are the API's hottest read: dumping a page of 50 jobs field by field through marshmallow cost
    about 8 ms of CPU per request, this about a tenth of it. ``JobOut`` stays the documented schema;
    tests/app/test_jobs_api.py checks that both give the same document for varied jobs.
    """
    durations = job.durations_minutes
    allowed_regions = job.allowed_regions
    allowed_hardware = job.allowed_hardware
    ref_hours = job.reference_gpu_hours
    return {
        "id": job.id,
        "tenant_id": job.tenant_id,
        "name": job.name,
        "workload_class": job.workload_class.value,
        "gpu_count": job.gpu_count,
        "reference_gpu_hours": None if ref_hours is None else float(ref_hours),
        "reference_hardware": job.reference_hardware,
        "durations_minutes": None if durations is None else {str(k): int(v) for k, v in durations.items()},
        "memory_gb_per_gpu": float(job.memory_gb_per_gpu),
        "allowed_regions": None if allowed_regions is None else [str(r) for r in allowed_regions],
        "residency_tag": job.residency_tag,
        "allowed_hardware": None if allowed_hardware is None else [str(h) for h in allowed_hardware],
        "home_region": job.home_region,
        "release_at": job.release_at.isoformat(),
        "deadline_at": job.deadline_at.isoformat(),
        "priority": job.priority,
        "interruptible": bool(job.interruptible),
        "checkpoint_overhead_minutes": job.checkpoint_overhead_minutes,
        "min_chunk_minutes": job.min_chunk_minutes,
        "command": job.command,
        "image": job.image,
        "env": {str(k): str(v) for k, v in (job.env or {}).items()},
        "has_secret_env": job.secret_env_encrypted is not None,
        "state": job.state.value,
        "state_reason": job.state_reason,
        "resume_at": None if job.resume_at is None else job.resume_at.isoformat(),
        "batch_id": job.batch_id,
        "created_at": job.created_at.isoformat(),
    }


class JobPage(Schema):
    items = fields.List(fields.Nested(JobOut))
    next_cursor = fields.String(allow_none=True)
    tenants = fields.Dict(keys=fields.String(), values=fields.String(), metadata={
        "description": "tenant id -> slug of the listed jobs; operators (admin, read-only) only, empty else"})


class BatchOut(Schema):
    batch_id = fields.String()
    count = fields.Integer()
    job_ids = fields.List(fields.Integer())


class JobQuery(Schema):
    class Meta:
        unknown = EXCLUDE

    state = fields.List(fields.Enum(JobState, by_value=True))
    region = fields.String(validate=CODE)
    hardware = fields.String(validate=CODE)
    deadline_from = Aware()
    deadline_to = Aware()
    batch_id = Text(validate=validate.Length(max=64))
    tenant = Text(validate=validate.Length(min=1, max=63), metadata={
        "description": "operators (admin, read-only) only: one tenant's jobs instead of every tenant's"})
    cursor = Text(validate=validate.Length(max=64))
    limit = fields.Integer(validate=validate.Range(min=1, max=500), load_default=100)


class RunOut(Schema):
    """One dispatch attempt: where it went, what the runtime called it, and what it measured."""

    id = fields.Integer()
    attempt = fields.Integer()
    chunk_index = fields.Integer(
        allow_none=True, metadata={"description": "chunk of an interruptible job this run executes, from 0"}
    )
    state = fields.String()
    cluster = fields.Function(lambda r: r.cluster.name if r.cluster is not None else None, allow_none=True)
    runtime_job_id = fields.String(allow_none=True)
    planned_start_at = fields.DateTime(format="iso", allow_none=True)
    submitted_at = fields.DateTime(format="iso", allow_none=True)
    started_at = fields.DateTime(format="iso", allow_none=True)
    finished_at = fields.DateTime(format="iso", allow_none=True)
    exit_code = fields.Integer(allow_none=True)
    error = fields.String(allow_none=True)
    energy_kwh = fields.Float(allow_none=True, metadata={"description": "metered or estimated energy [kWh]"})
    avg_power_w = fields.Float(allow_none=True)
    energy_source = fields.String(allow_none=True, metadata={"description": "nvml, accounting or estimate"})
    cost = fields.Float(allow_none=True)
    carbon_kg = fields.Float(allow_none=True)


class EventOut(Schema):
    at = fields.DateTime(format="iso")
    state = fields.String()
    message = fields.String()
