"""Jobs: submit one or a batch (all-or-nothing, idempotent), list with filters and cursors, get, cancel."""

from __future__ import annotations

from typing import Any

from flask import Response, jsonify, request
from flask_smorest import Blueprint

from app import extensions
from app.api import principal
from app.api.access import writer
from app.api.schemas import BatchIn, BatchOut, EventOut, JobIn, JobOut, JobPage, JobQuery, RunOut, job_json
from app.errors import FieldError, ValidationFailed
from app.services import jobs as svc

blp = Blueprint("jobs", __name__, url_prefix="/api/v1/jobs", description="Deferrable GPU jobs")


@blp.route("", methods=["POST"])
@blp.arguments(JobIn)
@blp.response(201, JobOut)
def submit(data: dict[str, Any]) -> Any:
    """Submit one job."""
    p = writer()
    db = extensions.db_session()
    _batch, ids = svc.submit_jobs(db, p, [data], prefix="", slot_minutes=extensions.settings().slot_minutes)
    db.commit()
    return svc.get_job(db, p, ids[0])


@blp.route("/batch", methods=["POST"])
@blp.arguments(BatchIn)
@blp.response(201, BatchOut)
@blp.doc(parameters=[{"in": "header", "name": "Idempotency-Key", "schema": {"type": "string", "maxLength": 200}}])
def submit_batch(data: dict[str, Any]) -> Any:
    """Submit up to the configured maximum (default 10,000) jobs; all are stored or none."""
    p = writer()
    settings = extensions.settings()
    if len(data["jobs"]) > settings.max_batch_jobs:
        raise ValidationFailed(
            "batch too large", [FieldError("jobs", f"at most {settings.max_batch_jobs} jobs per request")]
        )
    db = extensions.db_session()
    key = request.headers.get("Idempotency-Key")
    digest = svc.request_hash(request.get_json(silent=True)) if key else ""
    if key:
        if len(key) > 200:
            raise ValidationFailed("bad header", [FieldError("Idempotency-Key", "at most 200 characters")])
        seen = svc.find_idempotent(db, p.tenant_id, key, digest)
        if seen is not None:
            return seen.response, seen.status_code
    batch_id, ids = svc.submit_jobs(db, p, data["jobs"], slot_minutes=settings.slot_minutes)
    body = {"batch_id": batch_id, "count": len(ids), "job_ids": ids}
    if key:
        svc.remember_idempotent(db, p.tenant_id, key, digest, 201, body)
    db.commit()
    return body


@blp.route("", methods=["GET"])
@blp.arguments(JobQuery, location="query")
@blp.response(200, JobPage)
def list_jobs(q: dict[str, Any]) -> Any:
    """The caller's jobs, newest first; follow ``next_cursor`` for the next page."""
    flt = svc.JobFilter(
        state=[s.value for s in q.get("state", [])],
        region=q.get("region"),
        hardware=q.get("hardware"),
        deadline_from=q.get("deadline_from"),
        deadline_to=q.get("deadline_to"),
        batch_id=q.get("batch_id"),
    )
    items, nxt = svc.list_jobs(extensions.db_session(), principal(), flt, limit=q["limit"], cursor=q.get("cursor"))
    return jsonify({"items": [job_json(j) for j in items], "next_cursor": nxt})


@blp.route("/<int:job_id>", methods=["GET"])
@blp.response(200, JobOut)
def get(job_id: int) -> Response:
    """One job of the caller's tenant (404 for any other)."""
    return jsonify(job_json(svc.get_job(extensions.db_session(), principal(), job_id)))


@blp.route("/<int:job_id>/events", methods=["GET"])
@blp.response(200, EventOut(many=True))
def events(job_id: int) -> Any:
    """The job's state timeline."""
    return svc.get_job(extensions.db_session(), principal(), job_id).events


@blp.route("/<int:job_id>/runs", methods=["GET"])
@blp.response(200, RunOut(many=True))
def runs(job_id: int) -> Any:
    """The job's dispatch attempts, oldest first: cluster, runtime id, times, exit code, energy, cost and CO2."""
    return svc.list_runs(extensions.db_session(), principal(), job_id)


@blp.route("/<int:job_id>/cancel", methods=["POST"])
@blp.response(200, JobOut)
def cancel(job_id: int) -> Any:
    """Cancel a job that has not finished; a running run is stopped by the next status sync."""
    db = extensions.db_session()
    job = svc.cancel_job(db, writer(), job_id)
    db.commit()
    return job
