"""Forecasting benchmark: prices (epftoolbox protocol), carbon intensity and renewable share.

    python bench/forecast_bench.py [--only price|carbon] [--markets NP DE] [--regions BE ...]
                                   [--price-models lear lear_nn] [--day-step N] [--workers 2] [--json]
                                   [--ensemble price_ens|none] [--price-periods validation test] [--val-day-step N]
                                   [--no-generation-forecast] [--carbon-model lear_hgbra_log]
                                   [--carbon-test 2021-07-01 2021-12-31]

* price: day-ahead, recalibrated daily, on the exact epftoolbox test periods (NP 2016-12-27..2018-12-24,
  DE 2016-01-04..2017-12-31), side by side with the official LEAR-Ens and DNN-Ens forecasts
  (shared/data/epftoolbox/forecasts) over the same hours; with ``--ensemble`` (default ``price_ens``) the
  ensemble's members are first backtested over the 364 days before each test start, its weights fitted there
  (``forecasting.validation``), and the test scores the members, the equal-weight and the validated
  (``price_ens@val``) ensembles; ``--price-periods validation`` computes and caches the validation year alone;
* carbon: the 7 harmonized regions, history from 2021-01-01, test 2022 day-ahead (forecast issued at
  00:00 UTC for the 24 hours of the day, recalibrated daily), MAPE and MAE against the daily seasonal
  naive and persistence. Carbon intensity: ``--carbon-model`` (default the production choice
  ``lear_hgbra_log``, the geometric mean of ``lear_log``, ``hgbr_log`` and ``hgba_log``; an ensemble's
  members are scored beside it at no extra cost) with the regressors production stores (day-ahead
  load forecast, wind + solar forecast, the zone's day-ahead price), for BE, CH, ES and PL the day-ahead
  prices of interconnected zones (``forecasting.sources.harmonized.CARBON_NEIGHBOURS``, published with
  the zone's own the day before), and the zone's day-ahead generation forecast (ENTSO-E, from
  deepforkit_entsoe/); ``--no-generation-forecast`` leaves the latter out, as production runs today.
  ``--carbon-test`` scores another period (2021 H2 for all regions, 2023 H1 for DE and FR, the only ones with
  carbon data then), so that choices need not be made on the 2022 test year; ``--carbon-model a+b+c`` scores
  the equal-weight geometric mean of registered models;
  Renewable share: ``lear_short`` regressors as before (load, solar, wind and price forecasts);
* cost: wall time and CPU time of each run (see the table's last columns);
* refresh: one production refresh of the 7 regions x 3 kinds from a fresh SQLite database (``--only refresh``).

Per-day forecasts are cached under var/cache/forecast_bench, so a rerun only computes what is missing.
``--day-step N`` evaluates every N-th test day only (N prime to 7 cycles the weekdays); the table says so.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from forecasting.backtest import run_backtest  # noqa: E402
from forecasting.metrics import mae, mape, smape  # noqa: E402
from forecasting.models import Ensemble, Lear, Model, get_model  # noqa: E402
from forecasting.sources import read_harmonized, read_series_csv  # noqa: E402
from forecasting.sources.deepforkit import read_deepforkit  # noqa: E402
from forecasting.sources.harmonized import CARBON_NEIGHBOURS  # noqa: E402
from forecasting.task import ForecastTask  # noqa: E402
from forecasting.validation import validated_ensemble, validation_period  # noqa: E402

TEST = {"NP": ("2016-12-27", "2018-12-24"), "DE": ("2016-01-04", "2017-12-31")}
REGIONS = ("BE", "CH", "DE", "ES", "FI", "FR", "PL")
RENEWABLE_EXOG = ("load_forecast_mw", "solar_forecast_mw", "wind_onshore_forecast_mw", "price_eur_mwh")
CARBON_EXOG = ("load_forecast_mw", "wind_solar_forecast_mw", "price_eur_mwh")
GENERATION = "generation_forecast_mw"
CARBON_MODEL = "lear_hgbra_log"  # production choice for carbon intensity (app.services.forecasts.DEFAULT_MODELS)
CARBON_TEST = ("2022-01-01", "2022-12-31")  # the test year; --carbon-test picks another period (model choices)
CACHE = ROOT / "var" / "cache" / "forecast_bench"  # default of --cache


def shared_data() -> Path:
    env = os.environ.get("GRIDSHIFT_SHARED_DATA")
    path = Path(env) if env else ROOT / ".." / "shared" / "data"
    if not path.is_dir():
        sys.exit(f"shared data not found at {path} (set GRIDSHIFT_SHARED_DATA)")
    return path


def _cpu_s() -> float:
    self_ = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return self_.ru_utime + self_.ru_stime + kids.ru_utime + kids.ru_stime


def _price_rows(market: str, period: str, fc: pd.DataFrame, names: list[str], day_step: int,
                wall: float, cpu: float, extra: dict[str, pd.Series] | None = None,
                weights: dict[str, str] | None = None) -> list[dict]:
    actual = fc["actual"].to_numpy()
    naive = fc["naive_weekly"].to_numpy()
    columns = {m: fc[m].to_numpy() for m in names if m in fc}
    columns.update({k: v.to_numpy() for k, v in (extra or {}).items()})
    return [{"section": "price", "series": market, "period": period, "model": name, "mae": mae(actual, f),
             "smape": smape(actual, f), "rmae": mae(actual, f) / mae(actual, naive), "days": len(fc) // 24,
             "day_step": day_step, "weights": (weights or {}).get(name),
             "wall_s": wall if name == names[0] else None, "cpu_s": cpu if name == names[0] else None}
            for name, f in columns.items()]


def price_bench(
    data: Path, markets: list[str], models: list[str], day_step: int, workers: int, cache: Path,
    ensemble: str | None = None, periods: tuple[str, ...] = ("validation", "test"), val_day_step: int = 1,
) -> list[dict]:
    """Price rows per market. With ``ensemble`` (a registered :class:`Ensemble`), its members are first backtested
    over the validation year before the test start and its weights fitted there (``forecasting.validation``);
    the test then scores the members, the equal-weight ensemble and the validated one (``<name>@val``).
    The wall and CPU columns sit on the first row of each backtest and cover all its models."""
    rows = []
    for market in markets:
        frame, meta = read_series_csv(data / "epftoolbox" / f"{market}.csv.gz")
        task = ForecastTask(meta["target"], tuple(meta["exog"]))
        start, end = TEST[market]
        named = {m: get_model(m) for m in models}
        weights: dict[str, str] = {}
        if ensemble is not None:
            ens = get_model(ensemble)
            if not isinstance(ens, Ensemble):
                raise SystemExit(f"--ensemble {ensemble}: not an ensemble model")
            wall0, cpu0 = time.perf_counter(), _cpu_s()
            fitted, val = validated_ensemble(frame, task, ens, start, day_step=val_day_step, cache_dir=cache,
                                             workers=workers)
            wall, cpu = time.perf_counter() - wall0, _cpu_s() - cpu0
            members = [m.name for m in ens.members]
            vfc = val.forecasts
            w = np.asarray(fitted.weights)
            blend = pd.Series(np.stack([vfc[m].to_numpy() for m in members]).T @ w, index=vfc.index)
            eq = vfc[members].mean(axis=1)
            weights = {fitted.name: " ".join(f"{m}={x:.2f}" for m, x in zip(members, w, strict=True))}
            first, last = validation_period(start)
            rows += _price_rows(market, f"val {first.date()}..{last.date()}", vfc, [*members, "naive_weekly"],
                                val_day_step, wall, cpu, {ens.name: eq, fitted.name: blend}, weights)
            named.update({m.name: m for m in ens.members})
            named.update({ens.name: ens, fitted.name: fitted})
        if "test" not in periods:
            continue
        named["naive_daily"] = get_model("naive_daily")
        wall0, cpu0 = time.perf_counter(), _cpu_s()
        result = run_backtest(frame, task, named, start, end, cache_dir=cache, workers=workers, day_step=day_step)
        wall, cpu = time.perf_counter() - wall0, _cpu_s() - cpu0
        fc = result.forecasts
        official = pd.read_csv(data / "epftoolbox" / "forecasts" / f"Forecasts_{market}_DNN_LEAR_ensembles.csv.gz",
                               parse_dates=["timestamp_local"], index_col="timestamp_local")
        official.index = pd.DatetimeIndex(official.index).tz_localize("UTC")  # same wall-clock labels as our reader
        official = official.loc[fc.index]
        if not np.allclose(official["Real price"].to_numpy(), fc["actual"].to_numpy(), atol=0.01):
            raise SystemExit(f"{market}: dataset prices differ from the official forecast file")
        extra = {"official LEAR-Ens": official["LEAR Ensemble"], "official DNN-Ens": official["DNN Ensemble"]}
        rows += _price_rows(market, f"test {start}..{end}", fc, [*named, "naive_weekly"], day_step, wall, cpu,
                            extra, weights)
    return rows


def carbon_frame(
    data: Path, region: str, generation: bool, end: str = "2022-12-31"
) -> tuple[pd.DataFrame, tuple[str, ...]]:
    """Harmonized table of ``region`` from 2021 to ``end`` with the carbon regressors; returns (frame, carbon
    exog). The default end keeps the frame, and so the per-day cache key, of the 2022 test year."""
    frame, _ = read_harmonized(data / "harmonized" / f"{region}_hourly.csv.gz")
    parts = [c for c in ("solar_forecast_mw", "wind_onshore_forecast_mw", "wind_offshore_forecast_mw") if c in frame]
    frame["wind_solar_forecast_mw"] = frame[parts].sum(axis=1, min_count=len(parts))  # as market.read_csv stores it
    exog = list(CARBON_EXOG)
    for zone in CARBON_NEIGHBOURS[region]:
        other, _ = read_harmonized(data / "harmonized" / f"{zone}_hourly.csv.gz")
        frame[f"price_eur_mwh@{zone}"] = other["price_eur_mwh"].reindex(frame.index)
        exog.append(f"price_eur_mwh@{zone}")
    if generation:
        gen, _ = read_deepforkit(data / "deepforkit_entsoe" / f"{region}.csv.gz")
        frame[GENERATION] = gen[GENERATION].reindex(frame.index)
        exog.append(GENERATION)
    return frame.loc["2021-01-01":end], tuple(exog)


def carbon_model(name: str) -> Model:
    """A registered model, or for ``a+b+c`` the equal-weight geometric mean of registered models a, b and c
    (how candidate members were compared; each member's days are cached on their own)."""
    if "+" not in name:
        return get_model(name)
    return Ensemble(tuple(get_model(n) for n in name.split("+")), geometric=True, name=name)


def carbon_bench(
    data: Path, regions: list[str], targets: list[str], day_step: int, workers: int, cache: Path, generation: bool,
    carbon_name: str = CARBON_MODEL, test: tuple[str, str] = CARBON_TEST,
) -> list[dict]:
    rows = []
    for region in regions:
        frame, carbon_exog = carbon_frame(data, region, generation, max(test[1], CARBON_TEST[1]))
        for target in targets:
            carbon = target.startswith("carbon")
            model_name = carbon_name if carbon else "lear"
            model = carbon_model(carbon_name) if carbon else Lear(windows_days=(56, 84, 364))
            models = {model_name: model, "naive_daily": get_model("naive_daily"),
                      "persistence": get_model("persistence")}
            if carbon:  # the members of an ensemble are scored too (computed once, see run_backtest)
                for member in getattr(model, "members", ()):
                    models.setdefault(member.name, member)
            task = ForecastTask(target, carbon_exog if carbon else RENEWABLE_EXOG)
            wall0, cpu0 = time.perf_counter(), _cpu_s()
            result = run_backtest(frame, task, models, test[0], test[1], cache_dir=cache,
                                  workers=workers, day_step=day_step)
            wall, cpu = time.perf_counter() - wall0, _cpu_s() - cpu0
            fc = result.forecasts
            ref = mae(fc["actual"].to_numpy(), fc["naive_daily"].to_numpy())
            for name in [*models, "naive_weekly"]:
                a, f = fc["actual"].to_numpy(), fc[name].to_numpy()
                rows.append({"section": "carbon", "series": f"{region} {target}", "model": name,
                             "period": f"{test[0]}..{test[1]}",
                             "mae": mae(a, f), "mape": mape(a, f), "mae_vs_naive_daily": mae(a, f) / ref,
                             "days": len(fc) // 24, "day_step": day_step,
                             "wall_s": wall if name == model_name else None,
                             "cpu_s": cpu if name == model_name else None})
    return rows


def refresh_bench(data: Path, regions: list[str], history_days: int) -> list[dict]:
    """One production refresh (price, carbon intensity, renewable share) of every region from a fresh SQLite
    database holding ``history_days`` of the harmonized data, as the Celery tasks run it."""
    import tempfile
    from datetime import UTC, datetime, timedelta

    from app import migrate
    from app.config import Settings
    from app.db import make_engine, make_session_factory
    from app.services import forecasts, market

    now = datetime(2022, 12, 31, 13, 0, tzinfo=UTC)
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(var_dir=Path(tmp), database_url=f"sqlite:///{tmp}/bench.db")
        migrate.upgrade(settings)
        factory = make_session_factory(make_engine(settings))
        t0 = time.perf_counter()
        with factory() as session:
            for region in regions:
                pts = market.read_csv(data / "harmonized" / f"{region}_hourly.csv.gz", zone=region,
                                      start=now - timedelta(days=history_days), end=now.replace(hour=0))
                market.store(session, pts)
            session.commit()
        load_s = time.perf_counter() - t0
        wall0, cpu0 = time.perf_counter(), _cpu_s()
        with factory() as session:
            outcomes = forecasts.refresh_all(session, forecasts.FORECAST_KINDS, now=now, horizon_hours=48)
        wall, cpu = time.perf_counter() - wall0, _cpu_s() - cpu0
    for o in outcomes:
        rows.append({"section": "refresh", "series": f"{o.zone} {o.kind.value}", "model": o.model,
                     "status": o.status.value, "error": o.error})
    rows.append({"section": "refresh", "series": f"{len(regions)} regions x 3 kinds", "model": "all",
                 "wall_s": wall, "cpu_s": cpu, "import_s": load_s, "days": history_days,
                 "status": f"{sum(o.error is None for o in outcomes)}/{len(outcomes)} succeeded"})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=["price", "carbon", "refresh"], default=None)
    parser.add_argument("--refresh-history-days", type=int, default=730)
    parser.add_argument("--markets", nargs="+", default=list(TEST))
    parser.add_argument("--price-models", nargs="+", default=["lear", "lear_nn"])
    parser.add_argument("--regions", nargs="+", default=list(REGIONS))
    parser.add_argument("--targets", nargs="+", default=["carbon_intensity_g_per_kwh", "renewable_share"])
    parser.add_argument("--day-step", type=int, default=1)
    parser.add_argument("--ensemble", default="price_ens",
                        help="price ensemble whose weights are fitted on the year before each test period "
                             "('none' to skip); its members, equal and validated weights are scored")
    parser.add_argument("--price-periods", nargs="+", choices=["validation", "test"], default=["validation", "test"],
                        help="'validation' alone computes (and caches) the validation year only")
    parser.add_argument("--val-day-step", type=int, default=1, help="every N-th validation day only")
    parser.add_argument("--workers", type=int, default=2, help="processes (at most 2 on the shared machine)")
    parser.add_argument("--cache", type=Path, default=CACHE, help="per-day forecast cache")
    parser.add_argument("--no-generation-forecast", action="store_true",
                        help="carbon intensity without the zone's generation forecast (what production stores today)")
    parser.add_argument("--carbon-model", default=CARBON_MODEL,
                        help="carbon-intensity model (registry name, or a+b+c for the geometric mean of registered "
                             "models); an ensemble's members are scored beside it")
    parser.add_argument("--carbon-test", nargs=2, default=list(CARBON_TEST), metavar=("FIRST", "LAST"),
                        help="carbon test days (default the year 2022); a period outside 2022 to make choices on, "
                             "e.g. 2021-07-01 2021-12-31 (all regions) or 2023-01-01 2023-06-29 (DE, FR only)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    data = shared_data()
    rows: list[dict] = []
    # one BLAS/OpenMP thread per worker process (forked workers inherit the limit): with OpenMP's default of a
    # thread per core, one hgb_log day (CH, 2022-06-01) took 5.9 CPU-s on this busy 2-core machine, 1.4 with one
    with threadpool_limits(limits=1) if args.workers > 1 else nullcontext():
        if args.only in (None, "price"):
            ensemble = None if args.ensemble == "none" else args.ensemble
            rows += price_bench(data, args.markets, args.price_models, args.day_step, args.workers, args.cache,
                                ensemble, tuple(args.price_periods), args.val_day_step)
        if args.only in (None, "carbon"):
            rows += carbon_bench(data, args.regions, args.targets, args.day_step, args.workers, args.cache,
                                 not args.no_generation_forecast, args.carbon_model, tuple(args.carbon_test))
    if args.only in (None, "refresh"):
        rows += refresh_bench(data, args.regions, args.refresh_history_days)
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    summary: dict = {"rows": rows}
    carbon = table[(table["section"] == "carbon") & table["series"].str.endswith("carbon_intensity_g_per_kwh")] \
        if "series" in table else table.iloc[0:0]
    if len(carbon):
        chosen = carbon[carbon["model"] == args.carbon_model]
        summary["carbon_intensity_model"] = args.carbon_model
        summary["carbon_intensity_mean_mape"] = float(chosen["mape"].mean())
        summary["carbon_intensity_min_mae_reduction_vs_naive_daily"] = float((1 - chosen["mae_vs_naive_daily"]).min())
        summary["carbon_intensity_mean_mape_by_model"] = {
            str(m): float(g["mape"].mean()) for m, g in carbon.groupby("model")}
        print(f"carbon intensity, {args.carbon_model}: mean MAPE {summary['carbon_intensity_mean_mape']:.2f} % (target <= 8), "
              f"smallest MAE reduction vs daily naive "
              f"{100 * summary['carbon_intensity_min_mae_reduction_vs_naive_daily']:.1f} % (target >= 25)")
    if args.json:
        print(json.dumps(summary, default=lambda v: None))


if __name__ == "__main__":
    main()
