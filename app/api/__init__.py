"""REST API v1: flask-smorest blueprints under /api/v1, OpenAPI 3 at /api/v1/openapi.json, problem+json errors.

Every blueprint is registered in :func:`init_app`, in one explicit list (:func:`blueprints`).
"""

from __future__ import annotations

import hmac
import logging
from typing import Any

from flask import Flask, Response, g, jsonify, request, session
from flask_smorest import Api
from werkzeug.exceptions import HTTPException

from app import extensions
from app.errors import ServiceError, Unauthorized
from app.services import auth as auth_service

log = logging.getLogger(__name__)
PUBLIC_PATHS = {"/api/v1/health", "/api/v1/openapi.json"}
PUBLIC_PREFIXES = ("/api/v1/docs",)


def init_app(app: Flask) -> None:
    app.config.update(
        API_TITLE="Gridshift",
        API_VERSION="v1",
        OPENAPI_VERSION="3.0.3",
        OPENAPI_URL_PREFIX="/api/v1",
        OPENAPI_JSON_PATH="openapi.json",
        OPENAPI_SWAGGER_UI_PATH="docs",
        OPENAPI_SWAGGER_UI_URL="/static/swagger-ui/",
    )
    api = Api(app, spec_kwargs={
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
    })
    app.extensions["gridshift_api"] = api
    for blp in blueprints():
        api.register_blueprint(blp)
    app.before_request(_authenticate)
    app.register_error_handler(ServiceError, _service_error)
    app.register_error_handler(HTTPException, _http_error)


def blueprints() -> list[Any]:
    """Every blueprint of the REST API, in the order the OpenAPI document lists them.

    Imported here, not at the top: the blueprint modules import :func:`principal` and :func:`problem` from this one.
    """
    from app.api import (
        fleet,
        forecasts,
        health,
        jobs,
        market,
        overview,
        plans,
        profiles,
        reports,
        tenancy,
        tokens,
    )

    return [
        m.blp for m in (fleet, forecasts, health, jobs, market, overview, plans, profiles, reports, tenancy, tokens)
    ]


def problem(status: int, title: str, detail: str, errors: list[dict[str, str]] | None = None, **extra: Any) -> Response:
    body: dict[str, Any] = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    if errors:
        body["errors"] = errors
    body.update(extra)
    resp = jsonify(body)
    resp.status_code = status
    resp.mimetype = "application/problem+json"
    return resp


def _service_error(exc: ServiceError) -> Response:
    return problem(exc.status, exc.title, exc.detail, [e.as_dict() for e in exc.errors], **exc.extra)


def _flatten(messages: Any, path: str = "") -> list[dict[str, str]]:
    """webargs/marshmallow error dicts -> [{field: "jobs[3].deadline_at", message}]."""
    out: list[dict[str, str]] = []
    if isinstance(messages, dict):
        for key, val in messages.items():
            if isinstance(key, int) or (isinstance(key, str) and key.isdigit()):
                sub = f"{path}[{key}]"
            elif path in ("", "json", "query", "form", "files", "headers"):
                sub = str(key)
            else:
                sub = f"{path}.{key}"
            if path == "" and key in ("json", "query", "form", "files", "headers"):
                sub = ""
            out.extend(_flatten(val, sub))
    elif isinstance(messages, list) and messages and all(isinstance(m, str) for m in messages):
        out.extend({"field": path or "body", "message": m} for m in messages)
    elif isinstance(messages, list):
        for m in messages:
            out.extend(_flatten(m, path))
    else:
        out.append({"field": path or "body", "message": str(messages)})
    return out


def _http_error(exc: HTTPException) -> Response:
    errors = None
    data = getattr(exc, "data", None)  # webargs attaches {"messages": {...}} to 422s
    if isinstance(data, dict) and "messages" in data:
        errors = _flatten(data["messages"])
    status = exc.code or 500
    if status == 422:
        return problem(422, "Validation failed", "the request has invalid fields; nothing was stored", errors)
    return problem(status, exc.name, exc.description or exc.name, errors)


def _csrf_ok(sent: str, expected: object) -> bool:
    """The header matches the session's token, compared in constant time; a session without one accepts nothing."""
    return isinstance(expected, str) and bool(expected) and hmac.compare_digest(sent.encode(), expected.encode())


def _authenticate() -> Response | None:
    path = request.path
    if not path.startswith("/api/v1") or path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES):
        return None
    db = extensions.db_session()
    header = request.headers.get("Authorization", "")
    try:
        if header.startswith("Bearer "):
            g.principal = auth_service.authenticate(
                db, header[7:].strip(), cache=extensions.state().principals
            )
        elif session.get("token_id"):
            # Dashboard session: state-changing calls must carry the session's CSRF token.
            if request.method not in ("GET", "HEAD", "OPTIONS") and not _csrf_ok(
                request.headers.get("X-CSRF-Token", ""), session.get("csrf")
            ):
                return problem(403, "Forbidden", "missing or wrong X-CSRF-Token header")
            g.principal = auth_service.load_principal(db, int(session["token_id"]))
        else:
            raise Unauthorized()
    except Unauthorized as exc:
        resp = _service_error(exc)
        resp.headers["WWW-Authenticate"] = "Bearer"
        return resp
    return None


def principal() -> auth_service.Principal:
    return g.principal  # type: ignore[no-any-return]
