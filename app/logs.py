"""Logs: text or one JSON object a line (``GRIDSHIFT_LOG_FORMAT``), carrying the request id and run ids.

Every HTTP request gets an id: the caller's ``X-Request-ID`` when it is a sane token (at most 128 letters, digits
and ``-_.:``), else a new one; it is answered in ``X-Request-ID`` and set on every log record written while the
request is served. Records logged with ``extra={"run_id": ...}`` (plan runs, dispatch runs) or ``plan_id`` /
``job_id`` carry those too.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from datetime import UTC, datetime
from typing import Any

from flask import Flask, Response, g, has_request_context, request

from app.config import Settings

REQUEST_ID_HEADER = "X-Request-ID"
_SANE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
#: Record attributes copied into a JSON line when a record carries them.
CONTEXT_FIELDS = ("request_id", "run_id", "plan_id", "job_id", "task_id")
_HANDLER_NAME = "gridshift"


class RequestIdFilter(logging.Filter):
    """Puts the current request's id on every record (None outside a request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "request_id", None):
            record.request_id = g.get("request_id") if has_request_context() else None
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (UTC, ISO 8601), level, logger, message, context ids, exception."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                out[name] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure(settings: Settings) -> None:
    """Route the root logger through one handler in the configured format and level (idempotent)."""
    root = logging.getLogger()
    handler = next((h for h in root.handlers if h.get_name() == _HANDLER_NAME), None)
    if handler is None:
        handler = logging.StreamHandler()
        handler.set_name(_HANDLER_NAME)
        handler.addFilter(RequestIdFilter())
        root.addHandler(handler)
    if settings.log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(
            "%(asctime)s %(levelname)s %(name)s [req=%(request_id)s] %(message)s"))
    root.setLevel(settings.log_level.upper())


def init_app(app: Flask, settings: Settings) -> None:
    """Request ids in and out, and one log line per request at DEBUG (the access log stays gunicorn's)."""
    configure(settings)
    log = logging.getLogger("app.http")

    @app.before_request
    def _request_id() -> None:
        given = request.headers.get(REQUEST_ID_HEADER, "")
        g.request_id = given if _SANE_ID.match(given) else uuid.uuid4().hex

    @app.after_request
    def _answer_id(resp: Response) -> Response:
        rid = g.get("request_id")
        if rid:
            resp.headers[REQUEST_ID_HEADER] = rid
        log.debug("%s %s -> %s", request.method, request.path, resp.status_code)
        return resp
