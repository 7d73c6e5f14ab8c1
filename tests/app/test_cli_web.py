"""`gridshift web` (and so `make run`) serves through a production WSGI server, not Werkzeug's development one."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.conftest import REPO


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_web_serves_through_waitress(cli_env: Path) -> None:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "web", "--host", "127.0.0.1", "--port", str(port)],
                            cwd=REPO, env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/health", timeout=5) as resp:
                    server, body = resp.headers.get("Server", ""), json.load(resp)
                break
            except OSError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                assert time.monotonic() < deadline, "gridshift web did not answer within 60 s"
                time.sleep(0.3)
        assert body["status"] == "ok"
        assert server == "gridshift", f"Server header {server!r}: not waitress (Werkzeug says 'Werkzeug/…')"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
