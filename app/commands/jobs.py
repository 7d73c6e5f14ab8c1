"""``gridshift jobs``: submit a file of jobs (CSV or JSON) for a tenant, and list a tenant's jobs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from app.config import Settings
from app.errors import ServiceError, ValidationFailed


def _factory(settings: Settings):  # type: ignore[no-untyped-def]
    from app.db import make_engine, make_session_factory

    return make_session_factory(make_engine(settings))


def _fail_with_lines(exc: ValidationFailed, count: int) -> click.ClickException:
    lines = [exc.detail] + [f"  {e.field}: {e.message}" for e in exc.errors]
    if count > len(exc.errors):
        lines.append(f"  ... and {count - len(exc.errors)} more ({count} errors in all)")
    return click.ClickException("\n".join(lines))


@click.group("jobs")
def command() -> None:
    """Jobs of a tenant: submit a file, list them."""


@command.command("submit")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--tenant", required=True, help="the tenant the jobs belong to (its slug)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object (batch id, job ids) as the last line")
def submit(file: Path, tenant: str, as_json: bool) -> None:
    """Submit every job of FILE (.json: a list or {"jobs": [...]}; else CSV with a header of job fields) in one
    batch: all are stored or none. Every bad line is reported with its field (the first 100, and the count).

    CSV cells: lists (allowed_regions, allowed_hardware) separated by ';' or spaces; durations_minutes and env as
    key=value pairs separated by ';' (or a JSON object); times in ISO 8601 with a zone (2030-01-01T08:00:00Z).
    """
    from app.db import session_scope
    from app.services import auth, job_files, jobs

    try:
        items, lines = job_files.read(file)
    except ValidationFailed as exc:
        raise _fail_with_lines(exc, job_files.error_count(exc)) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise click.ClickException(f"{file}: {exc}") from exc
    try:
        with session_scope(_factory(Settings.from_env())) as s:
            principal = auth.local_principal(s, tenant)
            try:
                batch_id, ids = jobs.submit_jobs(s, principal, items)
            except ValidationFailed as exc:  # errors name jobs[i].field: the file's lines instead
                renamed = job_files.by_line(exc, lines)
                raise _fail_with_lines(renamed, job_files.error_count(renamed)) from exc
    except ServiceError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"{file}: {len(ids)} jobs submitted for {tenant} (batch {batch_id}, ids {ids[0]}..{ids[-1]})")
    if as_json:
        sys.stdout.flush()
        click.echo(json.dumps({"batch_id": batch_id, "count": len(ids), "job_ids": ids}))


@command.command("list")
@click.option("--tenant", required=True, help="the tenant whose jobs to list (its slug)")
@click.option("--state", "states", multiple=True, help="only jobs in these states (repeatable)")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 10_000))
@click.option("--json", "as_json", is_flag=True, help="print one JSON list as the last line")
def list_(tenant: str, states: tuple[str, ...], limit: int, as_json: bool) -> None:
    """The tenant's jobs, newest first: id, state, GPUs, window and why a job is waiting."""
    from app.db import session_scope
    from app.services import auth, jobs

    try:
        with session_scope(_factory(Settings.from_env())) as s:
            principal = auth.local_principal(s, tenant)
            rows, _next = jobs.list_jobs(s, principal, jobs.JobFilter(state=states), limit=limit)
            listed: list[dict[str, Any]] = [{"id": j.id, "name": j.name, "state": j.state.value, "gpu_count": j.gpu_count,
                       "release_at": j.release_at.isoformat(), "deadline_at": j.deadline_at.isoformat(),
                       "reason": j.state_reason} for j in rows]
    except (ServiceError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"{'id':>7} {'state':<14} {'GPUs':>5} {'release (UTC)':<17} {'deadline (UTC)':<17} name")
    for j in listed:
        click.echo(f"{j['id']:>7} {j['state']:<14} {j['gpu_count']:>5} {j['release_at'][:16]:<17} "
                   f"{j['deadline_at'][:16]:<17} {j['name']}" + (f"  ({j['reason']})" if j["reason"] else ""))
    if as_json:
        sys.stdout.flush()
        click.echo(json.dumps(listed))
