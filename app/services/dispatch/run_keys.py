"""Run keys: the idempotency key a run is known by on its runtime (Slurm job name, Ray submission id, ...)."""

from __future__ import annotations

import secrets


def new_run_key(job_id: int, attempt: int, hardware: str) -> str:
    """Idempotency key of a new run, e.g. ``gs-17-1-h100-3fa9c2`` (a DNS-1123 label, <= 63 chars).

    The random tail keeps keys unique when a database is rebuilt against a runtime that still remembers the
    old keys; the hardware code is there for operators reading the runtime's queue. Nothing parses a key back: the
    run's hardware is its ``hardware_type_id`` column.
    """
    hw = "".join(c for c in hardware.lower() if c.isalnum())[:16] or "hw"
    return f"gs-{job_id}-{attempt}-{hw}-{secrets.token_hex(3)}"
