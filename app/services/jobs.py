"""Submitting, listing and cancelling jobs. A batch is validated whole and stored whole, or not at all."""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import insert, literal, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, joinedload

from app import crypto
from app.db import is_postgresql, utcnow
from app.enums import TERMINAL_JOB_STATES, JobState
from app.errors import MAX_ERRORS, Conflict, FieldError, NotFound, ValidationFailed
from app.models import Assignment, HardwareType, IdempotencyKey, Job, JobEvent, Region, Run, Tenant
from app.services import audit
from app.services.assignments import current_plan_id
from app.services.auth import Principal
from app.services.fleet import FleetSnapshot, snapshot
from app.services.job_states import set_state
from app.services.job_values import JobValues, minutes_on, normalise
from app.services.pages import decode_cursor, encode_cursor


@dataclass(frozen=True, slots=True)
class Eligibility:
    """Where and on what a job can run, and how long it takes there [minutes]."""

    regions: tuple[str, ...]
    durations_minutes: dict[str, int]  # hardware code -> duration


def check_job(fields: dict[str, Any], fleet: FleetSnapshot, *, prefix: str = "") -> tuple[Eligibility | None, list[FieldError]]:
    """Validate one job against the fleet; returns its eligibility or the errors, each naming its field."""
    errs: list[FieldError] = []

    def err(name: str, msg: str) -> None:
        errs.append(FieldError(prefix + name, msg))

    if fields.get("gpu_count", 0) <= 0:
        err("gpu_count", "must be a positive integer")
    has_ref = fields.get("reference_gpu_hours") is not None
    has_explicit = bool(fields.get("durations_minutes"))
    if has_ref == has_explicit:
        err("reference_gpu_hours", "give exactly one of reference_gpu_hours or durations_minutes")
    if has_ref and not fields["reference_gpu_hours"] > 0:
        err("reference_gpu_hours", "must be positive")
    for hw, minutes in (fields.get("durations_minutes") or {}).items():
        if hw not in fleet.hardware:
            err(f"durations_minutes.{hw}", f"unknown hardware type (known: {', '.join(sorted(fleet.hardware))})")
        elif not minutes or minutes <= 0:
            err(f"durations_minutes.{hw}", "must be positive")
    ref = fields.get("reference_hardware")
    if ref and ref not in fleet.hardware:
        err("reference_hardware", f"unknown hardware type (known: {', '.join(sorted(fleet.hardware))})")
    for name, known, what in (
        ("allowed_regions", fleet.regions, "region"),
        ("allowed_hardware", fleet.hardware, "hardware type"),
    ):
        for i, code in enumerate(fields.get(name) or []):
            if code not in known:
                err(f"{name}[{i}]", f"unknown {what} {code!r} (known: {', '.join(sorted(known))})")
    home = fields.get("home_region")
    if home and home not in fleet.regions:
        err("home_region", f"unknown region {home!r} (known: {', '.join(sorted(fleet.regions))})")
    release, deadline = fields.get("release_at"), fields.get("deadline_at")
    for name, value in (("release_at", release), ("deadline_at", deadline)):
        if value is None:
            err(name, "required")
    if release is not None and deadline is not None and deadline <= release:
        err("deadline_at", "must be after release_at")
    if fields.get("checkpoint_overhead_minutes", 0) < 0:
        err("checkpoint_overhead_minutes", "must not be negative")
    if errs:
        return None, errs

    regions = [c for c in (fields.get("allowed_regions") or fleet.regions)]
    tag = fields.get("residency_tag")
    if tag:
        regions = [c for c in regions if tag in fleet.regions[c].residency_tags]
        if not regions:
            err("residency_tag", f"no allowed region carries residency tag {tag!r}")
            return None, errs
    hw_allowed = set(fields.get("allowed_hardware") or fleet.hardware)
    if has_explicit:
        hw_allowed &= set(fields["durations_minutes"])
        if not hw_allowed:
            err("allowed_hardware", f"no allowed hardware type ({', '.join(sorted(fields.get('allowed_hardware') or ()))}) "
                f"has a duration in durations_minutes ({', '.join(sorted(fields['durations_minutes']))}): the lists "
                "do not overlap")
            return None, errs
    mem = float(fields.get("memory_gb_per_gpu") or 0.0)
    fits = {hw for hw in hw_allowed if fleet.hardware[hw].memory_gb >= mem}
    if not fits:
        best = max((fleet.hardware[h].memory_gb for h in hw_allowed), default=0)
        err("memory_gb_per_gpu", f"{mem:g} GB per GPU exceeds every allowed hardware type (largest: {best:g} GB)")
        return None, errs
    gpus = fields["gpu_count"]
    placeable = {hw for hw in fits if any(fleet.regions[r].inventory.get(hw, 0) >= gpus for r in regions)}
    if not placeable:
        err("gpu_count", f"no allowed region has {gpus} GPUs of an allowed hardware type ({', '.join(sorted(fits))})")
        return None, errs
    durations = {hw: d for hw, d in minutes_on(fields, fleet).items() if hw in placeable}
    assert release is not None and deadline is not None  # checked above
    window = (deadline - release).total_seconds() / 60.0
    if min(durations.values()) > window:
        fastest = min(durations, key=durations.__getitem__)
        err(
            "deadline_at",
            f"window of {window:.0f} min is shorter than the job's {durations[fastest]} min on its fastest "
            f"allowed hardware ({fastest})",
        )
        return None, errs
    if fields.get("interruptible") and fields.get("min_chunk_minutes", 60) <= 0:
        err("min_chunk_minutes", "must be positive")
        return None, errs
    usable_regions = tuple(r for r in regions if any(fleet.regions[r].inventory.get(hw, 0) >= gpus for hw in durations))
    return Eligibility(usable_regions, durations), []


def validate_batch(
    items: Sequence[dict[str, Any]], fleet: FleetSnapshot, now: datetime, *, prefix: str = "jobs"
) -> list[JobValues]:
    """Normalise and check every item; raises ValidationFailed listing the first ``MAX_ERRORS`` bad fields and
    counting all of them (the answer's size does not grow with the batch)."""
    rows: list[dict[str, Any]] = []
    errors: list[FieldError] = []
    count = bad = 0
    for i, item in enumerate(items):
        row = normalise(item, now)
        _elig, errs = check_job(row, fleet, prefix=f"{prefix}[{i}]." if prefix else "")
        if errs:
            bad += 1
            count += len(errs)
            errors.extend(errs[: MAX_ERRORS - len(errors)])
        rows.append(row)
    if errors:
        raise ValidationFailed(f"{bad} of {len(items)} jobs are invalid; nothing was stored", errors,
                               error_count=count)
    return [JobValues.from_fields(row) for row in rows]


def submit_jobs(
    session: Session,
    principal: Principal,
    items: Sequence[dict[str, Any]],
    *,
    now: datetime | None = None,
    prefix: str = "jobs",
    keys: tuple[str, ...] = (),
) -> tuple[str, list[int]]:
    """Store a whole batch in one transaction; returns (batch id, job ids in input order). A job's ``secret_env`` is
    stored encrypted with the newest of ``keys`` (app/crypto.py), never in clear."""
    now = now or utcnow()
    rows = [values.as_row() for values in validate_batch(items, snapshot(session), now, prefix=prefix)]
    batch_id = uuid.uuid4().hex
    for row, item in zip(rows, items, strict=True):
        secret_env = item.get("secret_env") or None
        row.update(tenant_id=principal.tenant_id, batch_id=batch_id, state=JobState.PENDING,
                   created_at=now, updated_at=now,
                   secret_env_encrypted=crypto.encrypt_json(keys, secret_env) if secret_env else None)  # fmt: skip
    ids = _insert_jobs(session, rows)
    # one "submitted" event per job of the batch, written by the database in one statement
    events = JobEvent.__table__.c
    session.execute(insert(JobEvent).from_select(
        ["job_id", "at", "state", "message"],
        select(Job.id, literal(now, events.at.type), literal(JobState.PENDING.value, events.state.type),
               literal("submitted", events.message.type)).where(Job.batch_id == batch_id),
    ))
    audit.record(session, principal, "jobs.submit", "batch", batch_id, count=len(ids))
    return batch_id, ids


def _insert_jobs(session: Session, rows: list[dict[str, Any]]) -> list[int]:
    """Insert the rows; returns their ids in input order (ascending, so newest-first listing keeps input order).

    On PostgreSQL the ids are drawn from the sequence first and the rows go in with a plain executemany (psycopg
    pipelines it): 4x faster for a 10,000-job batch than INSERT ... RETURNING over multi-row VALUES, whose huge
    statements psycopg re-parses on every page (bench/api_bench.py --profile).
    """
    if is_postgresql(session):
        ids = sorted(session.scalars(
            text("SELECT nextval(pg_get_serial_sequence('jobs', 'id')) FROM generate_series(1, :n)"), {"n": len(rows)}
        ))
        for row, job_id in zip(rows, ids, strict=True):
            row["id"] = job_id
        session.execute(insert(Job), rows)
        return ids
    return list(session.scalars(insert(Job).returning(Job.id, sort_by_parameter_order=True), rows))


def request_hash(payload: Any, key: str | bytes = b"") -> str:
    """Fingerprint of a request body for Idempotency-Key: an HMAC under the service's secret key, since the body
    may hold secrets (``secret_env``) and a plain hash of a short secret can be guessed from the database."""
    raw = key.encode() if isinstance(key, str) else key
    body = json.dumps(payload, sort_keys=True, default=str).encode()
    return hmac.new(raw, body, hashlib.sha256).hexdigest()


def find_idempotent(session: Session, tenant_id: int, key: str, payload_hash: str) -> IdempotencyKey | None:
    row = session.scalar(select(IdempotencyKey).where(IdempotencyKey.tenant_id == tenant_id, IdempotencyKey.key == key))
    if row is not None and row.request_hash != payload_hash:
        raise Conflict("Idempotency-Key was already used with a different request body",
                       [FieldError("Idempotency-Key", "reused with a different body")])
    return row


def remember_idempotent(
    session: Session, tenant_id: int, key: str, payload_hash: str, status: int, response: dict[str, Any]
) -> None:
    session.add(IdempotencyKey(tenant_id=tenant_id, key=key, request_hash=payload_hash,
                               status_code=status, response=response))
    try:
        session.flush()
    except IntegrityError as exc:  # a concurrent retry won the race: let the caller roll back and replay
        raise Conflict("a request with this Idempotency-Key is being processed; retry") from exc


def get_job(session: Session, principal: Principal, job_id: int) -> Job:
    """A tenant sees only its own jobs: any other id is simply not found. Operators (admin, read-only) see every
    tenant's."""
    job = session.get(Job, job_id) if 0 < job_id < 2**31 else None  # ids are 32-bit in the database
    if job is None or not principal.can_see(job.tenant_id):
        raise NotFound(f"job {job_id}")
    return job


def list_runs(session: Session, principal: Principal, job_id: int) -> list[Run]:
    """A job's runs (dispatch attempts), oldest first; another tenant's job is not found."""
    get_job(session, principal, job_id)
    return list(session.scalars(
        select(Run).options(joinedload(Run.cluster)).where(Run.job_id == job_id).order_by(Run.attempt, Run.id)
    ))


def cancel_job(session: Session, principal: Principal, job_id: int) -> Job:
    job = get_job(session, principal, job_id)
    if job.tenant_id != principal.tenant_id and not principal.is_fleet_admin:
        raise NotFound(f"job {job_id}")  # a read-only operator reads other tenants' jobs, never changes them
    if job.state in TERMINAL_JOB_STATES:
        raise Conflict(f"job {job_id} is already {job.state.value}", [FieldError("state", job.state.value)])
    set_state(session, job, JobState.CANCELLED, f"cancelled by {principal.actor}")
    audit.record(session, principal, "job.cancel", "job", job_id)
    return job


@dataclass(frozen=True, slots=True)
class JobFilter:
    state: Sequence[str] = ()
    region: str | None = None
    hardware: str | None = None
    deadline_from: datetime | None = None
    deadline_to: datetime | None = None
    batch_id: str | None = None
    tenant: str | None = None  # a slug; operators only


def list_jobs(
    session: Session, principal: Principal, flt: JobFilter, *, limit: int, cursor: str | None = None
) -> tuple[list[Job], str | None]:
    """Jobs of the caller's tenant (an operator's: every tenant's, or ``flt.tenant``'s), newest first, with a cursor
    to the next page."""
    q = select(Job)
    if not principal.sees_fleet:
        if flt.tenant is not None and flt.tenant != principal.tenant_slug:
            raise NotFound(f"tenant {flt.tenant!r}")
        q = q.where(Job.tenant_id == principal.tenant_id)
    elif flt.tenant is not None:
        tid = session.scalar(select(Tenant.id).where(Tenant.slug == flt.tenant))
        if tid is None:
            raise ValidationFailed("unknown tenant", [FieldError("tenant", f"unknown tenant {flt.tenant!r}")])
        q = q.where(Job.tenant_id == tid)
    if flt.state:
        q = q.where(Job.state.in_([JobState(s) for s in flt.state]))
    if flt.deadline_from:
        q = q.where(Job.deadline_at >= flt.deadline_from)
    if flt.deadline_to:
        q = q.where(Job.deadline_at < flt.deadline_to)
    if flt.batch_id:
        q = q.where(Job.batch_id == flt.batch_id)
    if flt.region or flt.hardware:
        sub = select(Assignment.job_id).where(Assignment.plan_id == current_plan_id(session))
        if flt.region:
            sub = sub.join(Region, Region.id == Assignment.region_id).where(Region.code == flt.region)
        if flt.hardware:
            sub = sub.join(HardwareType, HardwareType.id == Assignment.hardware_type_id).where(
                HardwareType.code == flt.hardware
            )
        q = q.where(Job.id.in_(sub))
    if cursor:
        q = q.where(Job.id < decode_cursor(cursor))
    jobs = list(session.scalars(q.order_by(Job.id.desc()).limit(limit + 1)))
    nxt = encode_cursor(jobs[limit - 1].id) if len(jobs) > limit else None
    return jobs[:limit], nxt


def tenant_slugs(session: Session, principal: Principal, jobs: Sequence[Job]) -> dict[str, str]:
    """Slugs of the tenants owning ``jobs`` (by id, as text), for an operator's listing; empty for a tenant."""
    ids = {j.tenant_id for j in jobs}
    if not principal.sees_fleet or not ids:
        return {}
    return {str(i): slug for i, slug in session.execute(select(Tenant.id, Tenant.slug).where(Tenant.id.in_(ids)))}


def window(job: Job) -> timedelta:
    return job.deadline_at - job.release_at
