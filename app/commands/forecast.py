"""``gridshift forecast``: backtests (and, with the service wiring, refreshes) of forecasts."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import click

from forecasting.backtest import metrics_table, run_backtest
from forecasting.errors import ForecastInputError
from forecasting.models import MODELS, get_model
from forecasting.sources import read_series_csv
from forecasting.task import ForecastTask

DEFAULT_MODELS = "naive_daily,naive_weekly,lear"


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
def backtest(
    data_path: Path, test_start: str, test_end: str, model_names: str, out_dir: Path | None, as_json: bool,
    time_col: str | None, target_col: str | None, exog_cols: str | None, workers: int,
    cache_dir: Path | None, no_progress: bool,
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
