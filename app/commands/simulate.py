"""``gridshift simulate``: replay a past period under a changed fleet, objective or carbon price, against now."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import Any

import click
from tqdm import tqdm

from app.config import Settings
from app.errors import ServiceError, ValidationFailed

ROWS = (("cost [{cur}]", "cost", 2), ("carbon [kg]", "carbon_kg", 1), ("energy [kWh]", "energy_kwh", 1),
        ("deadline misses", "deadline_misses", 0), ("jobs run", "jobs_run", 0), ("not placed", "not_placed", 0))


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def comparison_table(r: dict[str, Any]) -> str:
    """The comparison as text: one row per figure, current settings against the scenario and the difference."""
    objective = r["objective"]
    lines = [f"replay {r['from']} .. {r['to']} ({r['days']} days), objective {objective['current']} -> "
             f"{objective['scenario']}; scenario {json.dumps(r['scenario'], sort_keys=True)}",
             f"{'':<18}{'current':>14}{'scenario':>14}{'difference':>14}{'diff %':>9}"]
    for label, key, digits in ROWS:
        pct = r["percent"].get(key)
        lines.append(f"{label.format(cur=r['currency']):<18}{_num(r['current'][key], digits):>14}"
                     f"{_num(r['changed'][key], digits):>14}{_num(r['difference'][key], digits):>14}"
                     f"{'-' if pct is None else f'{pct:+.1f}':>9}")
    lines += [f"note: {n}" for n in r["notes"]]
    return "\n".join(lines)


@click.command("simulate")
@click.option("--from", "first", required=True, help="first day replayed (YYYY-MM-DD, UTC)")
@click.option("--to", "last", required=True, help="last day replayed (YYYY-MM-DD, included; before today)")
@click.option("--objective", type=click.Choice(["cost", "carbon", "weighted"]), default=None,
              help="the scenario's objective (default: GRIDSHIFT_OBJECTIVE)")
@click.option("--set", "pairs", multiple=True, metavar="KEY=VALUE",
              help="a change: region.<code>.gpus.<hardware>=N, region.<code>.power_budget_kw=KW, "
                   "region.<code>.pue=X, region.<code>.removed=true, region.<new>.like=<code>, "
                   "region.<code>.zone=<zone>, carbon_price=X (repeat the option)")
@click.option("--json", "as_json", is_flag=True, help="print the whole comparison as one JSON object, last line")
@click.option("--no-progress", is_flag=True, help="hide the progress bar")
def command(first: str, last: str, objective: str | None, pairs: tuple[str, ...], as_json: bool,
            no_progress: bool) -> None:
    """Replay the stored history of a past period twice, as the planner would have planned it each day, under the
    current settings and under the changes asked for, and print cost, carbon, energy and deadline misses side by
    side. Nothing is stored. Progress (days replayed) goes to stderr."""
    from app.db import make_engine, make_session_factory
    from app.services.simulation import runs, scenario

    settings = Settings.from_env()
    try:
        body: dict[str, Any] = {**scenario.from_pairs(list(pairs)), "from": first, "to": last}
        if objective:
            body["objective"] = objective
        with make_session_factory(make_engine(settings))() as session:
            start, days, wanted = runs.checked(session, body, today=datetime.now(UTC).date())
            with tqdm(total=2 * days, desc="simulate", unit="day", disable=no_progress, file=sys.stderr) as bar:
                result = runs.run_now(session, settings, start, days, wanted,
                                      on_day=lambda n: bar.update(n - bar.n))
    except ValidationFailed as exc:
        raise click.UsageError("; ".join(f"{e.field}: {e.message}" for e in exc.errors) or exc.detail) from exc
    except ServiceError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(comparison_table(result))
    if as_json:
        sys.stdout.flush()
        click.echo(json.dumps(result))
