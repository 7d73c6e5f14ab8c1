"""REST API v1: flask-smorest blueprints under /api/v1, OpenAPI 3 at /api/v1/openapi.json, problem+json errors.

Every blueprint is registered in :func:`init_app`, in one explicit list (:func:`blueprints`).
"""

from __future__ import annotations

import hmac
import itertools
import logging
from collections.abc import Iterator
from typing import Any

from flask import Flask, Response, g, jsonify, request, session
from flask_smorest import Api, Blueprint
from werkzeug.exceptions import HTTPException

from app import extensions
from app.api.strict import StrictParser, check_path_and_query
from app.errors import MAX_ERRORS, ServiceError, Unauthorized
from app.services import auth as auth_service

log = logging.getLogger(__name__)
PUBLIC_PATHS = {"/api/v1/health", "/api/v1/openapi.json"}
PUBLIC_PREFIXES = ("/api/v1/docs",)
# every blueprint's @blp.arguments reads JSON bodies strictly (depth, duplicate keys, NUL, lone surrogates); set
# here, before any blueprint module is imported, because the parser is taken when the decorator runs
Blueprint.ARGUMENTS_PARSER = StrictParser()


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
    app.before_request(check_path_and_query)
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
        plan_pages,
        plans,
        profiles,
        reports,
        simulations,
        tenancy,
        tokens,
    )

    return [m.blp for m in (fleet, forecasts, health, jobs, market, overview, plans, plan_pages, profiles, reports,
                            simulations, tenancy, tokens)]


def problem(
    status: int,
    title: str,
    detail: str,
    errors: list[dict[str, str]] | None = None,
    *,
    error_count: int | None = None,
    **extra: Any,
) -> Response:
    """An RFC 9457 answer; ``errors`` is cut to the first ``MAX_ERRORS`` and ``error_count`` says how many in all."""
    body: dict[str, Any] = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    if errors:
        body["errors"] = errors[:MAX_ERRORS]
        body["error_count"] = max(len(errors), error_count or 0)
    body.update(extra)
    resp = jsonify(body)
    resp.status_code = status
    resp.mimetype = "application/problem+json"
    return resp


def _service_error(exc: ServiceError) -> Response:
    errors = [e.as_dict() for e in exc.errors[:MAX_ERRORS]]
    return problem(exc.status, exc.title, exc.detail, errors, error_count=exc.error_count or len(exc.errors),
                   **exc.extra)


def _flatten(messages: Any, path: str = "") -> Iterator[dict[str, str]]:
    """webargs/marshmallow error dicts -> {field: "jobs[3].deadline_at", message}, one at a time."""
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
            yield from _flatten(val, sub)
    elif isinstance(messages, list) and messages and all(isinstance(m, str) for m in messages):
        for m in messages:
            yield {"field": path or "body", "message": m}
    elif isinstance(messages, list):
        for m in messages:
            yield from _flatten(m, path)
    else:
        yield {"field": path or "body", "message": str(messages)}


def _http_error(exc: HTTPException) -> Response:
    errors, count = None, None
    data = getattr(exc, "data", None)  # webargs attaches {"messages": {...}} to 422s
    if isinstance(data, dict) and "messages" in data:
        found = _flatten(data["messages"])
        errors = list(itertools.islice(found, MAX_ERRORS))
        count = len(errors) + sum(1 for _ in found)
    status = exc.code or 500
    if status == 422:
        return problem(422, "Validation failed", "the request has invalid fields; nothing was stored", errors,
                       error_count=count)
    return problem(status, exc.name, exc.description or exc.name, errors, error_count=count)


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
            g.principal = auth_service.web_session_principal(db, session.get("sid"), session.get("token_id"))
        else:
            raise Unauthorized()
    except Unauthorized as exc:
        resp = _service_error(exc)
        resp.headers["WWW-Authenticate"] = "Bearer"
        return resp
    return None


def principal() -> auth_service.Principal:
    return g.principal  # type: ignore[no-any-return]
