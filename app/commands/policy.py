"""``gridshift policy``: a tenant's fair-share weight, quotas and budgets (set, audited) and its burn-down (show)."""

from __future__ import annotations

import json

import click

from app.config import Settings

AMOUNT = click.FloatRange(min=0)


@click.group("policy")
def command() -> None:
    """Tenants' fair-share weights, quotas and budgets."""


@command.command("show")
@click.argument("slug", required=False)
def show(slug: str | None) -> None:
    """Weight, quota use and budget burn-down of one tenant (default: every tenant), as JSON."""
    from app.db import make_engine, make_session_factory, session_scope, utcnow
    from app.services import tenancy

    settings = Settings.from_env()
    with session_scope(make_session_factory(make_engine(settings))) as s:
        slugs = [slug] if slug else tenancy.tenant_slugs(s)
        out = [tenancy.burn_down(s, tenancy.tenant_by_slug(s, x), now=utcnow(),
                                 currency=settings.reporting_currency) for x in slugs]
    click.echo(json.dumps(out, indent=2))


@command.command("set")
@click.argument("slug")
@click.option("--weight", type=click.FloatRange(min=0, min_open=True))
@click.option("--budget-period", type=click.Choice(["month", "quarter"]))
@click.option("--max-gpus", "max_gpus", multiple=True, metavar="HW=N", help="GPUs of a hardware type at once")
@click.option("--max-queued-jobs", type=click.IntRange(min=0))
@click.option("--max-gpu-hours-per-day", type=AMOUNT)
@click.option("--max-gpu-hours-per-month", type=AMOUNT)
@click.option("--cost-budget", type=AMOUNT, help="per period, in the reporting currency")
@click.option("--energy-budget-kwh", type=AMOUNT)
@click.option("--carbon-budget-kg", type=AMOUNT, help="location-based kg CO2eq per period")
def set_(slug: str, max_gpus: tuple[str, ...], **options: object) -> None:
    """Set the options given (the others keep their value); audited as ``tenant.policy_put``."""
    from app.db import make_engine, make_session_factory, session_scope
    from app.errors import ServiceError
    from app.services import audit, tenancy

    values = {k: v for k, v in options.items() if v is not None}
    if max_gpus:
        try:
            values["max_gpus"] = {hw: int(n) for hw, n in (item.split("=", 1) for item in max_gpus)}
        except ValueError:
            raise click.BadParameter("expected HW=N", param_hint="--max-gpus") from None
    try:
        with session_scope(make_session_factory(make_engine(Settings.from_env()))) as s:
            tenancy.set_policy(s, slug, values)
            audit.record(s, None, "tenant.policy_put", "tenant", slug, **values)
    except ServiceError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"policy of {slug} set: {', '.join(sorted(values)) or 'nothing'}")
