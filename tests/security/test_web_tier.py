"""The production front (deploy/nginx.conf) and its two gunicorn pools (docker-compose.yml's web and web-heavy).

nginx runs for real with the production file (only its upstream and listen lines changed, as bench/abuse_bench.py
does), in front of two stub upstreams that answer which pool they are and what they received. Skipped where nginx
is not installed (``apt-get install nginx-light``).
"""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench import abuse_bench
from tests.conftest import REPO

SERVICES = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
HOST = "127.0.0.1"


class Pool(ThreadingHTTPServer):
    """A stub gunicorn pool: answers 200 with its name, the method, path and body length it received; paths under
    ``/api/v1/reports/`` take ``slow_s`` seconds."""

    daemon_threads = True

    def __init__(self, name: str, slow_s: float = 0.0) -> None:
        self.name, self.slow_s = name, slow_s
        self.seen: list[tuple[str, str, int]] = []
        super().__init__((HOST, 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: Pool

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        received = len(self.rfile.read(length)) if length else 0
        self.server.seen.append((self.command, self.path, received))
        if self.path.startswith("/api/v1/reports/"):
            time.sleep(self.server.slow_s)
        body = json.dumps({"pool": self.server.name, "received": received}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def front() -> Iterator[tuple[int, Pool, Pool]]:
    if shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists():
        pytest.skip("needs nginx (apt-get install nginx-light)")
    web, heavy = Pool("web"), Pool("heavy", slow_s=1.0)
    for pool in (web, heavy):
        threading.Thread(target=pool.serve_forever, daemon=True).start()
    with socket.socket() as s:
        s.bind((HOST, 0))
        port = s.getsockname()[1]
    # nginx's workers (nobody, under root) keep bodies over 1 MiB in temp files there: not under pytest's 0700 tmp
    workdir = tempfile.TemporaryDirectory(prefix="gs-front-")
    Path(workdir.name).chmod(0o755)
    proc = abuse_bench.start_nginx(web.server_address[1], heavy.server_address[1], port, Path(workdir.name))
    try:
        yield port, web, heavy
    finally:
        abuse_bench.stop(proc)
        workdir.cleanup()
        for pool in (web, heavy):
            pool.shutdown()
            pool.server_close()


def call(
    port: int, method: str, path: str, body: bytes = b"", token: str = "gs_0123abcd_secret"
) -> tuple[int, dict[str, Any]]:
    """(status, the JSON answer with ``retry_after`` added; {} for an answer that is not JSON)."""
    conn = http.client.HTTPConnection(HOST, port, timeout=30)
    try:
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        conn.request(method, path, body=body or None, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        answer = json.loads(data) if "json" in resp.getheader("Content-Type", "") else {}
        return resp.status, {**answer, "retry_after": resp.getheader("Retry-After")}
    finally:
        conn.close()


def announce(port: int, method: str, path: str, length: int) -> int:
    """The status nginx answers to a request that announces a ``length``-byte body and sends none of it."""
    with socket.create_connection((HOST, port), timeout=10) as sock:
        sock.sendall(
            f"{method} {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer gs_0123abcd_secret\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n".encode()
        )
        return int(sock.recv(4096).split(b" ", 2)[1])


@pytest.mark.parametrize(
    ("method", "path", "pool"),
    [
        ("POST", "/api/v1/jobs/batch", "heavy"),
        ("GET", "/api/v1/reports/monthly?month=2026-11", "heavy"),
        ("GET", "/api/v1/reports/monthly.pdf", "heavy"),
        ("POST", "/api/v1/plans/preview", "heavy"),
        ("POST", "/api/v1/plans", "heavy"),  # a re-plan
        ("POST", "/api/v1/simulations", "heavy"),
        ("GET", "/api/v1/plans", "web"),  # reading plans and simulations is not heavy
        ("GET", "/api/v1/simulations", "web"),
        ("GET", "/api/v1/jobs?limit=20", "web"),
        ("POST", "/api/v1/jobs", "web"),
        ("GET", "/api/v1/health", "web"),
    ],
)
def test_expensive_operations_go_to_the_heavy_pool_and_the_rest_to_web(front, method, path, pool) -> None:
    port, _web, _heavy = front
    status, answer = call(port, method, path, b"{}" if method == "POST" else b"")
    assert status == 200
    assert answer["pool"] == pool


def test_heavy_locations_refuse_oversized_bodies_from_the_header(front) -> None:
    """A body over a heavy location's limit is 413 before a byte of it reaches a pool; a 3.7 MB batch still goes
    through, and the 32 MiB request limit holds."""
    port, web, heavy = front
    for path in ("/api/v1/plans/preview", "/api/v1/plans", "/api/v1/simulations"):
        assert announce(port, "POST", path, 300_000) == 413, path
    assert announce(port, "GET", "/api/v1/reports/monthly", 20_000) == 413
    assert announce(port, "POST", "/api/v1/jobs/batch", 33 * 1024 * 1024) == 413
    assert web.seen == [] and heavy.seen == []
    status, answer = call(port, "POST", "/api/v1/jobs/batch", b" " * 3_700_000)
    assert (status, answer.get("pool"), answer.get("received")) == (200, "heavy", 3_700_000), answer


def test_one_heavy_request_per_token_at_a_time(front) -> None:
    """While a token's report is being rendered, its second heavy request is 429 problem+json with Retry-After;
    another token's is served, and reads of the same token are not held up."""
    port, _web, heavy = front
    first: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: first.update(r=call(port, "GET", "/api/v1/reports/monthly")))
    worker.start()
    deadline = time.monotonic() + 10
    while not heavy.seen and time.monotonic() < deadline:
        time.sleep(0.02)
    status, answer = call(port, "GET", "/api/v1/reports/monthly.pdf")
    assert status == 429
    assert answer["status"] == 429 and answer["retry_after"] == "1"
    # any heavy location, same token prefix
    assert call(port, "POST", "/api/v1/plans/preview", b"{}")[0] == 429
    assert call(port, "GET", "/api/v1/jobs")[0] == 200
    assert call(port, "GET", "/api/v1/reports/monthly.csv", token="gs_99999999_other")[0] == 200
    worker.join()
    assert first["r"][0] == 200


def test_a_token_sending_batches_too_fast_is_slowed_not_refused(front) -> None:
    """Six batches at once from one token: none refused, none lost; nginx lets them through at 2 a second."""
    port, _web, heavy = front
    codes: list[int] = []
    started = time.monotonic()
    threads = [threading.Thread(target=lambda: codes.append(call(port, "POST", "/api/v1/jobs/batch", b"{}")[0]))
               for _ in range(6)]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert codes == [200] * 6
    assert len([s for s in heavy.seen if s[1] == "/api/v1/jobs/batch"]) == 6
    assert time.monotonic() - started >= 2.0  # 5 held behind the first, at 2 a second


def test_compose_runs_the_heavy_pool_at_a_lower_priority_as_the_bench_does() -> None:
    """web-heavy is web's command with fewer workers, under nice; nginx waits for both; one heavy request per
    tenant in flight. The bench starts the same shape (bench/abuse_bench.py's HEAVY_WORKERS and HEAVY_NICE)."""
    web, heavy, proxy = SERVICES["web"], SERVICES["web-heavy"], SERVICES["proxy"]
    command = heavy["command"]
    assert command[:3] == ["nice", "-n", str(abuse_bench.HEAVY_NICE)]
    assert abuse_bench.HEAVY_NICE > 0
    gunicorn, web_gunicorn = command[3:], web["command"]
    workers = int(gunicorn[gunicorn.index("--workers") + 1])
    assert workers == abuse_bench.HEAVY_WORKERS < int(web_gunicorn[web_gunicorn.index("--workers") + 1])
    assert _without_workers(gunicorn) == _without_workers(web_gunicorn)
    assert set(proxy["depends_on"]) >= {"web", "web-heavy"}
    trusted = "GRIDSHIFT_TRUSTED_PROXIES"
    assert heavy["environment"][trusted] == web["environment"][trusted]
    assert "ports" not in heavy  # reached through the proxy only
    assert heavy["environment"]["GRIDSHIFT_COST_CONCURRENCY"].endswith(":-1}")


def _without_workers(command: list[str]) -> list[str]:
    at = command.index("--workers")
    return command[:at] + command[at + 2 :]
