"""Run keys: the idempotency key a run is known by on its runtime (Slurm job name, Ray submission id, ...)."""

from __future__ import annotations

import secrets


def new_run_key(job_id: int, attempt: int, hardware: str) -> str:
    """Idempotency key of a new run, e.g. ``gs-17-1-h100-3fa9c2`` (a DNS-1123 label, <= 63 chars).

    The random tail keeps keys unique when a database is rebuilt against a runtime that still remembers the
    old keys; the hardware code is readable by operators on the runtime side.
    """
    hw = "".join(c for c in hardware.lower() if c.isalnum())[:16] or "hw"
    return f"gs-{job_id}-{attempt}-{hw}-{secrets.token_hex(3)}"


def hardware_of_run_key(run_key: str) -> str | None:
    """Hardware code written into a run key by :func:`new_run_key`, or None for a foreign key."""
    parts = run_key.split("-")
    return parts[3] if len(parts) == 5 and parts[0] == "gs" else None
