"""Cost-aware limits: expensive operations draw on a per-tenant budget and a per-tenant concurrency cap.

The request rate limit (``app.security``) counts requests per token; a PDF report costs about 0.6 CPU-s and a
request for ``/me`` about 1 ms, so counting requests let one tenant's PDFs starve every other tenant. Here each
expensive operation has a cost in units of about 10 ms of CPU (:data:`COSTS`), drawn from the tenant's budget
(``settings.cost_budget``, e.g. ``"600 per minute"``: six CPU-seconds a minute) before the work starts, whichever
of the tenant's tokens asks; and at most ``settings.cost_concurrency`` of a tenant's expensive requests run at once.
A request over either gets 429 with Retry-After. Monthly reports (JSON, CSV, PDF) are cached for
``settings.report_cache_s`` seconds per tenant and query; a cached answer costs nothing.

Budgets live in the rate-limit storage (Redis in production, so every gunicorn worker shares them); the
concurrency slots in Redis too (a sorted set whose entries expire, so a killed worker cannot hold a slot for
ever). A storage that is down never takes the API down: the check is skipped and logged.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from flask import Flask, Response, current_app, request
from limits import RateLimitItem, parse

from app.config import Settings

log = logging.getLogger(__name__)

#: What each expensive operation costs [units of ~10 ms of CPU], measured on the demo data (docs/hostile-load.md).
COSTS = {
    "report": 10,
    "report.pdf": 60,
    "preview": 45,
    # the request only queues a plan run (202); the solve it asks of a worker is what is charged: ~1.5 s at the demo
    # fleet, so four re-plans a minute within the default budget
    "replan": 150,
    # a simulation replays up to 92 days, two solves a day: it draws a whole minute of the default budget
    "simulation": 600,
}
#: A batch's validation and storage cost per byte of body: ~3 s of CPU for a 3 MB batch of 10,000 jobs.
BATCH_BYTES_PER_UNIT = 10_000
SLOT_TTL_S = 120  # a slot a killed worker never gave back frees itself after this long
_BUDGET = ("gridshift", "cost")


class CostLimited(Exception):
    """A tenant spent its budget or has too many expensive requests running: answered 429 with Retry-After."""

    def __init__(self, detail: str, retry_after_s: int) -> None:
        super().__init__(detail)
        self.detail = detail
        self.retry_after_s = retry_after_s


class Slots:
    """At most ``cap`` concurrent holders per key, across processes through Redis, else within this process."""

    def __init__(self, storage_url: str, cap: int) -> None:
        self.cap = cap
        self._lock = threading.Lock()
        self._local: dict[str, int] = {}
        self._redis: Any = None
        if storage_url.startswith(("redis://", "rediss://")):
            import redis

            self._redis = redis.Redis.from_url(storage_url, socket_timeout=2, socket_connect_timeout=2)

    def acquire(self, key: str) -> str | None:
        """A ticket to give back to :meth:`release`, or None when ``cap`` holders are in."""
        ticket = uuid.uuid4().hex
        if self._redis is not None:
            try:
                return self._acquire_redis(f"gridshift:slots:{key}", ticket)
            except Exception:
                log.warning("concurrency slots unavailable (Redis); not enforced", exc_info=True)
                return ticket
        with self._lock:
            if self._local.get(key, 0) >= self.cap:
                return None
            self._local[key] = self._local.get(key, 0) + 1
        return ticket

    def _acquire_redis(self, name: str, ticket: str) -> str | None:
        now = time.time()
        pipe = self._redis.pipeline()
        pipe.zremrangebyscore(name, "-inf", now)
        pipe.zadd(name, {ticket: now + SLOT_TTL_S})
        pipe.zrank(name, ticket)
        pipe.expire(name, SLOT_TTL_S)
        rank = pipe.execute()[2]
        if rank is not None and rank < self.cap:  # the earliest-expiring cap holders are in
            return ticket
        self._redis.zrem(name, ticket)
        return None

    def release(self, key: str, ticket: str) -> None:
        if self._redis is not None:
            try:
                self._redis.zrem(f"gridshift:slots:{key}", ticket)
            except Exception:
                log.warning("concurrency slot not given back (Redis); it expires in %d s", SLOT_TTL_S)
            return
        with self._lock:
            self._local[key] = max(0, self._local.get(key, 0) - 1)


class ReportCache:
    """Rendered report answers per (tenant scope, path, query) for ``ttl_s`` seconds, at most ``max_bytes``."""

    def __init__(self, ttl_s: float, max_bytes: int = 32 * 1024 * 1024) -> None:
        self.ttl_s = ttl_s
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[Any, ...], tuple[float, bytes, int, dict[str, str]]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...]) -> Response | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] <= time.monotonic():
                return None
            _at, body, status, headers = entry
        return Response(body, status=status, headers=headers)

    def put(self, key: tuple[Any, ...], resp: Response) -> None:
        if self.ttl_s <= 0 or resp.status_code != 200 or resp.is_streamed:
            return
        body = resp.get_data()
        if len(body) > self.max_bytes // 8:
            return
        headers = {k: v for k, v in resp.headers.items() if k in ("Content-Type", "Content-Disposition")}
        with self._lock:
            old = self._entries.pop(key, None)
            self._size -= len(old[1]) if old else 0
            self._entries[key] = (time.monotonic() + self.ttl_s, body, resp.status_code, headers)
            self._size += len(body)
            while self._size > self.max_bytes and self._entries:
                _k, (_t, dropped, _s, _h) = self._entries.popitem(last=False)
                self._size -= len(dropped)


class CostGuard:
    """The per-app state: the budget item, the slots and the report cache."""

    def __init__(self, settings: Settings) -> None:
        self.budget: RateLimitItem | None = parse(settings.cost_budget) if settings.cost_budget else None
        self.slots = Slots(settings.rate_limit_storage_url, settings.cost_concurrency)
        self.reports = ReportCache(settings.report_cache_s)

    def charge(self, tenant_id: int, units: int) -> None:
        """Draw ``units`` from the tenant's budget or raise :class:`CostLimited` (nothing drawn then)."""
        if self.budget is None:
            return
        strategy = current_app.extensions["gridshift_limiter"].limiter
        units = max(1, min(units, self.budget.amount))  # the largest request drains the budget, never exceeds it
        key = f"tenant:{tenant_id}"
        try:
            if strategy.hit(self.budget, *_BUDGET, key, cost=units):
                return
            reset_at = strategy.get_window_stats(self.budget, *_BUDGET, key).reset_time
        except Exception:
            log.warning("rate-limit storage unavailable; cost budgets not enforced", exc_info=True)
            return
        raise CostLimited(
            f"this tenant has spent its budget for expensive requests ({self.budget}; this one costs {units} units); "
            "retry later", max(1, int(reset_at - time.time())),
        )


def guard() -> CostGuard:
    return current_app.extensions["gridshift_costs"]  # type: ignore[no-any-return]


def costly(
    operation: str, *, units: Callable[[], int] | None = None, cached: bool = False
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Charge the caller's tenant for ``operation`` and hold one of its concurrency slots while the view runs.

    Place it under ``@blp.route`` (and under ``first(...)``, so that authorisation comes first), above
    ``@blp.arguments``: a refused request is not parsed. ``units`` computes the cost from the request (default
    ``COSTS[operation]``); ``cached`` answers a repeated report query from :class:`ReportCache` without charging.
    """

    def decorate(view: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            from app.api import principal

            p = principal()
            g = guard()
            key = (p.tenant_id, p.is_fleet_admin, request.path, tuple(sorted(request.args.items(multi=True))))
            if cached and (hit := g.reports.get(key)) is not None:
                return hit
            cost = units() if units else COSTS[operation]
            if cost <= 0:  # a small batch is not expensive work
                return view(*args, **kwargs)
            g.charge(p.tenant_id, cost)
            ticket = g.slots.acquire(f"tenant:{p.tenant_id}")
            if ticket is None:
                raise CostLimited(f"at most {g.slots.cap} expensive requests of a tenant run at once; retry shortly", 1)
            try:
                resp = current_app.make_response(view(*args, **kwargs))
            finally:
                g.slots.release(f"tenant:{p.tenant_id}", ticket)
            if cached:
                g.reports.put(key, resp)
            return resp

        return wrapper

    return decorate


def batch_units() -> int:
    """A batch costs one unit per ``BATCH_BYTES_PER_UNIT`` bytes of body (validation time grows with its size); one
    under that size (~30 jobs) costs nothing and takes no concurrency slot."""
    return (request.content_length or 0) // BATCH_BYTES_PER_UNIT


def _limited(exc: CostLimited) -> Response:
    from app.api import problem

    resp = problem(429, "Too many requests", exc.detail)
    resp.headers["Retry-After"] = str(exc.retry_after_s)
    return resp


def init_app(app: Flask) -> None:
    """Attach the cost guard; call it after ``app.security.init_app`` (it shares the limiter's storage)."""
    app.extensions["gridshift_costs"] = CostGuard(app.config["GRIDSHIFT_SETTINGS"])
    app.register_error_handler(CostLimited, _limited)
