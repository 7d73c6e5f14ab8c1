"""Private services for the dispatch benches: a Redis server, a PostgreSQL cluster, Celery worker processes.

Everything runs on loopback on ports 8600-8649 (the dispatch bench range) and under one temporary directory,
so a bench never touches the shared Redis or PostgreSQL. Every process is stopped by its own pid.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PG_BIN = Path("/usr/lib/postgresql/15/bin")


def wait_until(check: Callable[[], Any], timeout_s: float, every_s: float = 0.1, what: str = "condition") -> Any:
    """Poll ``check`` until truthy; raise TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(Exception):
            value = check()
            if value:
                return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout_s} s")
        time.sleep(every_s)


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def stop_pid(pid: int | None, *, group: bool = False, timeout_s: float = 10.0) -> None:
    """SIGTERM a process (or its process group), SIGKILL it if it lingers."""
    if not pid:
        return
    kill = os.killpg if group else os.kill
    with contextlib.suppress(ProcessLookupError, PermissionError):
        kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


class PrivateRedis:
    """``redis-server`` on a port of our own, keeping nothing on disk (like the machine's own)."""

    def __init__(self, port: int, base: Path) -> None:
        self.port, self.base = port, base
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        log = open(self.base / f"redis-{self.port}.log", "ab")  # noqa: SIM115 - handed to the daemon
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.base)], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        log.close()
        wait_until(lambda: port_open(self.port), 10, what=f"redis on {self.port}")

    def restart(self, down_s: float = 0.0) -> None:
        """``shutdown nosave`` (queued and unacked messages are gone), then start again after ``down_s``."""
        subprocess.run(["redis-cli", "-p", str(self.port), "shutdown", "nosave"], capture_output=True, timeout=10)
        if self.proc is not None:
            self.proc.wait(timeout=10)
        time.sleep(down_s)
        self.start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            stop_pid(self.proc.pid)


class PrivatePostgres:
    """A throw-away PostgreSQL 15 cluster (initdb + pg_ctl as user postgres) on a port of our own."""

    def __init__(self, port: int, base: Path) -> None:
        self.port = port
        self.data = base / "pgdata"
        self.base = base

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _as_postgres(self, *args: str, timeout: float = 60) -> None:
        cmd = list(args) if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--", *args]
        subprocess.run(cmd, check=True, capture_output=True, timeout=timeout)

    def start(self) -> None:
        if not (self.data / "PG_VERSION").exists():
            self.data.mkdir(parents=True)
            if os.geteuid() == 0:
                shutil.chown(self.base, "postgres")
                shutil.chown(self.data, "postgres")
            self._as_postgres(str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self._as_postgres(
            str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.data / "server.log"), "-w", "-o",
            f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off", "start",
        )  # fmt: skip

    def restart(self, down_s: float = 0.0) -> None:
        """Stop (fast: open connections are cut), wait ``down_s``, start again."""
        self._as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
        time.sleep(down_s)
        self.start()

    def stop(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError):
            self._as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")


class Worker:
    """A ``celery worker`` process (prefork) for the app module ``app_module``, in its own process group."""

    def __init__(self, env: dict[str, str], log: Path, *, app_module: str = "app.worker", concurrency: int = 2,
                 name: str = "bench") -> None:  # fmt: skip
        self.env, self.log, self.app_module, self.concurrency, self.name = env, log, app_module, concurrency, name
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 60.0) -> None:
        start_at = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", self.app_module, "worker", "-Q", "gridshift", "-c",
                 str(self.concurrency), "--pool", "prefork", "-l", "info", "--without-mingle", "--without-gossip",
                 "-n", f"{self.name}-{time.monotonic_ns()}@%h"],
                cwd=REPO, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"worker exited: {self.log.read_bytes()[start_at:][-1500:].decode(errors='replace')}")
            return b"ready." in self.log.read_bytes()[start_at:]

        wait_until(ready, timeout_s, what="celery worker ready")

    def children(self) -> list[int]:
        if self.proc is None:
            return []
        try:
            text = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        except OSError:
            return []
        return [int(p) for p in text.split()]

    def kill9(self, *, whole: bool = True) -> None:
        """kill -9 the whole worker (main process and pool), or only one pool child."""
        if self.proc is None:
            return
        if whole:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
            self.proc = None
        else:
            kids = self.children()
            if kids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(kids[0], signal.SIGKILL)

    def stop(self) -> None:
        if self.proc is not None:
            stop_pid(self.proc.pid, group=True, timeout_s=15)
            self.proc = None


def worker_env(settings_env: dict[str, str]) -> dict[str, str]:
    """The environment of a worker: ours without GRIDSHIFT_* plus the given settings and PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRIDSHIFT_")}
    env.update(settings_env)
    env["PYTHONPATH"] = str(REPO)
    return env


def temp_base(prefix: str) -> Path:
    base = Path(tempfile.mkdtemp(prefix=prefix))
    base.chmod(0o755)
    return base
