"""The hardware catalog (app/data/hardware_catalog.json): checked, then imported into the fleet.

Every figure of an entry names its source under ``sources`` (``estimate: true`` where none could be found);
``measured_profiles`` hold profiles measured on real hardware with their date and method, which
:func:`import_catalog` records as the profiles in force (see :mod:`app.services.profiles`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from app.enums import ProfileSource
from app.errors import FieldError, ValidationFailed
from app.services import fleet
from app.services.profiles import CLASSES, Measurement, check_measurement, current, record_measurement

CATALOG = Path(__file__).resolve().parent.parent / "data" / "hardware_catalog.json"

# -- the catalog ----------------------------------------------------------------------------------------------
HARDWARE_NUMBERS = ("memory_gb", "memory_bandwidth_gbs", "bf16_tflops", "tdp_w", "idle_w")


def check_catalog(entries: Iterable[Mapping[str, Any]]) -> list[FieldError]:
    """Field errors of catalog entries: missing or non-positive figures, figures without a source, bad profiles."""
    errors: list[FieldError] = []
    seen: set[str] = set()
    for i, e in enumerate(entries):
        at = f"hardware[{i}]"
        code = e.get("code")
        if not isinstance(code, str) or not code:
            errors.append(FieldError(f"{at}.code", "required"))
        elif code in seen:
            errors.append(FieldError(f"{at}.code", f"duplicate code {code!r}"))
        seen.add(str(code))
        sources = e.get("sources") or {}
        for key in (*HARDWARE_NUMBERS, "resource_name", "relative_throughput"):
            if key not in e:
                errors.append(FieldError(f"{at}.{key}", "required"))
                continue
            if key in HARDWARE_NUMBERS and (not isinstance(e[key], int | float) or e[key] < 0
                                            or (key != "idle_w" and e[key] == 0)):  # fmt: skip
                errors.append(FieldError(f"{at}.{key}", f"must be a positive number, got {e[key]!r}"))
            src = sources.get(key)
            if not isinstance(src, Mapping) or not src.get("source"):
                errors.append(FieldError(f"{at}.sources.{key}", "every figure needs a source (or estimate: true)"))
        for cls, value in (e.get("relative_throughput") or {}).items():
            if cls not in CLASSES or not isinstance(value, int | float) or value <= 0:
                errors.append(FieldError(f"{at}.relative_throughput.{cls}", "known class, positive number"))
        for j, p in enumerate(e.get("measured_profiles") or []):
            try:
                m = measurement_from_catalog(str(code), p)
            except (KeyError, TypeError, ValueError) as exc:
                errors.append(FieldError(f"{at}.measured_profiles[{j}]", f"unreadable: {exc}"))
                continue
            errors += [FieldError(f"{at}.measured_profiles[{j}].{f.field}", f.message) for f in check_measurement(m)]
            if not m.method or m.measured_at is None:
                errors.append(FieldError(f"{at}.measured_profiles[{j}]", "needs a method and measured_at"))
    return errors


def measurement_from_catalog(code: str, p: Mapping[str, Any]) -> Measurement:
    """A catalog ``measured_profiles`` entry as a :class:`Measurement`."""
    measured_at = datetime.fromisoformat(p["measured_at"]) if p.get("measured_at") else None
    evidence = f" ({p['evidence']})" if p.get("evidence") else ""
    return Measurement(
        workload_class=p["workload_class"], hardware=code, steps_per_s=p["steps_per_s"], power_w=p["power_w"],
        energy_per_step_j=p.get("energy_per_step_j"), relative_throughput=p.get("relative_throughput"),
        method=f"{p.get('method', '')}{evidence}", measured_at=measured_at,
    )  # fmt: skip


def read_catalog(path: Path = CATALOG) -> list[dict[str, Any]]:
    """The catalog's hardware entries, checked.

    Raises
    ------
    ValidationFailed
        Unreadable JSON or any bad entry; every error names its entry and field.
    """
    try:
        entries = json.loads(Path(path).read_text())["hardware"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValidationFailed(f"cannot read hardware catalog {path}: {exc}") from exc
    errors = check_catalog(entries)
    if errors:
        raise ValidationFailed(f"hardware catalog {path} has {len(errors)} error(s)", errors)
    return list(entries)


def import_catalog(session: Session, path: Path = CATALOG) -> tuple[int, int]:
    """Upsert every hardware type of the catalog and record its measured profiles not yet recorded.

    All or nothing: the whole file is checked first. Returns (hardware types, new measured profiles).
    The caller commits.
    """
    entries = read_catalog(path)
    new_profiles = 0
    for e in entries:
        fleet.upsert_hardware(session, e["code"], {k: v for k, v in e.items() if k in fleet.HARDWARE_FIELDS})
    for e in entries:
        for p in e.get("measured_profiles") or []:
            m = measurement_from_catalog(e["code"], p)
            now = current(session, m.hardware, m.workload_class)
            if now.source == ProfileSource.MEASURED.value and now.measured_at is not None and \
                    m.measured_at is not None and _same_instant(now.measured_at, m.measured_at):  # fmt: skip
                continue  # already in force
            record_measurement(session, m)
            new_profiles += 1
    return len(entries), new_profiles


def _same_instant(a: datetime, b: datetime) -> bool:
    a = a if a.utcoffset() is not None else a.replace(tzinfo=UTC)
    return a == b
