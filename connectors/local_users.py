"""Unprivileged OS users that local jobs run as, and the clean-up that makes a user safe to hand on.

Standard library only: the local supervisor loads this file by its path (``python -I`` puts no package on the path).

A run takes one user of the pool for its whole life by holding an exclusive ``flock`` on ``LOCK_DIR/<user>.lock``;
the lock is host-wide (every state dir, every worker) and the kernel drops it when the supervisor dies, so a user is
never shared by two live runs and never leaked by a crash. Before a run starts and after it ends, every process of
the user is killed and every file it left in the shared temporary directories is removed, so the next run (maybe
another tenant's) finds nothing of it. A pool user that does not exist yet is created with ``useradd`` (no home,
no login shell, its own group), which needs root, as does running a job as another user.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

#: Shared directories a job may write to besides its work dir; cleared of the user's files between runs.
SHARED_TMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
NOLOGIN = next(
    (s for s in ("/usr/sbin/nologin", "/sbin/nologin", "/bin/false") if os.path.exists(s)), "/bin/false"
)


@dataclass
class RunUser:
    """A pool user held by one run: its name, ids and the open lock file that holds it."""

    name: str
    uid: int
    gid: int
    lock: IO[str] | None = None


def pool_names(config: dict) -> list[str]:
    """User names of the pool: ``run_users`` when listed, else ``<run_user_prefix>0 .. N-1``."""
    if config.get("run_users"):
        return [str(n) for n in config["run_users"]]
    prefix = config.get("run_user_prefix") or "gridshift-run-"
    return [f"{prefix}{i}" for i in range(int(config.get("run_user_count") or 8))]


def ensure_user(name: str) -> pwd.struct_passwd:
    """The passwd entry of ``name``, created with ``useradd`` (system user, no home, no login) when missing."""
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(name)
    done = subprocess.run(
        ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
         "--shell", NOLOGIN, "--comment", "gridshift job user", name],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    if done.returncode not in (0, 9):  # 9: it exists (created by a racing supervisor)
        raise RuntimeError(f"cannot create run user {name!r}: {done.stderr.strip() or done.returncode}")
    entry = pwd.getpwnam(name)
    if entry.pw_uid == 0:
        raise RuntimeError(f"run user {name!r} has uid 0; jobs never run as root")
    return entry


def claim(names: list[str], lock_dir: Path) -> RunUser | None:
    """Take a free user of the pool (non-blocking); None when every one is held by a live run."""
    lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    for name in names:
        handle = open(lock_dir / f"{name}.lock", "a+")  # noqa: SIM115 - held open for the run's life
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        try:
            entry = ensure_user(name)
        except Exception:
            handle.close()
            raise
        user = RunUser(name, entry.pw_uid, entry.pw_gid, handle)
        scrub(user)  # whatever a crashed earlier run of this user left behind
        return user
    return None


def release(user: RunUser) -> None:
    """Scrub the user and drop its lock, so that another run may take it."""
    try:
        scrub(user)
    finally:
        if user.lock is not None:
            user.lock.close()
            user.lock = None


def scrub(user: RunUser) -> None:
    """Kill every process of the user and remove its files from the shared temporary directories."""
    if user.uid == 0:
        return
    for _ in range(3):
        if not _kill_all(user.uid):
            break
        time.sleep(0.1)
    for shared in SHARED_TMP_DIRS:
        try:
            entries = list(os.scandir(shared))
        except OSError:
            continue
        for entry in entries:
            with contextlib.suppress(OSError):
                if entry.stat(follow_symlinks=False).st_uid != user.uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)


def _kill_all(uid: int) -> bool:
    """SIGKILL every process whose real or effective uid is ``uid``; True when there was one."""
    found = False
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text().splitlines()
            uids = next(line for line in status if line.startswith("Uid:"))
            zombie = any(line.startswith("State:") and "Z" in line.split()[1] for line in status)
            if not zombie and uid in {int(x) for x in uids.split()[1:3]}:
                os.kill(int(entry.name), signal.SIGKILL)
                found = True
        except (OSError, StopIteration, ValueError):
            continue
    return found


def make_work_dir(run_key: str, parent: str | None, user: RunUser | None) -> Path:
    """A fresh private directory for the job (0700, owned by the run user when there is one)."""
    path = Path(tempfile.mkdtemp(prefix=f"gridshift-{run_key}-", dir=parent))
    if user is not None:
        os.chown(path, user.uid, user.gid)
    return path


def remove_work_dir(path: Path | str | None) -> None:
    """Delete a job's work dir and everything in it (symlinks are removed, never followed)."""
    if path:
        shutil.rmtree(path, ignore_errors=True)
