"""Request limits and response hardening: rate limits per token, body size, secure cookies, security headers.

Rate limits come from ``settings.rate_limit`` (e.g. ``"600 per minute"``) and are counted per API token. Failed
authentications (a 401 from the API, a failed sign-in) are counted per client address and per token prefix against
the same figure; a valid token still passes where only one of them is spent (see ``_refuse_after_failures``). The
client address honours ``X-Forwarded-For`` only from ``settings.trusted_proxies``. Counters live in
``settings.rate_limit_storage_url``: ``memory://`` for the embedded default (one process), ``redis://host:6379/N``
in production so that every gunicorn worker shares them. A limit storage that is down never takes the API down
with it: the limiter falls back to in-process counters.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import logging
import re
import time

from flask import Flask, current_app, g, request, session
from flask_limiter import Limiter
from limits import RateLimitItem, parse_many
from sqlalchemy.exc import OperationalError
from werkzeug.wrappers import Response

from app.config import Settings

log = logging.getLogger(__name__)

#: Paths that are never rate limited: liveness checks from load balancers and the static docs page.
EXEMPT_PATHS = ("/api/v1/health",)
EXEMPT_PREFIXES = ("/static/", "/api/v1/docs")

_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
}


def rate_limit_key() -> str:
    """The bucket a request counts against: its API token, else its dashboard session's token, else its address.

    Returns
    -------
    str
        ``"cred:<sha256 prefix of the bearer token>"``, ``"session:<token id>"`` or ``"addr:<remote address>"``.
    """
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        return "cred:" + hashlib.sha256(header[7:].strip().encode()).hexdigest()[:24]
    principal = g.get("principal")
    if principal is not None:
        return f"session:{principal.token_id}"
    return _address()


def _address() -> str:
    return f"addr:{client_address()}"


@functools.lru_cache(maxsize=8)
def _networks(proxies: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(p, strict=False) for p in proxies)


def _trusted(address: str, networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in net for net in networks)


def client_address() -> str:
    """The client's address: the peer's, unless the peer is a trusted proxy (``settings.trusted_proxies``).

    Behind trusted proxies, ``X-Forwarded-For`` is read from the right and the first address that is not a trusted
    proxy is the client's; what a client writes into the header itself stays to the left of it and is never taken.
    A peer that is not a trusted proxy cannot choose its address through the header.
    """
    peer = request.remote_addr or "-"
    settings: Settings = current_app.config["GRIDSHIFT_SETTINGS"]
    if not settings.trusted_proxies:
        return peer
    networks = _networks(settings.trusted_proxies)
    if not _trusted(peer, networks):
        return peer
    hops = [h.strip() for line in request.headers.getlist("X-Forwarded-For") for h in line.split(",") if h.strip()]
    for hop in reversed(hops):
        if not _trusted(hop, networks):
            return hop[:64]
    return hops[0][:64] if hops else peer


def _exempt() -> bool:
    path = request.path
    return path in EXEMPT_PATHS or path.startswith(EXEMPT_PREFIXES) or not path.startswith("/api/")


def _needs_token() -> bool:
    """Requests that present a token: every API call but the public ones, and a sign-in."""
    if request.path == "/ui/signin":
        return request.method == "POST"
    return request.path.startswith("/api/") and not _exempt()


def _known_good() -> bool:
    """A request whose credential cannot be a guess: a signed dashboard session, or a bearer token this process
    resolved moments ago. They skip the failure check, so a busy token costs no extra call to the limit storage."""
    from app.db import utcnow
    from app.services.auth import hash_token

    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        principals = current_app.extensions["gridshift"].principals
        return principals.get(hash_token(header[7:].strip()), utcnow()) is not None
    return request.path != "/ui/signin" and bool(session.get("token_id"))


_FAILURES = ("gridshift", "auth-failures")
_PREFIX = re.compile(r"^(gs_[0-9a-f]{1,16})_")


def _failure_limits() -> list[RateLimitItem]:
    settings: Settings = current_app.config["GRIDSHIFT_SETTINGS"]
    return parse_many(settings.rate_limit) if settings.rate_limit else []


def _presented_token() -> str:
    """The token this request presents: the bearer header's, or the sign-in form's; "" for none."""
    if request.path == "/ui/signin":
        return request.form.get("token", "").strip()
    header = request.headers.get("Authorization", "")
    return header[7:].strip() if header.startswith("Bearer ") else ""


def _failure_keys() -> list[str]:
    """Failed authentications are counted per client address and per token prefix (``gs_<8 hex>``, the public part
    of a token; "malformed" for anything else)."""
    token = _presented_token()
    if not token:
        return [_address()]
    match = _PREFIX.match(token)
    return [_address(), "prefix:" + (match.group(1) if match else "malformed")]


def _refuse_after_failures() -> Response | None:
    """Before authentication: a request whose address and token prefix have both spent their budget of failed
    authentications (or whose address has, sending no token) gets 429 without a lookup. When only one of them has,
    the token is looked up: a valid one passes (users behind one proxy address are not locked out by a guesser among
    them, nor a token by guesses at its prefix), an invalid one gets 429 instead of 401 (``_count_failure``)."""
    limits = _failure_limits()
    if not limits or not _needs_token() or _known_good():
        return None
    strategy = current_app.extensions["gridshift_limiter"].limiter
    keys = _failure_keys()
    try:
        spent = [key for key in keys if any(not strategy.test(item, *_FAILURES, key) for item in limits)]
    except Exception:  # a limit storage that is down never takes the API down (as for the limiter itself)
        log.warning("rate-limit storage unavailable; failed authentications are not counted", exc_info=True)
        return None
    if not spent:
        return None
    g.auth_spent = spent
    if len(spent) < len(keys):
        return None  # on probation: looked up; a valid token passes
    return _too_many_failures(spent)


def _too_many_failures(keys: list[str]) -> Response:
    strategy = current_app.extensions["gridshift_limiter"].limiter
    try:
        reset_at = max(strategy.get_window_stats(item, *_FAILURES, key).reset_time
                       for item in _failure_limits() for key in keys)
    except Exception:
        reset_at = time.time() + 60
    wait_s = max(1, int(reset_at - time.time()))
    if request.path == "/ui/signin":  # a person at the form reads why, on the form
        from app.web import signin_page

        resp = signin_page(f"Too many failed sign-ins from this address; try again in {wait_s} s.", 429)
    else:
        from app.api import problem

        what = "this address" if keys[0].startswith("addr:") else "this token prefix"
        resp = problem(429, "Too many requests", f"too many failed authentications from {what}; retry later")
    resp.headers["Retry-After"] = str(wait_s)
    return resp


def _count_failure(resp: Response) -> Response:
    if resp.status_code == 401 and _needs_token():
        strategy = current_app.extensions["gridshift_limiter"].limiter
        try:
            for key in _failure_keys():
                for item in _failure_limits():
                    strategy.hit(item, *_FAILURES, key)
        except Exception:
            log.warning("rate-limit storage unavailable; failed authentications not counted", exc_info=True)
        spent = g.get("auth_spent")
        if spent:
            return _harden(_too_many_failures(spent))
    return resp


def build_limiter(settings: Settings) -> Limiter:
    """A flask-limiter ``Limiter`` for these settings (not yet attached to an app)."""
    options: dict[str, str | int] = {}
    if settings.rate_limit_storage_url.startswith(("redis://", "rediss://")):
        options = {"socket_timeout": 2, "socket_connect_timeout": 2}
    return Limiter(
        rate_limit_key,
        # one budget per token across every route (default_limits would count each route separately)
        application_limits=[settings.rate_limit] if settings.rate_limit else [],
        application_limits_exempt_when=_exempt,
        storage_uri=settings.rate_limit_storage_url or "memory://",
        storage_options=options,
        strategy="moving-window",
        headers_enabled=False,  # X-RateLimit-* cost a second Redis call per request; 429s get Retry-After below
        swallow_errors=True,
        in_memory_fallback_enabled=True,
        key_prefix="gridshift",
    )


def _harden(resp: Response) -> Response:
    for name, value in _HEADERS.items():
        resp.headers.setdefault(name, value)
    if resp.status_code == 429 and "Retry-After" not in resp.headers:
        limit = current_app.extensions["gridshift_limiter"].current_limit
        wait_s = limit.reset_at - int(time.time()) if limit is not None else 1
        resp.headers["Retry-After"] = str(max(1, wait_s))
    if resp.status_code == 405 and "Allow" not in resp.headers:
        # the problem+json renderer builds a new response; RFC 9110 requires a 405 to list the allowed methods
        try:
            allowed = current_app.url_map.bind_to_environ(request.environ).allowed_methods()
        except Exception:  # a header must never turn a 405 into a 500
            allowed = []
        resp.headers["Allow"] = ", ".join(sorted(allowed))
    if request.path.startswith("/api/v1") and not request.path.startswith("/api/v1/docs"):
        # API answers may carry tokens shown once and tenant data: never cached by a proxy or browser.
        resp.headers.setdefault("Cache-Control", "no-store")
        resp.headers.setdefault("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
    return resp


PROBLEM = "application/problem+json"
PROBLEM_SCHEMA = {
    "type": "object",
    "description": "RFC 9457 problem details; `errors` names each offending field",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "error_count": {"type": "integer", "description": "how many errors in all; `errors` lists the first 100"},
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["field", "message"],
                "properties": {"field": {"type": "string"}, "message": {"type": "string"}},
            },
        },
    },
}


def document_problem_responses(app: Flask) -> None:
    """Make the OpenAPI document say what the API sends on errors: ``application/problem+json`` bodies.

    flask-smorest documents its error responses as ``application/json`` with its own ``Error`` schema; every
    error here is rendered by ``app.api.problem`` instead, so the document is corrected to match.
    """
    api = app.extensions.get("gridshift_api")
    if api is None:
        return
    components = api.spec.components
    components.schemas["Error"] = PROBLEM_SCHEMA
    for store in (components.responses, components.responses_lazy):
        for response in store.values():
            content = response.get("content", {})
            if "application/json" in content and content["application/json"].get("schema", {}).get(
                "$ref", ""
            ).endswith("/Error"):
                content[PROBLEM] = content.pop("application/json")


def _database_unavailable(exc: OperationalError) -> Response:
    """The database went away mid-request (restart, failover): nothing was committed, so say "retry" (503)."""
    from app.api import problem

    log.warning("database unavailable during %s %s: %s", request.method, request.path, exc.orig or exc)
    resp = problem(
        503,
        "Service unavailable",
        "the database is unavailable; retry shortly (a batch with the same Idempotency-Key)",
    )
    resp.headers["Retry-After"] = "2"
    return resp


MAX_ID = 2**31 - 1  # ids are INTEGER columns; a larger path id cannot exist


def _ids_in_range() -> Response | None:
    """A path id beyond the id columns' range is simply not found (instead of a database overflow error)."""
    for name, value in (request.view_args or {}).items():
        if isinstance(value, int) and not 0 <= value <= MAX_ID:
            from app.api import problem

            return problem(404, "Not found", f"{name} {value} not found")
    return None


def init_app(app: Flask) -> None:
    """Attach the rate limiter, the request-size limit and secure session-cookie settings to ``app``.

    Call it after the API is registered, so that the per-token key sees the authenticated principal.
    """
    settings: Settings = app.config["GRIDSHIFT_SETTINGS"]
    app.config.setdefault("MAX_CONTENT_LENGTH", settings.max_content_length)
    app.config["MAX_FORM_MEMORY_SIZE"] = min(settings.max_content_length, 8 * 1024 * 1024)
    app.config["MAX_FORM_PARTS"] = 100
    app.config.update(
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=settings.session_cookie_secure,
        PERMANENT_SESSION_LIFETIME=12 * 3600,
    )
    limiter = build_limiter(settings)
    limiter.init_app(app)
    app.extensions["gridshift_limiter"] = limiter
    app.before_request(_ids_in_range)
    # first of all before-request hooks: the API's authentication must not run for an address that is refused
    app.before_request_funcs.setdefault(None, []).insert(0, _refuse_after_failures)
    app.after_request(_count_failure)
    app.register_error_handler(OperationalError, _database_unavailable)
    app.after_request(_harden)
    document_problem_responses(app)
