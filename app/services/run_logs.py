"""A run's output, read from its runtime through the connector's optional ``log`` method.

The tail is capped at ``GRIDSHIFT_LOG_MAX_BYTES``: a caller asks for the last bytes or the last lines, never more
than the cap. Access follows the job: its tenant, or an operator (admin, read-only).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.config import Settings
from app.errors import FieldError, NotFound, ServiceError, ValidationFailed
from app.models import Run
from app.services.auth import Principal
from app.services.dispatch.submit import connector_for
from app.services.jobs import get_job
from connectors.base import ConnectorError, LogSource


def _no_log(detail: str) -> ServiceError:
    return ServiceError(detail, [], 404, "Not found")


def _unavailable(detail: str) -> ServiceError:
    """The runtime could not be asked for the log right now (retry later)."""
    return ServiceError(detail, [], 503, "Log unavailable")


@dataclass(frozen=True, slots=True)
class RunLog:
    text: bytes
    truncated: bool  # older output was left out (the tail only)
    runtime_job_id: str
    cluster: str


def run_log(session: Session, settings: Settings, principal: Principal, job_id: int, run_id: int, *,
            tail_bytes: int | None = None, tail_lines: int | None = None) -> RunLog:
    """The tail of run ``run_id`` of job ``job_id``: the last ``tail_bytes`` bytes or ``tail_lines`` lines, at most
    ``settings.log_max_bytes`` bytes either way."""
    get_job(session, principal, job_id)
    run = session.get(Run, run_id) if 0 < run_id < 2**31 else None
    if run is None or run.job_id != job_id:
        raise NotFound(f"run {run_id} of job {job_id}")
    cap = settings.log_max_bytes
    if tail_bytes is not None and tail_bytes > cap:
        raise ValidationFailed("too large", [FieldError("tail_bytes", f"at most {cap} (GRIDSHIFT_LOG_MAX_BYTES)")])
    if run.cluster is None or not run.runtime_job_id:
        raise _no_log(f"run {run_id} has no log: it has not reached a runtime")
    connector = connector_for(run.cluster, settings)
    if not isinstance(connector, LogSource):
        raise _no_log(f"run {run_id} has no log: the {run.cluster.kind} runtime gives none")
    want = cap if tail_bytes is None else tail_bytes
    try:
        data = connector.log(run.runtime_job_id, want + 1)  # one byte more tells whether older output exists
    except ConnectorError as exc:
        raise _unavailable(f"log of run {run_id}: {exc}") from exc
    if data is None:
        raise _no_log(f"run {run_id} has no log: the runtime has no output for it (yet)")
    truncated = len(data) > want
    data = data[-want:] if want else b""
    if tail_lines is not None:
        lines = data.splitlines(keepends=True)
        truncated = truncated or len(lines) > tail_lines
        data = b"".join(lines[-tail_lines:]) if tail_lines else b""
    return RunLog(data, truncated, run.runtime_job_id, run.cluster.name)
