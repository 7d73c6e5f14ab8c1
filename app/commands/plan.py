"""``gridshift plan``: plan the fleet now (or try it with ``--dry-run``) and print the plan against running now."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from app.commands.progress import plan_bar
from app.config import Settings
from app.errors import ServiceError
from optimizer import ObjectiveKind


def _factory(settings: Settings):  # type: ignore[no-untyped-def]
    from app.db import make_engine, make_session_factory

    return make_session_factory(make_engine(settings))


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def summary_table(s: dict[str, Any]) -> str:
    """The summary of a plan as a few lines of text: what it costs and emits against running every job now."""
    head = "dry run (nothing stored)" if s.get("dry_run") else f"plan {s['plan_id']}" + (
        " (current)" if s.get("is_current") else " (not current)")
    gap = "-" if s.get("gap_pct") is None else f"{s['gap_pct']:.2f} %"
    lines = [f"{head}: {s['status']}, objective {s['objective']}, gap {gap}, solved in {_num(s.get('solve_s'))} s",
             f"{'':<16}{'planned':>14}{'run now':>14}{'saving':>14}{'saving %':>10}"]
    for label, key in ((f"cost [{s.get('currency') or '-'}]", "cost"), ("carbon [kg]", "carbon_kg"),
                       ("energy [kWh]", "energy_kwh")):
        planned, now, saving = s.get(key), s.get(f"run_now_{key}"), s.get(f"saving_{key}")
        pct = "-" if not now or saving is None else f"{100.0 * saving / now:.1f}"
        lines.append(f"{label:<16}{_num(planned):>14}{_num(now):>14}{_num(saving):>14}{pct:>10}")
    lines.append(f"jobs: {s.get('jobs_planned') or 0} planned, {s.get('jobs_left_out') or 0} left out")
    return "\n".join(lines)


@click.command("plan")
@click.option("--dry-run", is_flag=True, help="plan and print, but store nothing and change no job")
@click.option("--objective", type=click.Choice([k.value for k in ObjectiveKind]), default=None,
              help="for this plan only (default: GRIDSHIFT_OBJECTIVE); carbon_cost_cap needs GRIDSHIFT_COST_CAP")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object (the summary) as the last line")
@click.option("--no-progress", is_flag=True, help="hide the progress bar")
def command(dry_run: bool, objective: str | None, as_json: bool, no_progress: bool) -> None:
    """Plan every open job now (as the hourly re-plan does) and print cost, carbon, energy, jobs planned and left
    out and the optimality gap, against running every job now. Progress goes to stderr."""
    from app.services import plan_runs

    settings = Settings.from_env()
    factory = _factory(settings)
    try:
        with plan_bar(settings.plan_time_limit_s, disable=no_progress) as on_phase, factory() as session:
            if dry_run:
                result = plan_runs.dry_run(session, settings, objective=objective, on_phase=on_phase)
            else:
                run = plan_runs.create(session, settings, trigger="manual", objective=objective,
                                       requested_by="cli")
                session.commit()
                done = plan_runs.execute(session, settings, run.id, on_phase=on_phase)
                if done is None or done.summary is None:
                    raise click.ClickException(f"plan run {run.id}: {done.error if done else 'taken by another'}")
                result = done.summary
    except ServiceError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(summary_table(result))
    if as_json:
        sys.stdout.flush()
        click.echo(json.dumps(result))
    if result["status"] == "failed":
        sys.exit(1)
