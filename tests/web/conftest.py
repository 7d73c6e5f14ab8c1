"""Browser fixtures: the app served by werkzeug on 127.0.0.1 (ports 8650-8699) and Debian's chromium via Playwright.

Playwright's own browser download cannot work here, so the tests drive /usr/bin/chromium; they skip with the
reason when it (or the playwright package) is absent. .ci/run installs chromium.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from werkzeug.serving import make_server

from app import create_app
from app.config import Settings
from app.services import demo
from tests.conftest import empty_tables

CHROMIUM = Path(os.environ.get("GRIDSHIFT_TEST_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-quic", "--no-first-run"]
PORTS = range(8650, 8700)
SHOTS = os.environ.get("GRIDSHIFT_TEST_SHOTS")  # a folder: the tests save screenshots there when set


@dataclass
class LiveServer:
    url: str
    tokens: dict[str, str]


def _free_port() -> int:
    for port in PORTS:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 8650-8699")


def _plan_worker(state, stop: threading.Event) -> None:  # type: ignore[no-untyped-def]
    """What the Celery worker's ``gridshift.plan.run`` task does, for the plan runs the dashboard queues."""
    from sqlalchemy import select

    from app.models import PlanRun
    from app.services import plan_runs

    while not stop.wait(0.2):
        with state.sessions() as session:
            for run_id in session.scalars(select(PlanRun.id).where(PlanRun.state == "queued")).all():
                plan_runs.execute(session, state.settings, run_id)


@pytest.fixture(scope="module")
def live_server(_db_settings: Settings) -> Iterator[LiveServer]:
    """The demo fleet (synthetic market data, no demo jobs) served on loopback, seeded once per module.

    Seeding takes seconds, so the module shares one server; the tables are emptied afterwards as the
    function-scoped ``settings`` fixture does for the other tests.
    """
    # a browser test clicks through several expensive requests a minute (re-plans, previews, PDFs): without the
    # tenants' cost budget here, which tests/security/test_cost_limits.py covers
    app = create_app(replace(_db_settings, cost_budget=""))
    state = app.extensions["gridshift"]
    with state.sessions() as session:
        result = demo.seed(session, _db_settings, data_dir=None, n_jobs=0)
        session.commit()
    server = make_server("127.0.0.1", _free_port(), app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    stop = threading.Event()
    worker = threading.Thread(target=_plan_worker, args=(state, stop), daemon=True)
    worker.start()
    try:
        yield LiveServer(f"http://127.0.0.1:{server.server_port}", result.tokens)
    finally:
        server.shutdown()
        stop.set()
        thread.join(timeout=10)
        worker.join(timeout=120)
        state.engine.dispose()
        empty_tables(_db_settings)


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    if not CHROMIUM.exists():
        pytest.skip(f"needs Debian's chromium at {CHROMIUM} (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, live_server):  # type: ignore[no-untyped-def]
    """A fresh browser context at 1280 px; console errors and failed requests fail the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True,
                                  timezone_id="Europe/Berlin")
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    errors: list[str] = []
    # HTTP error answers the page handles (e.g. 404 before the first plan) are logged by chromium too: not errors.
    pg.on("console", lambda m: errors.append(f"console: {m.text}")
          if m.type == "error" and "Failed to load resource" not in m.text else None)
    pg.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    # a request the page itself cancels by navigating away (net::ERR_ABORTED) is not a failure
    pg.on("requestfailed", lambda r: errors.append(f"request failed: {r.url} {r.failure}")
          if "ERR_ABORTED" not in str(r.failure) else None)
    pg.gs_errors = errors  # type: ignore[attr-defined]
    yield pg
    context.close()
    assert not errors, errors


def shot(page, name: str) -> None:  # type: ignore[no-untyped-def]
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=False)


def sign_in(page, server: LiveServer, tenant: str, path: str = "/") -> None:  # type: ignore[no-untyped-def]
    page.goto(server.url + path)
    assert "/ui/signin" in page.url
    page.fill("#token", server.tokens[tenant])
    page.click("#signin-form button[type=submit]")
    page.wait_for_url(server.url + path)
