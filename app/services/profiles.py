"""Job profiles: throughput and power of a workload class on a hardware type, estimated, then measured.

An **estimate** comes from the hardware catalog: the catalog's relative throughput for the class when it has
one, else the ratio to the reference hardware of dense bf16 throughput (compute-bound classes) or memory
bandwidth (memory-bound classes); power is ``idle + u x (TDP - idle)`` (:mod:`app.services.power`) with the
class's default utilisation. A **measurement** (a calibration run on the hardware, or figures given by an
operator) replaces the profile in force: it becomes the active ``job_profiles`` row with ``job_id`` NULL, which
:func:`app.services.fleet.snapshot` hands to planning. A measurement that differs from the profile it
replaces by more than :data:`FLAG_PCT` is flagged. Bad input is rejected before anything is written, so the
previous profile stays in force.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.enums import ProfileSource, WorkloadClass
from app.errors import FieldError, ValidationFailed
from app.models import HardwareType, JobProfile
from app.services import fleet, power

#: A measurement that moves throughput or power by more than this against the profile it replaces is flagged [%].
FLAG_PCT = 20.0
MEMORY_BOUND = frozenset({WorkloadClass.BATCH_INFERENCE.value})
CLASSES = tuple(w.value for w in WorkloadClass)
#: Line a calibration job prints with its own steady-state figures (bench/gpu_workloads.py writes it).
RESULT_PREFIX = "GRIDSHIFT_RESULT "


@dataclass(frozen=True, slots=True)
class Profile:
    """The profile in force for one (workload class, hardware type).

    Attributes
    ----------
    relative_throughput : float
        Work per hour relative to the reference hardware [x].
    power_w : float
        Average draw of one GPU [W].
    utilisation : float or None
        Share of the dynamic power range that ``power_w`` uses [0..1].
    steps_per_s, energy_per_step_j : float or None
        Measured rate [1/s] and energy per step [J] of the calibration workload.
    source : str
        ``estimate`` or ``measured``.
    deviation_pct : float or None
        How far the measurement moved the profile it replaced (largest of throughput and power) [%].
    flagged : bool
        True when ``|deviation_pct|`` exceeds :data:`FLAG_PCT`.
    """

    workload_class: str
    hardware: str
    relative_throughput: float
    power_w: float
    utilisation: float | None
    source: str
    method: str
    steps_per_s: float | None = None
    energy_per_step_j: float | None = None
    measured_at: datetime | None = None
    deviation_pct: float | None = None
    flagged: bool = False
    id: int | None = None


@dataclass(frozen=True, slots=True)
class Measurement:
    """Figures measured for a workload class on a hardware type.

    Attributes
    ----------
    steps_per_s : float
        Steady-state throughput of the calibration workload [1/s].
    power_w : float
        Average draw of one GPU while it ran [W].
    energy_per_step_j : float, optional
        Energy per step of one GPU [J]; defaults to ``power_w / steps_per_s``.
    relative_throughput : float, optional
        Throughput relative to the reference hardware [x], when known; else derived from
        ``reference_steps_per_s``, else the profile in force keeps its throughput.
    reference_steps_per_s : float, optional
        Rate of the same calibration workload on the reference hardware [1/s].
    """

    workload_class: str
    hardware: str
    steps_per_s: float
    power_w: float
    energy_per_step_j: float | None = None
    relative_throughput: float | None = None
    reference_steps_per_s: float | None = None
    method: str = ""
    measured_at: datetime | None = None


# -- estimates ------------------------------------------------------------------------------------------------
def ratio_throughput(hw: HardwareType, ref: HardwareType | None, workload_class: str) -> float | None:
    """Throughput relative to ``ref`` by the roofline side of the class [x]; None when a figure is missing.

    Compute-bound classes (training, fine-tuning, rendering) scale with dense bf16 throughput, memory-bound
    classes (batch inference) with memory bandwidth.
    """
    key = "memory_bandwidth_gbs" if workload_class in MEMORY_BOUND else "bf16_tflops"
    mine, theirs = getattr(hw, key), getattr(ref, key) if ref is not None else None
    if not mine or not theirs or mine <= 0 or theirs <= 0:
        return None
    return float(mine) / float(theirs)


def estimate(hw: HardwareType, ref: HardwareType | None, workload_class: str) -> Profile:
    """The catalog estimate of a class on ``hw`` (see the module docstring)."""
    table = hw.relative_throughput or {}
    if workload_class in table:
        thr, basis = float(table[workload_class]), "catalog relative throughput"
    elif (ratio := ratio_throughput(hw, ref, workload_class)) is not None:
        side = "bandwidth" if workload_class in MEMORY_BOUND else "dense bf16"
        thr, basis = ratio, f"{side} ratio to {ref.code if ref else '?'}"
    else:
        thr, basis = float(table.get("default", 1.0)), "catalog default"
    u = power.default_utilisation(workload_class)
    return Profile(
        workload_class=workload_class, hardware=hw.code, relative_throughput=thr,
        power_w=power.gpu_power_w(hw.idle_w, hw.tdp_w, u), utilisation=u, source=ProfileSource.ESTIMATE.value,
        method=f"estimate: {basis}; power = idle + {u:g} x (TDP - idle)",
    )  # fmt: skip


def _from_row(row: JobProfile, code: str) -> Profile:
    return Profile(
        workload_class=row.workload_class or "", hardware=code, relative_throughput=row.relative_throughput,
        power_w=row.power_w, utilisation=row.utilisation, source=ProfileSource(row.source).value,
        method=row.method, steps_per_s=row.steps_per_s, energy_per_step_j=row.energy_per_step_j,
        measured_at=row.measured_at, deviation_pct=row.deviation_pct, flagged=row.flagged, id=row.id,
    )  # fmt: skip


def _active_row(session: Session, hw: HardwareType, workload_class: str) -> JobProfile | None:
    return session.scalar(
        select(JobProfile).where(
            JobProfile.hardware_type_id == hw.id, JobProfile.workload_class == workload_class,
            JobProfile.job_id.is_(None), JobProfile.active.is_(True),
        ).order_by(JobProfile.id.desc())
    )  # fmt: skip


def _check_class(workload_class: str, field: str = "workload_class") -> None:
    if workload_class not in CLASSES:
        raise ValidationFailed("unknown workload class", [FieldError(field, f"must be one of {', '.join(CLASSES)}")])


def current(session: Session, hardware: str, workload_class: str) -> Profile:
    """The profile in force: the active measured row, else the catalog estimate.

    Raises
    ------
    NotFound
        Unknown hardware type (the message lists the known ones).
    ValidationFailed
        Unknown workload class.
    """
    _check_class(workload_class)
    hw = fleet.get_hardware(session, hardware)
    row = _active_row(session, hw, workload_class)
    if row is not None:
        return _from_row(row, hw.code)
    ref = session.scalar(select(HardwareType).where(HardwareType.code == fleet.REFERENCE_HARDWARE))
    return estimate(hw, ref, workload_class)


def effective(session: Session, *, hardware: str | None = None, workload_class: str | None = None,
              flagged: bool | None = None) -> list[Profile]:  # fmt: skip
    """Every profile in force, ordered by hardware then class; optionally filtered."""
    if workload_class is not None:
        _check_class(workload_class)
    if hardware is not None:
        fleet.get_hardware(session, hardware)
    hws = list(session.scalars(select(HardwareType).order_by(HardwareType.code)))
    ref = next((h for h in hws if h.code == fleet.REFERENCE_HARDWARE), None)
    rows = session.scalars(
        select(JobProfile).where(JobProfile.job_id.is_(None), JobProfile.active.is_(True)).order_by(JobProfile.id)
    )
    active = {(r.hardware_type_id, r.workload_class): r for r in rows}
    out = []
    for hw in hws:
        if hardware is not None and hw.code != hardware:
            continue
        for cls in CLASSES:
            if workload_class is not None and cls != workload_class:
                continue
            row = active.get((hw.id, cls))
            prof = _from_row(row, hw.code) if row is not None else estimate(hw, ref, cls)
            if flagged is None or prof.flagged == flagged:
                out.append(prof)
    return out


# -- measurements ---------------------------------------------------------------------------------------------
def check_measurement(m: Measurement) -> list[FieldError]:
    """Field errors of a measurement's own figures (no database access)."""
    errors = []
    if m.workload_class not in CLASSES:
        errors.append(FieldError("workload_class", f"must be one of {', '.join(CLASSES)}"))
    for name in ("steps_per_s", "power_w", "energy_per_step_j", "relative_throughput", "reference_steps_per_s"):
        value = getattr(m, name)
        if value is None and name not in ("steps_per_s", "power_w"):
            continue
        if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
            errors.append(FieldError(name, f"must be a positive number, got {value!r}"))
    if m.measured_at is not None and m.measured_at.utcoffset() is None:
        errors.append(FieldError("measured_at", "must be timezone-aware (UTC)"))
    return errors


def _deviation_pct(new: float, old: float) -> float:
    return 100.0 * (new - old) / old if old > 0 else math.inf


def record_measurement(session: Session, m: Measurement) -> JobProfile:
    """Make a measurement the profile in force for its (class, hardware); flag it when it moves the old one > 20 %.

    Nothing is written unless every check passes, so on error the previous profile stays in force.
    The caller commits.

    Raises
    ------
    ValidationFailed
        A non-positive or non-finite figure, an unknown workload class (each error names its field).
    NotFound
        Unknown hardware type (the message lists the known ones).
    """
    errors = check_measurement(m)
    if errors:
        raise ValidationFailed(f"bad measurement for {m.workload_class}/{m.hardware}", errors)
    hw = fleet.get_hardware(session, m.hardware)
    if m.power_w > 1.5 * hw.tdp_w:
        raise ValidationFailed(f"bad measurement for {m.workload_class}/{m.hardware}", [
            FieldError("power_w", f"{m.power_w:g} W is over 1.5 x the TDP of {hw.code} ({hw.tdp_w:g} W)")])
    before = current(session, hw.code, m.workload_class)
    if m.relative_throughput is not None:
        thr, how = float(m.relative_throughput), "throughput given"
    elif m.reference_steps_per_s is not None:
        thr, how = m.steps_per_s / m.reference_steps_per_s, "throughput vs the reference's rate"
    else:
        thr, how = before.relative_throughput, "throughput kept (no reference rate)"
    energy_per_step_j = m.energy_per_step_j or m.power_w / m.steps_per_s
    # a ratio of valid figures can still overflow (or underflow to 0): refused before anything is written
    bad = []
    if not math.isfinite(thr) or thr <= 0:
        field = "relative_throughput" if m.relative_throughput is not None else "reference_steps_per_s"
        bad.append(FieldError(field, f"gives a relative throughput of {thr!r}, not a positive finite number"))
    if not math.isfinite(energy_per_step_j) or energy_per_step_j <= 0:
        bad.append(FieldError("steps_per_s", f"power_w / steps_per_s = {energy_per_step_j!r} J per step, not finite"))
    if bad:
        raise ValidationFailed(f"bad measurement for {m.workload_class}/{m.hardware}", bad)
    deviations = [_deviation_pct(m.power_w, before.power_w)]
    if thr != before.relative_throughput:
        deviations.append(_deviation_pct(thr, before.relative_throughput))
    deviation = max(deviations, key=abs)
    span = hw.tdp_w - hw.idle_w
    utilisation = (m.power_w - hw.idle_w) / span if span > 0 else None
    for row in session.scalars(select(JobProfile).where(
            JobProfile.hardware_type_id == hw.id, JobProfile.workload_class == m.workload_class,
            JobProfile.job_id.is_(None), JobProfile.active.is_(True))):  # fmt: skip
        row.active = False
    row = JobProfile(
        workload_class=m.workload_class, job_id=None, hardware_type_id=hw.id, relative_throughput=thr,
        steps_per_s=float(m.steps_per_s), power_w=float(m.power_w), utilisation=utilisation,
        energy_per_step_j=energy_per_step_j, source=ProfileSource.MEASURED,
        method=f"{m.method}; {how}".lstrip("; "), measured_at=m.measured_at or datetime.now(UTC),
        # a move too large to express (or from a zero figure) is flagged with no percentage, never as Infinity
        deviation_pct=deviation if math.isfinite(deviation) else None, flagged=abs(deviation) > FLAG_PCT,
        active=True,
    )  # fmt: skip
    session.add(row)
    session.flush()
    return row


def parse_result(log_text: str) -> dict[str, Any] | None:
    """The last ``GRIDSHIFT_RESULT {json}`` line a calibration job printed, or None."""
    for line in reversed(log_text.splitlines()):
        if line.startswith(RESULT_PREFIX):
            try:
                value = json.loads(line[len(RESULT_PREFIX):])
            except json.JSONDecodeError:
                return None
            return value if isinstance(value, dict) else None
    return None


def measurement_from_job(workload_class: str, hardware: str, gpu_count: int, state: Any, reading: Any,
                         log_text: str = "", steps: int | None = None, method: str = "") -> Measurement:  # fmt: skip
    """Turn a finished calibration job into a :class:`Measurement`.

    The job's own ``GRIDSHIFT_RESULT`` line (steady-state steps, seconds and NVML energy of one GPU) is
    preferred; without it, ``steps`` over the run time and the connector's metered energy are used.

    Parameters
    ----------
    state : connectors.base.RuntimeState
        The job's final state.
    reading : connectors.base.EnergyReading or None
        The connector's energy of the whole job (all its GPUs).

    Raises
    ------
    ValidationFailed
        The job did not succeed, or it reported neither a result nor metered energy; nothing is recorded.
    """
    where = f"calibration of {workload_class}/{hardware}"
    if getattr(state.status, "value", state.status) != "succeeded":
        raise ValidationFailed(f"{where} failed midway: {state.status} {state.message}".strip(),
                               [FieldError("job", f"ended {state.status}")])  # fmt: skip
    result = parse_result(log_text)
    if result and result.get("energy_j") and result.get("steps") and result.get("seconds"):
        seconds, n = float(result["seconds"]), float(result["steps"])
        return Measurement(workload_class, hardware, steps_per_s=n / seconds, power_w=result["energy_j"] / seconds,
                           energy_per_step_j=result["energy_j"] / n, method=method or "calibration job, NVML")
    if reading is None or getattr(reading.source, "value", reading.source) == "estimate":
        raise ValidationFailed(f"{where}: the runtime metered no energy", [FieldError("energy", "not metered")])
    if not steps or state.started_at is None or state.finished_at is None:
        raise ValidationFailed(f"{where}: no step count or run time", [FieldError("steps", "unknown")])
    seconds = (state.finished_at - state.started_at).total_seconds()
    if seconds <= 0:
        raise ValidationFailed(f"{where}: zero run time", [FieldError("job", "zero run time")])
    per_gpu_w = reading.avg_power_w / max(gpu_count, 1)
    return Measurement(workload_class, hardware, steps_per_s=steps / seconds, power_w=per_gpu_w,
                       method=method or f"calibration job, {reading.source} energy of the whole job")  # fmt: skip


def measure(session: Session, connector: Any, spec: Any, workload_class: str, *, steps: int | None = None,
            timeout_s: float = 1800.0, poll_s: float = 1.0, read_log: Callable[[str], str] | None = None,
            sleep: Callable[[float], None] | None = None) -> JobProfile:  # fmt: skip
    """Run a calibration job through a connector and record what it measured (see :func:`record_measurement`).

    Raises
    ------
    ValidationFailed
        The job failed, timed out or measured nothing; the previous profile stays in force.
    """
    import time

    _check_class(workload_class)
    fleet.get_hardware(session, spec.hardware)  # unknown hardware: fail before submitting anything
    sleep = sleep or time.sleep
    job_id = connector.submit(spec)
    deadline = time.monotonic() + timeout_s
    state = connector.poll(job_id)
    while not state.status.terminal:
        if time.monotonic() > deadline:
            connector.cancel(job_id)
            raise ValidationFailed(f"calibration {job_id} did not finish in {timeout_s:g} s; cancelled",
                                   [FieldError("job", "timed out")])  # fmt: skip
        sleep(poll_s)
        state = connector.poll(job_id)
    if read_log is None and hasattr(connector, "log_path"):
        path = connector.log_path(job_id)
        read_log = lambda _id: path.read_text(errors="replace") if path.exists() else ""  # noqa: E731
    log_text = read_log(job_id) if read_log else ""
    m = measurement_from_job(workload_class, spec.hardware, spec.gpu_count, state, connector.energy(job_id),
                             log_text, steps, method=f"calibration job {job_id} through {connector.kind}")  # fmt: skip
    return record_measurement(session, m)
