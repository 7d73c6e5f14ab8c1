"""``/metrics`` is scraped: Prometheus text with plan, dispatch, forecast and HTTP figures, guarded; JSON logs carry
the request id; ``X-Request-ID`` comes back."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from dataclasses import replace
from datetime import timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app import create_app, logs
from app.db import utcnow
from app.enums import ForecastRunStatus, Role, SeriesKind
from app.models import ForecastRun
from app.services import forecasts
from tests.app.test_reports_views import priced_fleet  # noqa: F401  (fixture)
from tests.conftest import REPO, job_payload, make_token, replan_via_api


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_a_scrape_reports_plans_dispatch_forecasts_and_http(app, client, session, priced_fleet):  # noqa: F811
    member, ops = make_token(session, "team-a"), make_token(session, "ops", Role.ADMIN, operator=True)
    now = priced_fleet
    body = job_payload(now, release_at=(now + timedelta(hours=1)).isoformat(),
                       deadline_at=(now + timedelta(hours=30)).isoformat())
    assert client.post("/api/v1/jobs", json=body, headers=auth(member)).status_code == 201
    run, _plan = replan_via_api(client, app, auth(ops))
    forecasts.select_model(session, "DE", SeriesKind.PRICE, "lear", {"lear": {"mae": 7.5, "smape": 12.0}})
    session.add(ForecastRun(zone="DE", kind=SeriesKind.PRICE, model="lear", status=ForecastRunStatus.SUCCEEDED,
                            issued_at=utcnow() - timedelta(hours=1)))
    session.commit()
    assert client.get("/api/v1/jobs", headers=auth(member)).status_code == 200

    resp = client.get("/metrics")
    assert resp.status_code == 200 and resp.mimetype == "text/plain"
    got = _samples(resp.get_data(as_text=True))
    assert got[("gridshift_plan_jobs", (("outcome", "planned"),))] == 1
    assert got[("gridshift_plan_jobs", (("outcome", "left_out"),))] == 0
    assert got[("gridshift_plan_solve_seconds", ())] == pytest.approx(run["summary"]["solve_s"])
    assert ("gridshift_plan_gap_percent", ()) in got and got[("gridshift_plan_age_seconds", ())] >= 0
    assert got[("gridshift_plan_runs", (("state", "succeeded"),))] == 1
    assert got[("gridshift_dispatch_due_jobs", ())] == 0 and got[("gridshift_dispatch_late_jobs", ())] == 0
    assert got[("gridshift_dispatch_queue_depth", ())] == 0
    assert got[("gridshift_forecast_backtest_error",
                (("kind", "price"), ("metric", "mae"), ("model", "lear"), ("zone", "DE")))] == 7.5
    age = got[("gridshift_forecast_age_seconds", (("kind", "price"), ("zone", "DE")))]
    assert 3600 <= age < 3600 + 120
    listed = (("endpoint", "/api/v1/jobs"), ("method", "GET"), ("status", "200"))
    assert got[("gridshift_http_requests_total", listed)] >= 1
    assert got[("gridshift_http_request_duration_seconds_count", (("endpoint", "/api/v1/jobs"), ("method", "GET")))] >= 1
    # the Grafana dashboard in the repository reads only metrics that a scrape has
    dashboard = (REPO / "deploy" / "grafana" / "gridshift.json").read_text()
    wanted = set(re.findall(r"gridshift_[a-z_]+", dashboard))
    exposed = {name for name, _ in got} | {f.name for f in text_string_to_metric_families(resp.get_data(as_text=True))}
    assert wanted and wanted <= exposed, wanted - exposed


def test_metrics_are_guarded_by_token_or_loopback(settings):  # type: ignore[no-untyped-def]
    open_app = create_app(settings)
    try:
        remote = open_app.test_client().get("/metrics", environ_base={"REMOTE_ADDR": "10.1.2.3"})
        assert remote.status_code == 403 and "loopback" in remote.get_data(as_text=True)
    finally:
        open_app.extensions["gridshift"].engine.dispose()
    guarded = create_app(replace(settings, metrics_token="s3cret-scrape"))
    try:
        c = guarded.test_client()
        assert c.get("/metrics").status_code == 401
        assert c.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
        ok = c.get("/metrics", headers={"Authorization": "Bearer s3cret-scrape"},
                   environ_base={"REMOTE_ADDR": "10.1.2.3"})
        assert ok.status_code == 200 and b"gridshift_plan_jobs" in ok.data
    finally:
        guarded.extensions["gridshift"].engine.dispose()


def test_request_ids_come_back_and_json_logs_carry_them(app, client, session, capsys):  # type: ignore[no-untyped-def]
    given = client.get("/api/v1/health", headers={"X-Request-ID": "trace-42.a"})
    assert given.headers["X-Request-ID"] == "trace-42.a"
    fresh = client.get("/api/v1/health", headers={"X-Request-ID": "bad id with spaces"})
    assert len(fresh.headers["X-Request-ID"]) == 32 and " " not in fresh.headers["X-Request-ID"]

    logs.configure(replace(app.extensions["gridshift"].settings, log_format="json"))
    try:
        with app.test_request_context("/x", headers={"X-Request-ID": "r-1"}):
            app.preprocess_request()
            logging.getLogger("app.test").warning("plan run %s failed", 7, extra={"run_id": 7})
        line = [ln for ln in capsys.readouterr().err.splitlines() if "plan run 7" in ln][-1]
        record = json.loads(line)
        assert record["request_id"] == "r-1" and record["run_id"] == 7 and record["level"] == "WARNING"
    finally:
        logs.configure(app.extensions["gridshift"].settings)


def test_bad_log_settings_name_the_variable():
    out = subprocess.run([sys.executable, "-c", "from app.config import Settings; Settings.from_env()"],
                         cwd=REPO, env={"GRIDSHIFT_LOG_FORMAT": "xml", "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "GRIDSHIFT_LOG_FORMAT" in out.stderr


_WORKER = """
import sys
from app import create_app, migrate
from app.config import Settings
settings = Settings.from_env()
migrate.upgrade(settings)
client = create_app(settings).test_client()
if sys.argv[1] == "serve":
    for _ in range(3):
        assert client.get("/api/v1/health").status_code == 200
else:
    print(client.get("/metrics").get_data(as_text=True))
"""


def test_http_counts_of_every_worker_of_every_pool_add_up(tmp_path):
    """Processes as gunicorn workers: those of one pool share its PROMETHEUS_MULTIPROC_DIR, so a scrape answered by
    any worker reports all of them; compose's web and web-heavy are two pools with a folder each, and a scrape of
    web also reports what web-heavy answered (GRIDSHIFT_METRICS_POOL_DIRS names web-heavy's folder)."""
    web = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "web"), "GRIDSHIFT_METRICS_POOL_DIRS": str(tmp_path / "web-heavy")}
    heavy = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "web-heavy")}
    for folder in ("web", "web-heavy"):
        (tmp_path / folder).mkdir()

    def start(env: dict[str, str], role: str, n: int) -> subprocess.Popen[str]:
        """One process; each its own database (the counts travel through the metrics folders only)."""
        return subprocess.Popen([sys.executable, "-c", _WORKER, role], cwd=REPO, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env={"PATH": "/usr/bin:/bin", "GRIDSHIFT_VAR_DIR": str(tmp_path / f"var{n}"), **env})

    # the three serving workers at once (their pids differ, as gunicorn's do), then web's scrape
    for proc in [start(web, "serve", 0), start(heavy, "serve", 1), start(heavy, "serve", 2)]:
        _out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err[-2000:]
    scrape = start(web, "scrape", 0)
    out, err = scrape.communicate(timeout=180)
    assert scrape.returncode == 0, err[-2000:]
    got = _samples(out)
    health = (("endpoint", "/api/v1/health"), ("method", "GET"), ("status", "200"))
    assert got[("gridshift_http_requests_total", health)] == 9  # 3 answered by web, 6 by web-heavy
    latency = (("endpoint", "/api/v1/health"), ("le", "+Inf"), ("method", "GET"))
    assert got[("gridshift_http_request_duration_seconds_bucket", latency)] == 9
    assert ("gridshift_plan_jobs", (("outcome", "planned"),)) not in got  # no plan yet: nothing made up
