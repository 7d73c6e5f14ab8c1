"""``gridshift hardware``: import the catalog, list hardware and profiles, record or measure a profile."""

from __future__ import annotations

from pathlib import Path

import click

from app.config import Settings


def _factory(settings: Settings):  # type: ignore[no-untyped-def]
    from app.db import make_engine, make_session_factory

    return make_session_factory(make_engine(settings))


def _fail(exc: Exception) -> click.ClickException:
    return click.ClickException(str(exc))


@click.group("hardware")
def command() -> None:
    """Hardware types and their job profiles."""


@command.command("import")
@click.option("--file", "path", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="catalog JSON (default: the shipped app/data/hardware_catalog.json)")
def import_(path: Path | None) -> None:
    """Upsert the catalog's hardware types and record its measured profiles. A bad entry rejects the file."""
    from app.db import session_scope
    from app.errors import ServiceError
    from app.services import catalog

    try:
        with session_scope(_factory(Settings.from_env())) as s:
            n_hw, n_prof = catalog.import_catalog(s, path or catalog.CATALOG)
    except ServiceError as exc:
        raise _fail(exc) from exc
    click.echo(f"{n_hw} hardware types, {n_prof} new measured profiles")


@command.command("list")
@click.option("--profiles/--no-profiles", default=True, show_default=True, help="show the profile table too")
@click.option("--flagged", is_flag=True, help="only profiles flagged by a measurement")
def list_(profiles: bool, flagged: bool) -> None:
    """Hardware types with their figures, and the profile in force per workload class."""
    from app.db import session_scope
    from app.services import profiles as svc
    from app.services.fleet import list_hardware

    with session_scope(_factory(Settings.from_env())) as s:
        if not flagged:
            click.echo(f"{'code':<11} {'vendor':<7} {'memory GB':>9} {'GB/s':>6} {'bf16 TF':>8} {'TDP W':>6} "
                       f"{'idle W':>6}  resource")  # fmt: skip
            for h in list_hardware(s):
                click.echo(f"{h.code:<11} {h.vendor:<7} {h.memory_gb:>9g} {h.memory_bandwidth_gbs or 0:>6g} "
                           f"{h.bf16_tflops or 0:>8g} {h.tdp_w:>6g} {h.idle_w:>6g}  {h.resource_name}")  # fmt: skip
        if profiles or flagged:
            click.echo(f"\n{'hardware':<11} {'class':<16} {'x ref':>6} {'power W':>8} {'source':<9} "
                       f"{'dev %':>7}  flag")  # fmt: skip
            for p in svc.effective(s, flagged=True if flagged else None):
                dev = f"{p.deviation_pct:+7.1f}" if p.deviation_pct is not None else "      -"
                click.echo(f"{p.hardware:<11} {p.workload_class:<16} {p.relative_throughput:>6.2f} "
                           f"{p.power_w:>8.1f} {p.source:<9} {dev}  {'FLAGGED' if p.flagged else ''}")  # fmt: skip


@command.command("profile")
@click.option("--class", "workload_class", required=True, help="workload class, e.g. training")
@click.option("--hardware", required=True, help="hardware type code, e.g. h200")
@click.option("--steps-per-s", type=float, default=None, help="measured rate [1/s] (record given figures)")
@click.option("--power-w", type=float, default=None, help="measured mean draw of one GPU [W]")
@click.option("--relative-throughput", type=float, default=None, help="x the reference hardware, when known")
@click.option("--method", default="", help="how it was measured")
@click.option("--cluster", default=None, help="measure instead: run --command on this cluster")
@click.option("--command", "job_command", default=None, help="calibration command (prints GRIDSHIFT_RESULT)")
@click.option("--gpus", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("--steps", type=int, default=None, help="steps the command runs (when it prints no result)")
@click.option("--timeout-s", type=float, default=1800.0, show_default=True)
def profile(workload_class: str, hardware: str, steps_per_s: float | None, power_w: float | None,
            relative_throughput: float | None, method: str, cluster: str | None, job_command: str | None,
            gpus: int, steps: int | None, timeout_s: float) -> None:  # fmt: skip
    """Record a measured profile, given (--steps-per-s, --power-w) or measured (--cluster, --command)."""
    from datetime import UTC, datetime

    from app.db import session_scope
    from app.errors import ServiceError
    from app.services import profiles as svc
    from app.services.fleet import find_cluster
    from connectors.base import ConnectorError

    settings = Settings.from_env()
    given = steps_per_s is not None or power_w is not None
    if given == (cluster is not None):
        raise click.UsageError("give either --steps-per-s and --power-w, or --cluster and --command")
    try:
        with session_scope(_factory(settings)) as s:
            if given:
                if steps_per_s is None or power_w is None:
                    raise click.UsageError("--steps-per-s and --power-w go together")
                m = svc.Measurement(workload_class, hardware, steps_per_s, power_w,
                                    relative_throughput=relative_throughput, method=method or "given on the CLI")
                row = svc.record_measurement(s, m)
            else:
                if not job_command:
                    raise click.UsageError("--cluster needs --command")
                from app.services.dispatch.submit import connector_for
                from connectors.base import JobSpec

                c = find_cluster(s, cluster or "")
                if c is None:
                    raise click.ClickException(f"cluster {cluster!r} not found")
                key = f"gs-profile-{hardware}-{datetime.now(UTC):%Y%m%d%H%M%S}".lower()
                spec = JobSpec(run_key=key, name=key, command=job_command, hardware=hardware, gpu_count=gpus,
                               time_limit_minutes=max(1, int(timeout_s // 60)))  # fmt: skip
                row = svc.measure(s, connector_for(c, settings), spec, workload_class, steps=steps,
                                  timeout_s=timeout_s)  # fmt: skip
            flag = f"FLAGGED: moved the profile by {row.deviation_pct:+.1f} %" if row.flagged else \
                f"within {svc.FLAG_PCT:g} % of the profile it replaced ({row.deviation_pct:+.1f} %)"
            msg = (f"{hardware}/{workload_class}: {row.steps_per_s:.3f} steps/s, {row.power_w:.1f} W per GPU, "
                   f"x{row.relative_throughput:.2f} reference; {flag}")  # fmt: skip
    except ServiceError as exc:
        raise _fail(exc) from exc
    except ConnectorError as exc:  # the cluster refused the calibration job (too many GPUs, bad hardware code)
        flag = {"gpu_count": "--gpus", "run_key": "--hardware", "hardware": "--hardware"}.get(
            getattr(exc, "field", ""), "--cluster"
        )
        raise click.ClickException(f"{flag}: {exc}") from exc
    click.echo(msg)
