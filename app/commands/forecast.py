"""``gridshift forecast``: backtests (and, with the service wiring, refreshes) of forecasts."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import click

from forecasting.backtest import BacktestResult, metrics_table, run_backtest
from forecasting.errors import ForecastInputError
from forecasting.models import MODELS, get_model
from forecasting.sources import read_series_csv
from forecasting.task import ForecastTask

DEFAULT_MODELS = "naive_daily,naive_weekly,lear"


TARGET_KINDS = {"price_eur_mwh": "price", "carbon_intensity_g_per_kwh": "carbon_intensity",
                "renewable_share": "renewable_share"}


def _factory():  # type: ignore[no-untyped-def]
    from app.config import Settings
    from app.db import make_engine, make_session_factory

    return make_session_factory(make_engine(Settings.from_env()))


def _record_selection(zone: str, target: str, result: BacktestResult) -> None:
    from app.db import session_scope
    from app.enums import SeriesKind
    from app.services import forecasts

    if target not in TARGET_KINDS:
        raise click.ClickException(f"--select-for: target {target!r} is not one of {sorted(TARGET_KINDS)}")
    overall = result.metrics[result.metrics["period"] == "all"].set_index("model")
    metrics = {m: {k: float(overall.loc[m, k]) for k in ("mae", "smape", "rmae")} for m in overall.index}
    with session_scope(_factory()) as s:
        forecasts.select_model(s, zone, SeriesKind(TARGET_KINDS[target]), result.best, metrics)
    click.echo(f"recorded {result.best} for {zone}/{TARGET_KINDS[target]}", err=True)


def _split(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [v.strip() for v in value.split(",") if v.strip()]


@click.group("forecast")
def command() -> None:
    """Forecasts of prices, carbon intensity and renewable share."""


@command.command("backtest")
@click.option("--data", "data_path", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="CSV (or .csv.gz): harmonized table, epftoolbox file, or any file with a time column.")
@click.option("--test-start", required=True, help="First test day, YYYY-MM-DD (in the data's clock).")
@click.option("--test-end", required=True, help="Last test day, YYYY-MM-DD (included).")
@click.option("--models", "model_names", default=DEFAULT_MODELS, show_default=True,
              help=f"Comma-separated model names; available: {', '.join(sorted(MODELS))}.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for forecasts.csv and metrics.csv.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object as the last line.")
@click.option("--time-col", default=None, help="Time column (default: detected).")
@click.option("--target-col", default=None, help="Column to forecast (default: first *price* column).")
@click.option("--exog-cols", default=None,
              help="Comma-separated regressor columns known a day ahead (default: columns named *forecast*; "
                   "'' for none).")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 64), help="Processes.")
@click.option("--cache", "cache_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Per-day forecast cache; a rerun only computes missing days.")
@click.option("--no-progress", is_flag=True, help="Hide the progress bar.")
@click.option("--select-for", "select_zone", default=None,
              help="Record the best model as the production choice of this zone (table model_selections); "
                   "the kind follows from the target column.")
def backtest(
    data_path: Path, test_start: str, test_end: str, model_names: str, out_dir: Path | None, as_json: bool,
    time_col: str | None, target_col: str | None, exog_cols: str | None, workers: int,
    cache_dir: Path | None, no_progress: bool, select_zone: str | None,
) -> None:
    """Day-ahead backtest, recalibrated daily (epftoolbox protocol); prints MAE, sMAPE and rMAE."""
    names = _split(model_names) or []
    try:
        models = {name: get_model(name) for name in names}
    except KeyError as exc:
        raise click.BadParameter(str(exc.args[0]), param_hint="--models") from None
    if not models:
        raise click.BadParameter("give at least one model", param_hint="--models")
    try:
        frame, meta = read_series_csv(
            data_path, time_col=time_col, target_col=target_col, exog_cols=_split(exog_cols)
        )
        task = ForecastTask(meta["target"], tuple(meta["exog"]))
        result = run_backtest(
            frame, task, models, test_start, test_end, cache_dir=cache_dir, workers=workers,
            progress=not no_progress,
        )
    except ForecastInputError as exc:
        raise click.ClickException(str(exc)) from None
    for fill in result.fills:
        click.echo(f"filled {fill.hours} h of {fill.column} from {fill.start} to {fill.end} (linear)", err=True)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        result.forecasts.to_csv(out_dir / "forecasts.csv", index_label="time")
        result.metrics.to_csv(out_dir / "metrics.csv", index=False)
    click.echo(f"{data_path.name}: target {task.target}, regressors {list(task.exog) or 'none'}, "
               f"{meta['timezone']}")
    click.echo(metrics_table(result.metrics))
    click.echo(f"best: {result.best}")
    if select_zone:
        _record_selection(select_zone, task.target, result)
    if as_json:
        overall = result.metrics[result.metrics["period"] == "all"].set_index("model")
        payload = {
            "models": {
                name: {k: (None if not math.isfinite(v) else round(float(v), 4))
                       for k, v in overall.loc[name, ["mae", "smape", "rmae"]].items()}
                for name in overall.index
            },
            "best": result.best,
        }
        sys.stdout.flush()
        click.echo(json.dumps(payload))


@command.command("refresh")
@click.option("--kind", "kinds", multiple=True, type=click.Choice(list(TARGET_KINDS.values())),
              help="Series kinds (default: all three).")
@click.option("--zone", default=None, help="Only this zone (default: every zone with history).")
@click.option("--horizon-hours", default=48, show_default=True, type=click.IntRange(1, 24 * 7))
def refresh(kinds: tuple[str, ...], zone: str | None, horizon_hours: int) -> None:
    """Forecast now from market_series and store the runs (what the Celery tasks do)."""
    import time

    from app.db import session_scope
    from app.enums import SeriesKind
    from app.services import forecasts

    chosen = tuple(SeriesKind(k) for k in (kinds or TARGET_KINDS.values()))
    t0 = time.perf_counter()
    with session_scope(_factory()) as s:
        if zone:
            outcomes = [forecasts.refresh(s, zone, k, horizon_hours=horizon_hours) for k in chosen]
        else:
            outcomes = forecasts.refresh_all(s, chosen, horizon_hours=horizon_hours)
    for o in outcomes:
        click.echo(f"{o.zone:8} {o.kind.value:17} {o.model:12} {o.status.value:9} {o.points:4} points"
                   + (f"  {o.error}" if o.error else ""))
    click.echo(f"{len(outcomes)} refreshes in {time.perf_counter() - t0:.1f} s")
    if any(o.status.value == "failed" for o in outcomes):
        sys.exit(1)
