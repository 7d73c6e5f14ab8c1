"""``gridshift report``: the monthly energy, cost and carbon report as a table, CSV or PDF."""

from __future__ import annotations

from pathlib import Path

import click

from app.config import Settings
from app.errors import ServiceError


def _factory(settings: Settings):  # type: ignore[no-untyped-def]
    from app.db import make_engine, make_session_factory

    return make_session_factory(make_engine(settings))


def _table(report) -> str:  # type: ignore[no-untyped-def]
    cur = report.currency
    lines = [f"{'tenant':<16} {'region':<8} {'jobs':>5} {'energy kWh':>12} {'cost ' + cur:>12} {'CO2 kg':>10} "
             f"{'saving ' + cur:>12} {'saving %':>8} {'CO2 saved kg':>12}"]
    for row in (*report.rows, report.total):
        pct = "-" if row.saving_pct is None else f"{row.saving_pct:.1f}"
        lines.append(f"{row.tenant:<16} {row.region:<8} {row.jobs:>5} {row.energy_kwh:>12,.1f} {row.cost:>12,.2f} "
                     f"{row.carbon_kg:>10,.1f} {row.saving_cost:>12,.2f} {pct:>8} {row.saving_carbon_kg:>12,.1f}")
    return "\n".join(lines)


@click.command("report")
@click.option("--month", required=True, help="YYYY-MM (UTC)")
@click.option("--tenant", default=None, help="one tenant's slug (default: every tenant)")
@click.option("--region", default=None, help="one region's code (default: every region)")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "pdf"]), default="table", show_default=True)
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="file to write (default: stdout for table and csv; gridshift-<tenant>-<month>.pdf for pdf)")
def command(month: str, tenant: str | None, region: str | None, fmt: str, output: Path | None) -> None:
    """Per tenant and region: energy, cost, location-based CO2 and the savings against running every job now.
    Data that is replayed or synthetic is labelled as such."""
    from app.db import session_scope
    from app.services import auth, report_export, reports

    settings = Settings.from_env()
    try:
        with session_scope(_factory(settings)) as s:
            report = reports.monthly_report(
                s, auth.local_principal(s), month, region=region, tenant=tenant, fx_rates=settings.exchange_rates,
                configured_currency=settings.reporting_currency,
            )
    except ServiceError as exc:
        raise click.ClickException(str(exc)) from exc
    notice = report.data_notice
    if fmt == "pdf":
        path = output or Path(f"gridshift-{report.tenant}-{report.month}.pdf")
        path.write_bytes(report_export.to_pdf(report))
        click.echo(f"{path}: {len(report.rows)} rows, {report.total.jobs} jobs" + (f"; {notice}" if notice else ""))
        return
    text = report_export.to_csv(report) if fmt == "csv" else (
        f"Gridshift report {report.month}, tenant {report.tenant}, {report.currency}\n"
        + (f"NOTE: {notice}\n" if notice else "") + _table(report) + "\n")
    if output is not None:
        output.write_text(text)
        click.echo(f"{output}: {len(report.rows)} rows, {report.total.jobs} jobs")
    else:
        click.echo(text, nl=False)
