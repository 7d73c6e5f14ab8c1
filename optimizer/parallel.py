"""Run one function in a forked child process while the planner goes on in the parent (a second worker).

``SolveParams.num_workers`` cores are the planner's to use. Where the Lagrangian bound is still open, the
subgradient ascent runs on the second core for the whole solve while the first one searches for plans;
before, the two took turns on one core. The child gets a copy of everything at the fork (nothing is
pickled on the way in) and sends its result back through a pipe. Where fork is unavailable or fails, the
caller gets ``None`` and goes on alone.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import time
from collections.abc import Callable
from typing import Any


class Child:
    """A forked child computing ``fn()``; :meth:`result` collects its return value."""

    def __init__(self, pid: int, read_fd: int) -> None:
        self.pid, self.read_fd = pid, read_fd

    def result(self, timeout_s: float) -> Any | None:
        """The child's return value, or ``None`` if it failed or did not answer within ``timeout_s`` [s]."""
        chunks: list[bytes] = []
        deadline = time.perf_counter() + max(0.0, timeout_s)
        try:
            while True:
                wait = deadline - time.perf_counter()
                ready, _, _ = select.select([self.read_fd], [], [], max(0.0, wait))
                if not ready:
                    break  # too late: the child is killed below
                data = os.read(self.read_fd, 1 << 20)
                if not data:
                    break
                chunks.append(data)
        finally:
            os.close(self.read_fd)
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, 9)
            os.waitpid(self.pid, 0)
        try:
            ok, value = pickle.loads(b"".join(chunks))
        except Exception:
            return None
        return value if ok else None


def fork_call(fn: Callable[[], Any]) -> Child | None:
    """Start ``fn()`` in a forked child; ``None`` where fork is not available (the caller runs alone)."""
    if not hasattr(os, "fork"):
        return None
    read_fd, write_fd = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
        return None
    if pid == 0:  # child: compute, send, leave without running the parent's exit handlers
        os.close(read_fd)
        code = 0
        try:
            payload = pickle.dumps((True, fn()))
        except BaseException:
            payload, code = pickle.dumps((False, None)), 1
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(write_fd, view) :]
        finally:
            os._exit(code)
    os.close(write_fd)
    return Child(pid, read_fd)
