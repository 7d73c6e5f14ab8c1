"""gunicorn settings for ``/metrics`` across workers: ``gunicorn -c python:app.gunicorn_conf ... app.wsgi:app``.

With ``PROMETHEUS_MULTIPROC_DIR`` set (an empty folder the workers may write), each worker writes its HTTP counts
there; the master deletes its *.db files on start and drops a dead worker's live gauges. Without it, nothing happens here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.config import Settings


def on_starting(server: Any) -> None:
    folder = Settings.from_env().metrics_multiproc_dir
    if folder is not None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        for old in Path(folder).glob("*.db"):  # counts of an earlier master would add up with ours
            old.unlink(missing_ok=True)


def child_exit(server: Any, worker: Any) -> None:
    if Settings.from_env().metrics_multiproc_dir is not None:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
