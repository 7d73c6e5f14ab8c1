"""The ``gridshift`` command. Command groups live in app/commands/ and are listed in :data:`COMMAND_GROUPS`."""

from __future__ import annotations

import functools
import json
import sys
from datetime import timedelta
from pathlib import Path

import click

from app.commands import forecast, hardware, jobs, keys, plan, policy, report, simulate
from app.config import Settings

#: Every command (group) of app/commands/, added to ``gridshift`` (tests/app/test_wiring.py checks the list).
COMMAND_GROUPS: tuple[click.Command, ...] = (
    forecast.command, hardware.command, jobs.command, keys.command, plan.command, policy.command, report.command,
    simulate.command,
)


def _settings() -> Settings:
    return Settings.from_env()


def _sessions(settings: Settings):  # type: ignore[no-untyped-def]
    from app.db import make_engine, make_session_factory

    return make_session_factory(make_engine(settings))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Gridshift: plan deferrable GPU jobs for the lowest electricity cost and carbon."""


@main.group()
def db() -> None:
    """Database schema (Alembic migrations)."""


@db.command("upgrade")
@click.option("--revision", default="head", show_default=True)
def db_upgrade(revision: str) -> None:
    from app import migrate

    settings = _settings()
    migrate.upgrade(settings, revision)
    click.echo(f"database at {revision}: {settings.effective_database_url.split('@')[-1]}")


@db.command("downgrade")
@click.option("--revision", default="base", show_default=True)
def db_downgrade(revision: str) -> None:
    from app import migrate

    migrate.downgrade(_settings(), revision)
    click.echo(f"database at {revision}")


@main.group()
def tenant() -> None:
    """Tenants and their API tokens."""


@tenant.command("create")
@click.argument("slug")
@click.option("--name", default=None)
@click.option("--operator", is_flag=True, help="may administer the fleet (regions, budgets, clusters)")
def tenant_create(slug: str, name: str | None, operator: bool) -> None:
    from app.db import session_scope
    from app.errors import ServiceError
    from app.services import auth

    try:
        with session_scope(_sessions(_settings())) as s:
            auth.create_tenant(s, slug, name, is_operator=operator)
    except ServiceError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"tenant {slug} created")


@tenant.command("token")
@click.argument("slug")
@click.option("--name", default="cli", show_default=True)
@click.option("--role", type=click.Choice(["admin", "member", "readonly"]), default="member", show_default=True)
@click.option("--expires-in-days", type=click.IntRange(1, 36500), default=None,
              help="days until the token expires (default: never)")
def tenant_token(slug: str, name: str, role: str, expires_in_days: int | None) -> None:
    """Issue a token; it is printed once and never stored in clear."""
    from app.db import session_scope
    from app.enums import Role
    from app.errors import ServiceError
    from app.services import auth

    try:
        with session_scope(_sessions(_settings())) as s:
            t = auth.get_tenant(s, slug)
            exp = timedelta(days=expires_in_days) if expires_in_days is not None else None
            _row, token = auth.issue_token(s, t, name, Role(role), expires_in=exp)
    except ServiceError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(token)


@main.group()
def market() -> None:
    """Market series (prices, carbon intensity, renewable share, load)."""


@market.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--zone", default=None, help="zone of a harmonized file (default: file name up to '_')")
@click.option("--source", default=None)
@click.option("--no-progress", is_flag=True, help="hide the progress bar")
def market_import(files: tuple[Path, ...], zone: str | None, source: str | None, no_progress: bool) -> None:
    """Import CSV files (harmonized or long format; see README). A bad line rejects that file whole; every bad line
    is listed (the first 100, and the count). Progress goes to stderr; a summary line ends the import."""
    import time

    from tqdm import tqdm

    from app.db import session_scope
    from app.errors import ServiceError, ValidationFailed
    from app.services import market as svc

    factory = _sessions(_settings())
    t0, total = time.perf_counter(), 0
    for path in files:
        try:
            with tqdm(desc=f"{path.name}: reading", unit=" points", disable=no_progress, leave=False) as bar:
                points = svc.read_csv(path, zone=zone, source=source)
                bar.set_description(f"{path.name}: storing")
                bar.reset(total=len(points))
                with session_scope(factory) as s:
                    n = svc.store(s, points, on_progress=bar.update)
        except ValidationFailed as exc:
            count = int(exc.extra.get("error_count") or getattr(exc, "error_count", None) or len(exc.errors))
            listed = "\n".join(f"  {e.field}: {e.message}" for e in exc.errors)
            more = f"\n  ... and {count - len(exc.errors)} more" if count > len(exc.errors) else ""
            raise click.ClickException(f"{path}: {exc.detail}\n{listed}{more}") from exc
        except ServiceError as exc:
            raise click.ClickException(f"{path}: {exc}") from exc
        total += n
        click.echo(f"{path}: {n} points")
    click.echo(f"imported {total} points from {len(files)} file(s) in {time.perf_counter() - t0:.1f} s")


@main.group()
def demo() -> None:
    """The demo fleet."""


@demo.command("seed")
@click.option("--data", "data_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="harmonized data folder (real 2015-2023 series); without it a seeded synthetic scenario")
@click.option("--seed", default=7, show_default=True)
@click.option("--jobs", "n_jobs", default=24, show_default=True)
def demo_seed(data_dir: Path | None, seed: int, n_jobs: int) -> None:
    """Five regions on real bidding zones, a mixed inventory, tenants with tokens, market data and jobs."""
    from app.db import session_scope
    from app.services import demo as svc

    settings = _settings()
    with session_scope(_sessions(settings)) as s:
        result = svc.seed(s, settings, data_dir=data_dir, seed=seed, n_jobs=n_jobs)
    out = settings.var_dir / "demo_tokens.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    if result.tokens:
        out.write_text(json.dumps(result.tokens, indent=2))
        out.chmod(0o600)
    click.echo(result.summary)
    if result.tokens:
        click.echo(f"demo tokens written to {out} (shown once here):")
        for name, token in result.tokens.items():
            click.echo(f"  {name}: {token}")


@main.command("web")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True)
@click.option("--threads", default=8, show_default=True, help="request threads of the one process")
def web(host: str, port: int, threads: int) -> None:
    """Serve the API and dashboard through waitress (the compose stack runs gunicorn --preload 'app.wsgi:app')."""
    from waitress import serve

    from app import create_app

    click.echo(f"serving http://{host}:{port} (waitress, {threads} threads)")
    serve(create_app(_settings()), host=host, port=port, threads=threads, ident="gridshift")


@main.command("worker", context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def worker(args: tuple[str, ...]) -> None:
    """Run a Celery worker (extra arguments go to celery)."""
    from app.worker import celery_app

    celery_app.worker_main(["worker", "--loglevel=INFO", *args])


@main.command("beat", context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def beat(args: tuple[str, ...]) -> None:
    """Run Celery beat (the periodic schedule in app/schedule.py)."""
    settings = _settings()
    from app.worker import celery_app

    schedule = str(settings.var_dir / "celerybeat-schedule")
    celery_app.start(["beat", "--loglevel=INFO", f"--schedule={schedule}", *args])


@main.command("run")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True)
@click.option("--concurrency", default=2, show_default=True)
def run(host: str, port: int, concurrency: int) -> None:
    """Start web + worker + beat together (the embedded default); Ctrl-C stops all three."""
    import signal
    import subprocess
    import time

    def _stop(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt  # SIGTERM (docker stop, timeout, systemd) stops the children like Ctrl-C

    signal.signal(signal.SIGTERM, _stop)
    exe = [sys.executable, "-m", "app.cli"]
    procs = [
        subprocess.Popen([*exe, "web", "--host", host, "--port", str(port)]),
        subprocess.Popen([*exe, "worker", f"--concurrency={concurrency}"]),
        subprocess.Popen([*exe, "beat"]),
    ]
    click.echo(f"Gridshift on http://{host}:{port}  (web, worker, beat: pids {[p.pid for p in procs]})")
    try:
        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
    sys.exit(max((p.returncode or 0) for p in procs))


def _register_commands() -> None:
    """Add every group of :data:`COMMAND_GROUPS` (declared, not discovered: a test checks none is left off)."""
    for command in COMMAND_GROUPS:
        main.add_command(command)


#: Commands that run without a database at the code's revision: the migrations themselves, key generation, a
#: backtest of a CSV file.
WITHOUT_SCHEMA = frozenset({"db", "keys generate", "forecast backtest"})


def _check_schema() -> None:
    """Stop with one line (exit 1) when the database is missing or at another revision than the code's."""
    from app import migrate

    try:
        migrate.check_schema(_settings())
    except migrate.SchemaNotReady as exc:
        raise click.ClickException(str(exc)) from None


def _require_schema(command: click.Command, path: str = "") -> None:
    """Make every command under ``command`` (but those of :data:`WITHOUT_SCHEMA`) check the schema first.

    The check wraps each command's own callback, so it runs after click has read the arguments: ``--help`` and
    usage errors still answer on any database."""
    if path in WITHOUT_SCHEMA:
        return
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            _require_schema(sub, f"{path} {name}".strip())
        return
    callback = command.callback
    if callback is None or getattr(callback, "_checks_schema", False):
        return

    @functools.wraps(callback)
    def checked(*args: object, **kwargs: object) -> object:
        _check_schema()
        return callback(*args, **kwargs)

    checked._checks_schema = True  # type: ignore[attr-defined]
    command.callback = checked


_register_commands()
_require_schema(main)

if __name__ == "__main__":
    main()
