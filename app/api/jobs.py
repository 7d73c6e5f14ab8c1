"""Jobs: submit one or a batch (all-or-nothing, idempotent), list with filters and cursors, get, cancel."""

from __future__ import annotations

from typing import Any

from flask import Response, current_app, jsonify, request
from flask_smorest import Blueprint
from marshmallow import EXCLUDE, Schema, fields, validate

from app import extensions
from app.api import principal
from app.api.access import first, writer
from app.api.schemas import BatchIn, BatchOut, EventOut, JobIn, JobOut, JobPage, JobQuery, RunOut, job_json
from app.costs import batch_units, costly
from app.errors import FieldError, ValidationFailed
from app.services import jobs as svc
from app.services import run_logs

blp = Blueprint("jobs", __name__, url_prefix="/api/v1/jobs", description="Deferrable GPU jobs")


@blp.route("", methods=["POST"])
@first(writer)
@blp.arguments(JobIn)
@blp.response(201, JobOut)
def submit(data: dict[str, Any]) -> Any:
    """Submit one job."""
    p = writer()
    db = extensions.db_session()
    _batch, ids = svc.submit_jobs(db, p, [data], prefix="", keys=extensions.settings().encryption_keys)
    db.commit()
    return svc.get_job(db, p, ids[0])


@blp.route("/batch", methods=["POST"])
@first(writer)
@costly("batch", units=batch_units)
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
    digest = svc.request_hash(request.get_json(silent=True), current_app.config["SECRET_KEY"]) if key else ""
    if key:
        if len(key) > 200:
            raise ValidationFailed("bad header", [FieldError("Idempotency-Key", "at most 200 characters")])
        seen = svc.find_idempotent(db, p.tenant_id, key, digest)
        if seen is not None:
            return seen.response, seen.status_code
    batch_id, ids = svc.submit_jobs(db, p, data["jobs"], keys=settings.encryption_keys)
    body = {"batch_id": batch_id, "count": len(ids), "job_ids": ids}
    if key:
        svc.remember_idempotent(db, p.tenant_id, key, digest, 201, body)
    db.commit()
    return body


@blp.route("", methods=["GET"])
@blp.arguments(JobQuery, location="query")
@blp.response(200, JobPage)
def list_jobs(q: dict[str, Any]) -> Any:
    """The caller's jobs, newest first; follow ``next_cursor`` for the next page.

    Operator admins and read-only operators list every tenant's jobs (``tenant`` picks one).
    """
    flt = svc.JobFilter(
        state=[s.value for s in q.get("state", [])],
        region=q.get("region"),
        hardware=q.get("hardware"),
        deadline_from=q.get("deadline_from"),
        deadline_to=q.get("deadline_to"),
        batch_id=q.get("batch_id"),
        tenant=q.get("tenant"),
    )
    db, p = extensions.db_session(), principal()
    items, nxt = svc.list_jobs(db, p, flt, limit=q["limit"], cursor=q.get("cursor"))
    return jsonify({"items": [job_json(j) for j in items], "next_cursor": nxt,
                    "tenants": svc.tenant_slugs(db, p, items)})


@blp.route("/<int:job_id>", methods=["GET"])
@blp.response(200, JobOut)
def get(job_id: int) -> Response:
    """One job of the caller's tenant (404 for any other); operators (admin, read-only) read any tenant's."""
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


class LogQuery(Schema):
    class Meta:
        unknown = EXCLUDE

    tail_bytes = fields.Integer(validate=validate.Range(min=0), metadata={
        "description": "the last this many bytes (at most GRIDSHIFT_LOG_MAX_BYTES, the default)"})
    tail_lines = fields.Integer(validate=validate.Range(min=0, max=100_000), metadata={
        "description": "the last this many lines (of at most GRIDSHIFT_LOG_MAX_BYTES)"})
    download = fields.Boolean(load_default=False, metadata={"description": "as an attachment"})


@blp.route("/<int:job_id>/runs/<int:run_id>/log", methods=["GET"])
@blp.arguments(LogQuery, location="query")
@blp.response(200, content_type="text/plain")
def run_log(q: dict[str, Any], job_id: int, run_id: int) -> Response:
    """The tail of a run's output (stdout and stderr) from its runtime, as text.

    ``X-Log-Truncated: true`` says that older output was left out. 404 when the runtime gives no log for the run
    (not submitted yet, or a runtime without logs); 503 when the runtime cannot be reached.
    """
    log = run_logs.run_log(extensions.db_session(), extensions.settings(), principal(), job_id, run_id,
                           tail_bytes=q.get("tail_bytes"), tail_lines=q.get("tail_lines"))
    headers = {"X-Log-Truncated": "true" if log.truncated else "false", "Cache-Control": "no-store"}
    if q["download"]:
        headers["Content-Disposition"] = f'attachment; filename="job-{job_id}-run-{run_id}.log"'
    return Response(log.text, mimetype="text/plain", headers=headers)


@blp.route("/<int:job_id>/cancel", methods=["POST"])
@blp.response(200, JobOut)
def cancel(job_id: int) -> Any:
    """Cancel a job that has not finished; a running run is stopped by the next status sync."""
    db = extensions.db_session()
    job = svc.cancel_job(db, writer(), job_id)
    db.commit()
    return job
