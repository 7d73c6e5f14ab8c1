"""Run work in a forked child process while the planner goes on in the parent (a second worker).

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
import weakref
from collections.abc import Callable
from typing import Any

from optimizer.bound import Multipliers, subgradient
from optimizer.tables import Tables

PARALLEL_ASCENT_MAX_JOBS = 20_000  # beyond, two processes' evaluation temporaries may not fit in memory
# longest wait [s] for the next piece of an answer the child has started sending (it only pickles and writes then:
# a plan of 100,000 jobs is ~6 MiB, written in well under a second)
SEND_STALL_S = 2.0


def _end(pid: int, read_fd: int) -> None:
    """Close the pipe, kill the child and reap it."""
    with contextlib.suppress(OSError):
        os.close(read_fd)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, 9)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


class Child:
    """A forked child computing ``fn()``; :meth:`result` collects its return value.

    A child whose result is never asked for (the caller raised) is killed and reaped when this object is
    collected, so no process outlives the solve that started it.
    """

    def __init__(self, pid: int, read_fd: int) -> None:
        self.pid, self.read_fd = pid, read_fd
        self._finalizer = weakref.finalize(self, _end, pid, read_fd)

    def result(self, timeout_s: float) -> Any | None:
        """The child's return value, or ``None`` if it failed or did not start answering within ``timeout_s`` [s].

        A child that has started sending has finished its work: the rest of its answer is read to the end even
        past ``timeout_s`` (a pipe holds 64 KiB, so a larger answer comes in pieces as the parent reads), as long
        as each piece follows the last within ``SEND_STALL_S``.
        """
        chunks: list[bytes] = []
        deadline = time.perf_counter() + max(0.0, timeout_s)
        try:
            while True:
                wait = SEND_STALL_S if chunks else max(0.0, deadline - time.perf_counter())
                ready, _, _ = select.select([self.read_fd], [], [], wait)
                if not ready:
                    chunks = []  # too late, or stalled half-way: the child is killed below
                    break
                data = os.read(self.read_fd, 1 << 20)
                if not data:
                    break
                chunks.append(data)
        finally:
            self._finalizer()  # runs once: a later collection does nothing
        try:
            ok, value = pickle.loads(b"".join(chunks))
        except Exception:
            return None
        return value if ok else None


def _fork_branch() -> tuple[int | None, Child | None]:
    """Fork, both processes carrying on from here: ``(write end, None)`` in the child, ``(None, Child)`` in the
    parent, ``(None, None)`` where fork is unavailable. The child ends with ``_send_and_exit``."""
    if not hasattr(os, "fork"):
        return None, None
    read_fd, write_fd = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
        return None, None
    if pid == 0:
        os.close(read_fd)
        return write_fd, None
    os.close(write_fd)
    return None, Child(pid, read_fd)


def _send_and_exit(write_fd: int, value: Any, ok: bool = True) -> None:
    """Send ``value`` to the parent and end the child without running the parent's exit handlers."""
    code = 0
    try:
        payload = pickle.dumps((ok, value))
    except BaseException:
        payload, code = pickle.dumps((False, None)), 1
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(write_fd, view) :]
    finally:
        os._exit(code)


def fork_call(fn: Callable[[], Any], *, yield_to_parent: bool = True) -> Child | None:
    """Start ``fn()`` in a forked child; ``None`` where fork is not available (the caller runs alone).

    ``yield_to_parent`` lowers the child's priority, for a child that works beside a busy parent; a child the
    parent waits for (``False``) keeps the parent's priority, or another process on the machine would take the
    cores the parent leaves idle.
    """
    write_fd, child = _fork_branch()
    if write_fd is not None:  # child: compute, send, leave (an exception is sent as "no result")
        # lower priority: on a quiet machine the second core is the child's alone; where the cores are shared
        # with other work, the parent (which holds the plan and the LP bound) keeps its share
        if yield_to_parent:
            with contextlib.suppress(OSError):
                os.nice(5)
        try:
            value, ok = fn(), True
        except BaseException:
            value, ok = None, False
        _send_and_exit(write_fd, value, ok)
    return child


def start_ascent(
    tb: Tables, num_workers: int, upper: float, m: Multipliers, eval_s: float, left_s: float
) -> Child | None:
    """Resume the subgradient ascent from ``m`` on the second worker for the ``left_s`` [s] of the solve left.

    ``eval_s`` is one Lagrangian evaluation [s]; ``None`` with one worker, beyond
    ``PARALLEL_ASCENT_MAX_JOBS`` jobs, with too little time, or where fork fails.
    """
    if num_workers < 2 or tb.J > PARALLEL_ASCENT_MAX_JOBS or left_s <= 4 * eval_s + 1.0:
        return None
    budget_s = left_s - 3 * eval_s - 0.5  # an iteration (two evaluations) may start just before it ends
    return fork_call(lambda: subgradient(tb, upper, start=m, max_iter=100_000, time_limit_s=budget_s)[:2])
