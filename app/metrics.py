"""``/metrics`` in the Prometheus text format: HTTP traffic counted per process, plans, dispatch and forecasts read
from the database at scrape time (``app.services.ops_metrics``).

Guarded: with ``GRIDSHIFT_METRICS_TOKEN`` set a scrape must carry ``Authorization: Bearer <token>``; without one,
only loopback clients are answered unless ``GRIDSHIFT_METRICS_LOOPBACK_ONLY=false``. Under gunicorn, set
``PROMETHEUS_MULTIPROC_DIR`` (an empty folder, the prometheus_client convention) and start gunicorn with
``-c python:app.gunicorn_conf``: each worker writes its HTTP counts there and any worker answers for all of them.
Another gunicorn pool of the same service (compose's ``web-heavy``) keeps its own folder; ``GRIDSHIFT_METRICS_POOL_DIRS``
names those folders, and ``/metrics`` adds their counts to its own pool's.
"""

from __future__ import annotations

import hmac
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flask import Flask, Response, g, request
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from app import extensions
from app.config import Settings
from app.db import utcnow
from app.services import ops_metrics

#: HTTP metrics of this process (in multi-process mode their values go to PROMETHEUS_MULTIPROC_DIR too).
HTTP = CollectorRegistry(auto_describe=True)
REQUESTS = Counter("gridshift_http_requests", "HTTP requests answered", ["method", "endpoint", "status"],
                   registry=HTTP)
LATENCY = Histogram("gridshift_http_request_duration_seconds", "Time to answer an HTTP request [s]",
                    ["method", "endpoint"], registry=HTTP,
                    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0))
LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}
CACHE_S = 5.0


class DomainCollector:
    """Plans, dispatch and forecasts as gauges, from one database snapshot (cached for :data:`CACHE_S`)."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        self._lock = threading.Lock()
        self._cached: tuple[float, ops_metrics.OpsSnapshot] | None = None

    def _snapshot(self) -> ops_metrics.OpsSnapshot:
        with self._lock:
            if self._cached is None or time.monotonic() - self._cached[0] > CACHE_S:
                with self.app.app_context():
                    state = extensions.state()
                    with state.read_sessions() as session:
                        self._cached = (time.monotonic(), ops_metrics.snapshot(session, utcnow()))
            return self._cached[1]

    def collect(self) -> Iterator[Metric]:
        s = self._snapshot()
        yield from _gauges(s)


def _gauge(name: str, doc: str, value: float | None, labels: dict[str, str] | None = None) -> GaugeMetricFamily:
    g_ = GaugeMetricFamily(name, doc, labels=list(labels or {}))
    if value is not None:
        g_.add_metric(list((labels or {}).values()), float(value))
    return g_


def _labelled(name: str, doc: str, label: str, values: dict[str, int]) -> GaugeMetricFamily:
    fam = GaugeMetricFamily(name, doc, labels=[label])
    for key, n in sorted(values.items()):
        fam.add_metric([key], float(n))
    return fam


def _gauges(s: ops_metrics.OpsSnapshot) -> Iterator[Metric]:
    yield _gauge("gridshift_plan_solve_seconds", "Solve time of the newest plan [s]", s.plan_solve_s)
    yield _gauge("gridshift_plan_gap_percent", "Optimality gap of the newest plan that did not fail [%]", s.plan_gap_pct)
    yield _gauge("gridshift_plan_age_seconds", "Time since the current plan was made [s]", s.plan_age_s)
    yield _gauge("gridshift_plan_objective_value", "Objective value of the current plan", s.plan_objective_value)
    jobs = GaugeMetricFamily("gridshift_plan_jobs", "Jobs of the current plan: planned or left out", labels=["outcome"])
    if s.plan_jobs_planned is not None:
        jobs.add_metric(["planned"], float(s.plan_jobs_planned))
        jobs.add_metric(["left_out"], float(s.plan_jobs_left_out or 0))
    yield jobs
    yield _labelled("gridshift_plans", "Stored plans by status", "status", s.plans_by_status)
    yield _labelled("gridshift_plan_runs", "Plan runs asked for (POST /api/v1/plans, gridshift plan) by state",
                    "state", s.plan_runs_by_state)
    yield _gauge("gridshift_dispatch_due_jobs", "Planned starts that have come and are not dispatched yet",
                 s.dispatch_due)
    yield _gauge("gridshift_dispatch_late_jobs",
                 f"Planned starts not dispatched {ops_metrics.LATE_AFTER_S:.0f} s after they came", s.dispatch_late)
    yield _labelled("gridshift_runs", "Runs by state (lost: the runtime no longer knows them)", "state",
                    s.runs_by_state)
    yield _gauge("gridshift_dispatch_queue_depth", "Runs claimed and waiting to be submitted to their runtime",
                 s.queue_depth)
    age = GaugeMetricFamily("gridshift_forecast_age_seconds", "Age of the forecast in force [s]",
                            labels=["zone", "kind"])
    for (zone, kind), value in sorted(s.forecast_age_s.items()):
        age.add_metric([zone, kind], value)
    yield age
    err = GaugeMetricFamily("gridshift_forecast_backtest_error", "Backtest error of the selected model "
                            "(mae [unit of the series], smape [%], rmae [ratio to the naive model])",
                            labels=["zone", "kind", "model", "metric"])
    for key, value in sorted(s.backtest_error.items()):
        err.add_metric(list(key), value)
    yield err


class _Http:
    """This process's HTTP metrics, for a registry built per scrape."""

    def collect(self) -> Iterator[Metric]:
        yield from HTTP.collect()


class _Pools:
    """The HTTP metrics every worker of every listed pool wrote to its folder, added up (one family per name)."""

    def __init__(self, folders: list[Path]) -> None:
        self.folders = folders

    def collect(self) -> Iterator[Metric]:
        files = sorted(str(f) for folder in self.folders for f in folder.glob("*.db"))
        yield from multiprocess.MultiProcessCollector.merge(files, accumulate=True)


def _allowed(settings: Settings) -> Response | None:
    if settings.metrics_token:
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {settings.metrics_token}".encode()):
            return Response("metrics need the bearer token of GRIDSHIFT_METRICS_TOKEN\n", 401,
                            {"WWW-Authenticate": 'Bearer realm="metrics"'}, mimetype="text/plain")
        return None
    if settings.metrics_loopback_only and request.remote_addr not in LOOPBACK:
        return Response("metrics are answered on loopback only (GRIDSHIFT_METRICS_LOOPBACK_ONLY)\n", 403,
                        mimetype="text/plain")
    return None


def init_app(app: Flask, settings: Settings) -> None:
    """Count every request, and serve ``/metrics``."""
    domain = DomainCollector(app)

    @app.before_request
    def _start_timer() -> None:
        g.metrics_t0 = time.perf_counter()

    @app.after_request
    def _count(resp: Response) -> Response:
        t0 = g.pop("metrics_t0", None)
        if t0 is not None and request.path != "/metrics":
            endpoint = request.url_rule.rule if request.url_rule is not None else "(unmatched)"
            REQUESTS.labels(request.method, endpoint, str(resp.status_code)).inc()
            LATENCY.labels(request.method, endpoint).observe(time.perf_counter() - t0)
        return resp

    def metrics() -> Any:
        refused = _allowed(settings)
        if refused is not None:
            return refused
        registry = CollectorRegistry(auto_describe=False)
        if settings.metrics_multiproc_dir is not None:
            folders = [settings.metrics_multiproc_dir, *(Path(d) for d in settings.metrics_pool_dirs)]
            registry.register(_Pools(list(dict.fromkeys(f.resolve() for f in folders))))  # type: ignore[arg-type]
        else:
            registry.register(_Http())  # type: ignore[arg-type]
        registry.register(domain)  # type: ignore[arg-type]
        return Response(generate_latest(registry), mimetype=CONTENT_TYPE_LATEST)

    app.add_url_rule("/metrics", "metrics", metrics)
    limiter = app.extensions.get("gridshift_limiter")
    if limiter is not None:
        limiter.exempt(metrics)
