"""A job's fields as one typed value, from submission to the optimizer's ``Job``.

Submission validates a request's fields (``app.services.jobs.check_job``, which names each bad field) and then holds
them as a :class:`JobValues`: that value is what is stored, what the preview plans, and what the planner reads back
from a stored row (:meth:`JobValues.from_row`). Defaults are applied once, at submission, so no reader needs a
fallback. Durations are rounded once: the work is turned into minutes per hardware type here, rounded up to whole
seconds (:meth:`JobValues.minutes_on`; a 20-second job lasts 20 seconds, not a minute or a slot). The planning grid
turns them into slots (``optimizer.grid.TimeGrid.slots_needed``); chunk lengths and overheads, whole minutes, become
slots by exact integer division (:func:`minutes_to_slots`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from app.enums import WorkloadClass
from app.models import Job
from app.services.fleet import REFERENCE_HARDWARE, FleetSnapshot


@dataclass(frozen=True, slots=True)
class JobValues:
    """What a job asks for: its work, where and on what it may run, its window and how it runs."""

    name: str | None
    workload_class: WorkloadClass
    gpu_count: int
    reference_gpu_hours: float | None  # work on the reference hardware [GPU-h], or
    reference_hardware: str | None
    durations_minutes: dict[str, int] | None  # explicit duration per hardware code [min]
    memory_gb_per_gpu: float
    allowed_regions: list[str] | None
    residency_tag: str | None
    allowed_hardware: list[str] | None
    home_region: str | None
    release_at: datetime
    deadline_at: datetime
    priority: int
    interruptible: bool
    checkpoint_overhead_minutes: int
    min_chunk_minutes: int
    command: str | None
    image: str | None
    env: dict[str, Any]

    @classmethod
    def from_row(cls, job: Job) -> JobValues:
        """The values a stored job was submitted with."""
        return cls(**{name: getattr(job, name) for name in JOB_COLUMNS})

    @classmethod
    def from_fields(cls, row: Mapping[str, Any]) -> JobValues:
        """The value of fields that :func:`normalise` defaulted and validation accepted."""
        return cls(**{name: row[name] for name in JOB_COLUMNS})

    def as_row(self) -> dict[str, Any]:
        """The ``jobs`` columns this value fills."""
        return {name: getattr(self, name) for name in JOB_COLUMNS}

    def minutes_on(self, fleet: FleetSnapshot) -> dict[str, float]:
        """Duration on each hardware type the job may use [min], rounded up to whole seconds (the one rounding)."""
        return minutes_on(self.as_row(), fleet)


#: The ``jobs`` columns a submission fills, in :class:`JobValues`' order.
JOB_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(JobValues))


def normalise(submitted: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """A submission's fields with every default applied (release now, training, no priority, 60-minute chunks ...)."""
    row = {k: submitted.get(k) for k in JOB_COLUMNS}
    row["workload_class"] = WorkloadClass(row["workload_class"] or WorkloadClass.TRAINING)
    row["release_at"] = row["release_at"] or now
    row["priority"] = row["priority"] or 0
    row["interruptible"] = bool(row["interruptible"])
    row["checkpoint_overhead_minutes"] = row["checkpoint_overhead_minutes"] or 0
    row["min_chunk_minutes"] = row["min_chunk_minutes"] or 60
    row["memory_gb_per_gpu"] = row["memory_gb_per_gpu"] or 0.0
    row["env"] = row["env"] or {}
    if row["reference_gpu_hours"] is not None and not row["reference_hardware"]:
        row["reference_hardware"] = REFERENCE_HARDWARE
    return row


def minutes_on(row: Mapping[str, Any], fleet: FleetSnapshot) -> dict[str, float]:
    """Duration on each hardware type [min], rounded up to whole seconds, from normalised fields (validation reads it
    before the fields become a :class:`JobValues`): the explicit durations, else the reference work scaled by
    throughput."""
    explicit = row.get("durations_minutes")
    if explicit:
        return {hw: _whole_seconds(float(m)) for hw, m in explicit.items()}
    ref = row.get("reference_hardware") or REFERENCE_HARDWARE
    cls = str(row.get("workload_class") or WorkloadClass.TRAINING)
    ref_thr = fleet.throughput(ref, cls)
    gpu_hours = float(row["reference_gpu_hours"])
    return {hw: _whole_seconds(gpu_hours / row["gpu_count"] * ref_thr / fleet.throughput(hw, cls) * 60.0)
            for hw in fleet.hardware}


def _whole_seconds(minutes: float) -> float:
    """``minutes`` rounded up to a whole second (at least one) [min]."""
    return max(1, math.ceil(minutes * 60.0 - 1e-6)) / 60.0


def minutes_to_slots(minutes: int, slot_minutes: int) -> int:
    """Whole minutes as slots, a started slot counting whole (exact integer ceiling; minutes are already whole)."""
    return -(-minutes // slot_minutes)
