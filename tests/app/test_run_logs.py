"""GET /api/v1/jobs/{id}/runs/{run_id}/log: a run's output from its runtime, tailed, capped and tenant-scoped."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import select

from app import create_app
from app.enums import Role, RunState
from app.models import Cluster, Run
from tests.app.test_dispatch_support import add_local_clusters
from tests.app.test_reports_support import submit
from tests.conftest import make_token

LINES = [f"step {i} loss {1.0 / (i + 1):.4f}\n" for i in range(200)]


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def run_with_log(session, small_fleet, tmp_path, now):
    """A run of team-a's job on the Frankfurt local cluster, whose job.log holds 200 lines."""
    dirs = add_local_clusters(session, tmp_path)
    tokens = {"a": make_token(session, "team-a"), "b": make_token(session, "team-b"),
              "ops": make_token(session, "ops", Role.READONLY, operator=True)}
    (job,) = submit(session, "team-a", now, 1)
    cluster = session.scalar(select(Cluster).where(Cluster.name == "de-local"))
    run = Run(job_id=job, cluster_id=cluster.id, run_key="rk-log", runtime_job_id="rk-log", state=RunState.RUNNING)
    pending = Run(job_id=job, run_key="rk-none", state=RunState.DISPATCHING)
    session.add_all([run, pending])
    session.commit()
    log = Path(dirs["de"]) / "runs" / "rk-log" / "job.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("".join(LINES))
    return tokens, job, run.id, pending.id, log


def test_tail_by_lines_and_bytes_and_download(client, run_with_log):
    tokens, job, run_id, _pending, log = run_with_log
    url = f"/api/v1/jobs/{job}/runs/{run_id}/log"
    resp = client.get(url, headers=auth(tokens["a"]))
    assert resp.status_code == 200 and resp.mimetype == "text/plain"
    assert resp.get_data(as_text=True) == "".join(LINES) and resp.headers["X-Log-Truncated"] == "false"
    resp = client.get(url + "?tail_lines=3", headers=auth(tokens["a"]))
    assert resp.get_data(as_text=True) == "".join(LINES[-3:]) and resp.headers["X-Log-Truncated"] == "true"
    resp = client.get(url + "?tail_bytes=10", headers=auth(tokens["a"]))
    assert resp.get_data() == "".join(LINES).encode()[-10:] and resp.headers["X-Log-Truncated"] == "true"
    resp = client.get(url + "?download=true", headers=auth(tokens["a"]))
    assert "attachment" in resp.headers["Content-Disposition"]
    # The log grows while the job runs: the next read has the new line.
    with log.open("a") as f:
        f.write("step 200 done\n")
    assert client.get(url + "?tail_lines=1", headers=auth(tokens["a"])).get_data(as_text=True) == "step 200 done\n"


def test_log_is_capped(settings, session, run_with_log):
    tokens, job, run_id, _pending, _log = run_with_log
    application = create_app(replace(settings, log_max_bytes=100))
    try:
        c = application.test_client()
        resp = c.get(f"/api/v1/jobs/{job}/runs/{run_id}/log", headers=auth(tokens["a"]))
        assert len(resp.get_data()) == 100 and resp.headers["X-Log-Truncated"] == "true"
        resp = c.get(f"/api/v1/jobs/{job}/runs/{run_id}/log?tail_bytes=101", headers=auth(tokens["a"]))
        assert resp.status_code == 422 and resp.json["errors"][0]["field"] == "tail_bytes"
    finally:
        application.extensions["gridshift"].engine.dispose()


def test_log_is_tenant_scoped(client, run_with_log):
    tokens, job, run_id, pending, _log = run_with_log
    url = f"/api/v1/jobs/{job}/runs/{run_id}/log"
    resp = client.get(url, headers=auth(tokens["b"]))
    assert resp.status_code == 404 and "step" not in resp.get_data(as_text=True)
    assert client.get(url, headers=auth(tokens["ops"])).status_code == 200  # a read-only operator reads it
    assert client.get(f"/api/v1/jobs/{job}/runs/{run_id + 99}/log", headers=auth(tokens["a"])).status_code == 404
    resp = client.get(f"/api/v1/jobs/{job}/runs/{pending}/log", headers=auth(tokens["a"]))
    assert resp.status_code == 404 and "not reached a runtime" in resp.json["detail"]
    resp = client.get(url + "?tail_lines=-1", headers=auth(tokens["a"]))
    assert resp.status_code == 422 and resp.json["errors"][0]["field"] == "tail_lines"
