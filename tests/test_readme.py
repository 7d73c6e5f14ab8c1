"""The README works as written: its first job runs to success, and every setting is in its configuration table."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from werkzeug.serving import make_server

from app import create_app
from app.config import Settings
from app.enums import JobState
from app.models import Assignment, Job
from app.services import demo, replan
from app.services.dispatch import claim, submit, sync
from tests.conftest import REPO

README = (REPO / "README.md").read_text()


def section(title: str) -> str:
    """The README's ``## title`` section, up to the next ``## `` heading."""
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end > 0 else None]


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def test_every_setting_is_in_the_configuration_table() -> None:
    table = "\n".join(line for line in section("Configuration").splitlines() if line.startswith("|"))
    missing = [f"GRIDSHIFT_{f.name.upper()}" for f in fields(Settings)
               if f.name != "extra" and f"`GRIDSHIFT_{f.name.upper()}`" not in table]  # fmt: skip
    assert not missing, f"settings without a row in README's configuration table: {missing}"


def test_the_two_commands_are_make_targets() -> None:
    makefile = (REPO / "Makefile").read_text()
    commands = re.findall(r"^make (\w+)", bash_blocks(section("The two commands"))[0], flags=re.M)
    assert commands == ["run", "test"]
    for target in commands:
        assert re.search(rf"^{target}:", makefile, flags=re.M), (
            f"README's `make {target}` is not a Makefile target"
        )


@pytest.fixture
def demo_server(settings: Settings, tmp_path: Path) -> Iterator[tuple[str, Settings]]:
    """The demo fleet (synthetic market data, no demo jobs) on loopback; its tokens in tmp_path/var as make run does."""
    settings = replace(settings, plan_time_limit_s=3.0)
    app = create_app(settings)
    state = app.extensions["gridshift"]
    with state.sessions() as session:
        tokens = demo.seed(session, settings, data_dir=None, n_jobs=0).tokens
        session.commit()
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "demo_tokens.json").write_text(json.dumps(tokens))
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_port}", settings
    finally:
        server.shutdown()
        thread.join(timeout=10)
        state.engine.dispose()


def run_readme(script: str, address: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run README shell lines in bash against the test server instead of localhost:8000; stdout."""
    script = script.replace("localhost:8000", address).replace("127.0.0.1:8000", address)
    res = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, capture_output=True, text=True,
                         timeout=60, env={"PATH": "/usr/local/bin:/usr/bin:/bin", **(env or {})})  # fmt: skip
    assert res.returncode == 0, (
        f"README commands failed:\n{script}\n--- stdout\n{res.stdout}\n--- stderr\n{res.stderr}"
    )
    return res.stdout


@pytest.mark.slow
def test_first_job_runs_to_success(demo_server: tuple[str, Settings], tmp_path: Path) -> None:
    if shutil.which("curl") is None:
        pytest.skip("needs curl, which the README's example uses (apt-get install -y curl)")
    address, settings = demo_server
    submit_block, watch_block, batch_block = bash_blocks(section("Your first job, end to end"))
    out = run_readme(submit_block, address, tmp_path)
    assert json.loads(out.splitlines()[0])["status"] == "ok"  # the health check answered
    job_id = int(re.search(r"^job (\d+) submitted$", out, flags=re.M).group(1))  # type: ignore[union-attr]
    token = json.loads((tmp_path / "var" / "demo_tokens.json").read_text())["ml-platform"]
    batch = json.loads(run_readme(batch_block, address, tmp_path, env={"TOKEN": token}))
    assert batch["count"] == len(batch["job_ids"]) == 100

    app = create_app(settings)
    sessions = app.extensions["gridshift"].sessions
    with sessions() as session:
        # What beat's minute check and the dispatch tick do, in-process: plan the new job, claim it, submit it.
        assert replan.replan_new_work(session, settings) is not None
        session.commit()
        job = session.get(Job, job_id)
        assert job is not None and job.command and job.state == JobState.PLANNED, job and job.state_reason
        start = session.scalar(select(Assignment.start_at).where(Assignment.job_id == job_id)
                               .order_by(Assignment.id.desc()))  # fmt: skip
        assert start is not None
        start = start.replace(tzinfo=UTC)
        # A minute of work due at the end of this quarter-hour (the next one near its end): it starts now (README).
        assert start <= datetime.now(UTC) + timedelta(minutes=3)
        time.sleep(max(0.0, (start - datetime.now(UTC)).total_seconds() - settings.dispatch_interval_s + 1))
        batch_jobs = [session.get(Job, i) for i in batch["job_ids"]]
        assert all(j is not None and j.command and j.state == JobState.PLANNED for j in batch_jobs)
        ticked = claim.tick(session, settings, now=datetime.now(UTC), worker="readme-test")
        assert ticked.to_submit
        for run_id in ticked.to_submit:
            submit.submit_run(
                session, settings, run_id, now=datetime.now(UTC), worker="readme-test", fresh=True
            )
        deadline = time.monotonic() + 90 + max(0.0, (start - datetime.now(UTC)).total_seconds())
        while time.monotonic() < deadline:
            sync.sync(session, settings, now=datetime.now(UTC))
            session.expire_all()
            if session.get(Job, job_id).state in (JobState.SUCCEEDED, JobState.FAILED):  # type: ignore[union-attr]
                break
            time.sleep(0.5)
        assert session.get(Job, job_id).state == JobState.SUCCEEDED  # type: ignore[union-attr]
    app.extensions["gridshift"].engine.dispose()

    out = run_readme(watch_block, address, tmp_path, env={"TOKEN": token, "JOB": str(job_id)})
    assert "succeeded" in out and "exit_code" in out
