"""Job files for ``gridshift jobs submit``: CSV (one job a line) or JSON (a list, or ``{"jobs": [...]}``).

Every bad line is reported, each error naming its line and field ("line 7: deadline_at: ..."); the list holds the
first :data:`MAX_ERRORS` and ``error_count`` says how many there were in all (the shape the API's error answers
use). Nothing is stored unless every job is good.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from app.errors import FieldError, ValidationFailed

#: At most this many errors are listed; ``error_count`` counts all of them.
MAX_ERRORS = 100

_INDEXED = re.compile(r"^\w*\[(\d+)\]\.?(.*)$")  # "jobs[3].deadline_at" -> 3, "deadline_at"
_TRUE, _FALSE = {"1", "true", "yes", "y", "on"}, {"0", "false", "no", "n", "off", ""}


def _aware(raw: Any) -> datetime:
    if isinstance(raw, datetime):
        value = raw
    else:
        text = str(raw).strip()
        value = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    if value.tzinfo is None:
        raise ValueError("needs a time zone, e.g. 2030-01-01T08:00:00Z")
    return value


def _bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text not in _TRUE | _FALSE:
        raise ValueError("expected true or false")
    return text in _TRUE


def _int(raw: Any) -> int:
    if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
        raise ValueError("expected a whole number")
    return int(str(raw).strip()) if isinstance(raw, str) else int(raw)


def _codes(raw: Any) -> list[str]:
    if isinstance(raw, list):
        return [str(x) for x in raw]
    return [p.strip() for p in str(raw).replace(";", " ").replace(",", " ").split() if p.strip()]


def _mapping(value_type: Callable[[Any], Any]) -> Callable[[Any], dict[str, Any]]:
    def parse(raw: Any) -> dict[str, Any]:
        if isinstance(raw, dict):
            return {str(k): value_type(v) for k, v in raw.items()}
        text = str(raw).strip()
        if text.startswith("{"):
            return {str(k): value_type(v) for k, v in json.loads(text).items()}
        out = {}
        for item in (p.strip() for p in text.split(";") if p.strip()):
            key, sep, val = item.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"{item!r} is not key=value (pairs separated by ';')")
            out[key.strip()] = value_type(val.strip())
        return out

    return parse


#: How each field of a job is read from a file's text (CSV) or JSON value.
FIELDS: dict[str, Callable[[Any], Any]] = {
    "name": str, "workload_class": str, "gpu_count": _int, "reference_gpu_hours": float,
    "reference_hardware": str, "durations_minutes": _mapping(_int), "memory_gb_per_gpu": float,
    "allowed_regions": _codes, "residency_tag": str, "allowed_hardware": _codes, "home_region": str,
    "release_at": _aware, "deadline_at": _aware, "priority": _int, "interruptible": _bool,
    "checkpoint_overhead_minutes": _int, "min_chunk_minutes": _int, "command": str, "image": str,
    "env": _mapping(str),
}
REQUIRED = ("name", "gpu_count", "deadline_at")


class Errors:
    """Errors of a file: the first :data:`MAX_ERRORS` kept, all counted."""

    def __init__(self) -> None:
        self.kept: list[FieldError] = []
        self.count = 0
        self.bad_lines: set[int] = set()

    def add(self, line: int, field: str, message: str) -> None:
        self.count += 1
        self.bad_lines.add(line)
        if len(self.kept) < MAX_ERRORS:
            self.kept.append(FieldError(f"line {line}: {field}" if field else f"line {line}", message))

    def raise_if_any(self, n_jobs: int) -> None:
        if self.count:
            raise ValidationFailed(f"{len(self.bad_lines)} of {n_jobs} jobs are invalid; nothing was stored",
                                   self.kept, error_count=self.count)


def _item(raw: dict[str, Any], line: int, errors: Errors) -> dict[str, Any]:
    item: dict[str, Any] = {}
    for key, value in raw.items():
        key = str(key).strip()
        if key not in FIELDS:
            errors.add(line, key, f"unknown field (known: {', '.join(FIELDS)})")
            continue
        if value is None or (isinstance(value, str) and not value.strip()):
            continue  # an empty CSV cell: the field's default
        try:
            item[key] = FIELDS[key](value)
        except (ValueError, TypeError, AttributeError, json.JSONDecodeError) as exc:
            errors.add(line, key, str(exc) or "cannot be read")
    for key in REQUIRED:
        if key not in item and key not in raw:
            errors.add(line, key, "required")
    return item


def _json_lines(text: str) -> list[tuple[int, Any]]:
    """Each job of a JSON file with the line it starts on (its index + 1 when the positions are unknown)."""
    data = json.loads(text)
    jobs = data.get("jobs") if isinstance(data, dict) else data
    if not isinstance(jobs, list):
        raise ValidationFailed("not a job list", [FieldError("file", 'expected a JSON list or {"jobs": [...]}')])
    starts = [i + 1 for i, line in enumerate(text.splitlines()) if line.lstrip().startswith("{")]
    if isinstance(data, dict):
        starts = starts[1:]  # the wrapping object's own brace
    lines = starts if len(starts) == len(jobs) else [i + 1 for i in range(len(jobs))]
    return list(zip(lines, jobs, strict=True))


def parse(text: str, *, kind: str) -> tuple[list[dict[str, Any]], list[int]]:
    """The jobs of a file (``kind``: csv or json) and the line each came from; ValidationFailed lists bad lines."""
    errors = Errors()
    items: list[dict[str, Any]] = []
    lines: list[int] = []
    if kind == "json":
        try:
            rows = _json_lines(text)
        except json.JSONDecodeError as exc:
            raise ValidationFailed("not valid JSON", [FieldError(f"line {exc.lineno}", exc.msg)]) from exc
        for line, raw in rows:
            if not isinstance(raw, dict):
                errors.add(line, "", "a job is a JSON object")
                continue
            items.append(_item(raw, line, errors))
            lines.append(line)
    else:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        if not reader.fieldnames:
            raise ValidationFailed("empty file", [FieldError("line 1", "no header")])
        for raw in reader:
            line = reader.line_num
            if None in raw:
                errors.add(line, "", f"{len(raw[None])} more cells than the header has columns")  # type: ignore[index]
                continue
            if not any((v or "").strip() for v in raw.values()):
                continue
            items.append(_item(raw, line, errors))
            lines.append(line)
    if not items and not errors.count:
        raise ValidationFailed("no jobs", [FieldError("file", "the file holds no job")])
    errors.raise_if_any(len(items) + len(errors.bad_lines - set(lines)))
    return items, lines


def read(path: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """Read a job file; its kind follows from its suffix (.json, else CSV)."""
    text = path.read_text(encoding="utf-8-sig")
    return parse(text, kind="json" if path.suffix.lower() == ".json" else "csv")


def by_line(exc: ValidationFailed, lines: list[int]) -> ValidationFailed:
    """The service's ``[i].field`` errors of a batch renamed to the file's ``line N: field``, capped the same way."""
    errors = Errors()
    for e in exc.errors:
        m = _INDEXED.match(e.field)
        if m is None or int(m.group(1)) >= len(lines):
            errors.add(0, e.field, e.message)
            continue
        errors.add(lines[int(m.group(1))], m.group(2), e.message)
    total = max(errors.count, error_count(exc))
    return ValidationFailed(f"{len(errors.bad_lines)} of {len(lines)} jobs are invalid; nothing was stored",
                            errors.kept, error_count=total)


def error_count(exc: ValidationFailed) -> int:
    """How many errors ``exc`` stands for in all (its list may hold only the first :data:`MAX_ERRORS`)."""
    return int(getattr(exc, "error_count", None) or exc.extra.get("error_count") or len(exc.errors))
