"""The closed-loop year replay behind ``plan_bench.py --replay-days N --forecast production`` (see bench/closed_loop.py).

Each replayed day: the day's forecasts (cached), then under the cost and the carbon objective one plan each on
perfect foresight (realised curves), on naive forecasts (day-ahead prices of day 1 repeated, yesterday's carbon),
on the production forecasts' point values, and on the risk-adjusted quantile curve (optimizer.scenarios), plus the
chooser between the last two; all settled on the realised curves. One JSON file per day under ``--results-dir`` (a
run cut short keeps the days it finished; a rerun skips them); the tables are built from those files.
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

from app.config import Settings
from bench.closed_loop import (
    KINDS,
    cached_run,
    carbon_refreshes,
    day_curves,
    finite,
    fleet_of,
    horizon_of,
    input_epoch,
    issue_of,
    nightly_state,
    read_frames,
    replan_chain,
    replan_curves,
    replan_times,
    run_horizon,
    run_issued,
    saving_captured,
    seen_state,
    service_problem,
)
from bench.plan_bench import realised_totals
from bench.plan_workload import build_problem, generate, read_curves, start_of, window
from forecasting.errors import ForecastInputError
from optimizer import SOLVERS, Objective, ObjectiveKind, SolveParams, check_plan
from optimizer.scenarios import Uncertain, choose_plan, risk_adjusted, scenario_problems
from optimizer.scenarios import plan_value as value_on

OBJECTIVES = ("cost", "carbon")
POLICIES = ("run_now", "perfect", "naive", "production", "replan", "replan_once", "risk", "chosen")
REPLANS = ("replan", "replan_once")
REPLAN_HOUR = 13  # replan_once: the next day's prices and the morning's carbon are published
_STATE: dict = {}


def _moved(before, after) -> int:
    """Jobs the re-plan placed elsewhere or at another time than the nightly plan."""
    old = {a.job_id: (a.region, a.hardware, tuple((c.start_slot, c.end_slot) for c in a.chunks))
           for a in before.assignments}
    return sum(old.get(a.job_id) != (a.region, a.hardware, tuple((c.start_slot, c.end_slot) for c in a.chunks))
               for a in after.assignments)


def _row(realised, plan, planned_on) -> dict:
    row = realised_totals(realised, plan)
    row["value"] = value_on(realised, plan)
    row["checked"] = check_plan(planned_on, plan, allow_late=False).ok if planned_on is not None else True
    return row


def replay_day(d: int) -> tuple[int, dict | None]:
    """Day ``d``: forecasts, plans and their realised totals; None when the data has a hole in the horizon."""
    args, hardware = _STATE["args"], _STATE["hardware"]
    out_dir = Path(args.results_dir)
    done = out_dir / f"day-{d:03d}.json"
    if done.exists():
        return d, json.loads(done.read_text())
    start = start_of(args.start) + timedelta(days=d)
    hours = args.days * 24
    curves = _STATE["curves"]
    price, carbon = window(curves, start, hours, "realised")
    if price.isna().any().any() or carbon.isna().any().any():
        return d, None
    t0 = time.perf_counter()
    issued = issue_of(start)
    try:
        runs = {(z, k): cached_run(_STATE["frames"], z, k, issued, horizon_of(start, args.days), Path(args.cache))
                for z in args.regions for k in KINDS}
    except ForecastInputError as exc:  # the service's refresh fails too: the day is reported as skipped
        print(f"day {start.date()}: skipped, forecast failed: {exc}", file=sys.stderr)
        return d, None
    forecast_s = time.perf_counter() - t0
    specs = generate(args.jobs, args.regions, args.seed + d)
    settings = Settings(slot_minutes=60, carbon_price_per_tonne=args.carbon_price)
    base = build_problem(specs, hardware, price, carbon, start, Objective(ObjectiveKind.COST))
    fleet = fleet_of(hardware, base)
    slots = [start + timedelta(hours=h) for h in range(hours)]
    real, plan_curves, quant = day_curves({KINDS[0]: price, KINDS[1]: carbon}, runs, slots, start, issued)
    n_price, n_carbon = window(curves, start, hours, "naive")
    naive = ({z: list(n_price[z]) for z in n_price}, {z: list(n_carbon[z]) for z in n_carbon})
    if not (finite(plan_curves[KINDS[0]]) and finite(plan_curves[KINDS[1]])):
        return d, None
    uncertain = Uncertain(quant[KINDS[0]], quant[KINDS[1]])
    out: dict = {"day": str(start.date()), "forecast_s": round(forecast_s, 1)}
    try:
        _plan_day(args, out, base, specs, fleet, settings, real, plan_curves, naive, uncertain, runs, slots, issued,
                  price, carbon, start)
    except Exception as exc:  # a planner error on one day is reported with the day, the others go on
        out = {"day": str(start.date()), "error": f"{type(exc).__name__}: {exc}"}
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    out_dir.mkdir(parents=True, exist_ok=True)
    done.write_text(json.dumps(out))
    return d, out


def _seen(curves: dict) -> tuple[dict, dict]:
    return curves[KINDS[0]], curves[KINDS[1]]


def _problem_at(base, specs, fleet, settings, objective, frames, slots, issued, runs_of):
    """``t -> Problem`` on the curves seen at ``t`` (published by then, else the forecast runs ``runs_of(t)``)."""
    def at(t):
        return service_problem(base, specs, fleet, settings, objective,
                               *_seen(replan_curves(frames, runs_of(t), slots, t, issued)))

    return at


def _runs_in_force(args, runs: dict, issued, out: dict):
    """The forecast runs in force at a time of the plan's day, computed (or read from the cache) when first needed;
    a refresh that fails leaves the last good run in force, as in the service."""
    carbon_hours = carbon_refreshes(Settings(), args.carbon_refresh_h)
    made: dict = {(z, k, issued): r for (z, k), r in runs.items()}
    out.setdefault("replan_forecast_s", 0.0)

    def at(t) -> dict:
        t0 = time.perf_counter()
        now = {}
        for (z, k), nightly in runs.items():
            when = run_issued(k, t, carbon_hours)
            while (z, k, when) not in made:
                same = [w for (zz, kk, w) in made if zz == z and kk == k and input_epoch(w) == input_epoch(when)]
                if same:  # a refresh on the inputs of one already made is that run (cached_run hashes to the same)
                    made[(z, k, when)] = made[(z, k, same[0])]
                    continue
                try:
                    made[(z, k, when)] = cached_run(_STATE["frames"], z, k, when, run_horizon(when, args.days),
                                                    Path(args.cache))
                except ForecastInputError:  # the refresh fails: the run before it stays in force
                    earlier = [w for (zz, kk, w) in made if zz == z and kk == k and w < when]
                    made[(z, k, when)] = made[(z, k, max(earlier))] if earlier else nightly
            now[(z, k)] = made[(z, k, when)]
        out["replan_forecast_s"] = round(out["replan_forecast_s"] + time.perf_counter() - t0, 1)
        return now

    return at


def _plan_day(args, out, base, specs, fleet, settings, real, plan_curves, naive, uncertain, runs, slots, issued,
              price, carbon, start) -> None:
    params = SolveParams(args.time_limit, args.workers, args.seed, rins=not args.no_rins)
    runs_at = _runs_in_force(args, runs, issued, out)
    realised_frames = {KINDS[0]: price, KINDS[1]: carbon}
    for name in OBJECTIVES:
        realised = service_problem(base, specs, fleet, settings, name, real[KINDS[0]], real[KINDS[1]])
        on_forecast = service_problem(base, specs, fleet, settings, name, plan_curves[KINDS[0]],
                                      plan_curves[KINDS[1]])
        on_naive = service_problem(base, specs, fleet, settings, name, *naive)
        on_risk = risk_adjusted(on_forecast, uncertain, args.risk_weight)
        plans: dict[str, tuple[Any, Any]] = {
            "run_now": (SOLVERS["run_now"](realised, params), None),
            "perfect": (SOLVERS["gridshift"](realised, params), realised),
            "naive": (SOLVERS["gridshift"](on_naive, params), on_naive),
            "production": (SOLVERS["gridshift"](on_forecast, params), on_forecast),
            "risk": (SOLVERS["gridshift"](on_risk, params), on_risk),
        }
        nightly = plans["production"][0]
        problem_at = partial(_problem_at, base, specs, fleet, settings, name, realised_frames, slots, issued)

        def solve(pb, _params=params):  # the chain calls solve(problem)
            return SOLVERS["gridshift"](pb, _params)

        # the service's re-plans through the day (app.schedule's cadence, skipped where nothing changed)
        chain = replan_chain(name, nightly, start, nightly_state(issued, runs), replan_times(settings, start),
                             lambda t: seen_state(t, runs_at(t)), problem_at(runs_at), solve, value_on)
        # replan_once (before the service's cadence): one re-plan at 13:00, on the nightly plan's forecast runs
        at13 = start + timedelta(hours=REPLAN_HOUR)
        once = replan_chain(name, nightly, start, {k: (None, {}) for k in KINDS}, [at13],
                            lambda t: seen_state(t, runs), problem_at(lambda _t: runs), solve, value_on)
        plans["replan"], plans["replan_once"] = (chain.plan, None), (once.plan, None)
        pick, _ = choose_plan({"production": plans["production"][0], "risk": plans["risk"][0]},
                              scenario_problems(on_forecast, uncertain), args.risk_weight)
        plans["chosen"] = plans[pick]
        rows = {p: _row(realised, plan, pb) for p, (plan, pb) in plans.items()}
        rows["chosen"]["pick"] = pick
        for p, c in (("replan", chain), ("replan_once", once)):
            rows[p].update(replans=len(c.replans), skipped=c.skipped, kept_current=c.kept_current,
                           replanned=c.open_jobs, moved=_moved(nightly, c.plan),
                           at=[f"{t} {why}" for t, why in c.replans])
        out[name] = rows


def run(args, hardware) -> dict:
    """Replay every ``--day-step``-th day of ``--replay-days`` days (in a shuffled order, so a run cut short still
    spreads over the year) on ``--replay-workers`` processes, then aggregate."""
    year = int(args.start[:4])
    _STATE.update(args=args, hardware=hardware, curves=read_curves(Path(args.data), args.regions, year=year),
                  frames=read_frames(Path(args.data), args.regions))
    days = list(range(0, args.replay_days, args.day_step))
    random.Random(0).shuffle(days)
    t0 = time.perf_counter()
    if args.replay_workers > 1:
        import multiprocessing as mp

        with mp.get_context("fork").Pool(args.replay_workers) as pool:
            results = list(pool.imap_unordered(replay_day, days))
    else:
        results = [replay_day(d) for d in days]
    wall = time.perf_counter() - t0
    result = summarise(args, dict(results))
    result["wall_s"] = round(wall, 1)
    return result


def summarise(args, results: dict[int, dict | None]) -> dict:
    """Totals per objective and policy, the captured shares, the month table; prints the tables."""
    errors = {r["day"]: r["error"] for r in results.values() if r and "error" in r}
    results = {d: r for d, r in results.items() if not (r and "error" in r)}
    skipped = sorted(d for d, r in results.items() if r is None)
    # a day where some plan left out jobs that the planner on perfect foresight placed compares unlike work (a solve
    # that ran out of its wall-clock limit on a loaded machine leaves jobs not solved): listed, not counted
    incomplete = sorted(d for d, r in results.items() if r is not None and not _complete(r))
    good = {d: r for d, r in sorted(results.items()) if r is not None and d not in incomplete}
    totals = {o: {p: {"cost": 0.0, "carbon_kg": 0.0, "value": 0.0, "deadline_misses": 0, "unchecked": 0}
                  for p in POLICIES} for o in OBJECTIVES}
    monthly: dict[str, dict] = {}
    picks: dict[str, int] = {}
    moves = {o: {p: dict.fromkeys(("replans", "skipped", "kept_current", "replanned", "moved"), 0)
                 for p in REPLANS} for o in OBJECTIVES}
    for r in good.values():
        for o in OBJECTIVES:
            for p in REPLANS:
                for key in moves[o][p]:
                    moves[o][p][key] += int(r[o][p].get(key, 0))
        month = r["day"][:7]
        for o in OBJECTIVES:
            for p in POLICIES:
                row, t = r[o][p], totals[o][p]
                t["cost"] += row["cost"]
                t["carbon_kg"] += row["carbon_kg"]
                t["value"] += row["value"]
                t["deadline_misses"] += row["deadline_misses"]
                t["unchecked"] += not row["checked"]
                m = monthly.setdefault(month, {}).setdefault(o, dict.fromkeys(POLICIES, 0.0))
                m[p] += row["value"]
            picks[f"{o}:{r[o]['chosen']['pick']}"] = picks.get(f"{o}:{r[o]['chosen']['pick']}", 0) + 1
    captured = {o: {p: saving_captured(totals[o]["run_now"]["value"], totals[o][p]["value"],
                                       totals[o]["perfect"]["value"]) for p in POLICIES if p != "run_now"}
                for o in OBJECTIVES}
    print(f"Closed-loop replay: {len(good)} daily plans from {args.start} (every {args.day_step}. day of "
          f"{args.replay_days}; {len(skipped)} skipped for gaps, {len(incomplete)} left out as incomplete: "
          f"{[str((results[d] or {})['day']) for d in incomplete]}), {args.jobs} jobs/day, horizon {args.days} d, "
          f"time limit {args.time_limit} s x {args.workers} workers, risk weight {args.risk_weight}")
    print(f"{'objective':<8} {'policy':<11} {'cost EUR':>11} {'carbon kg':>11} {'misses':>7} {'captured':>9} "
          f"{'unchecked':>9}")
    for o in OBJECTIVES:
        for p in POLICIES:
            t = totals[o][p]
            c = captured[o].get(p)
            print(f"{o:<8} {p:<11} {t['cost']:>11.0f} {t['carbon_kg']:>11.0f} {t['deadline_misses']:>7d} "
                  f"{'' if c is None else f'{c:.3f}':>9} {t['unchecked']:>9d}")
    shown = ("naive", "production", "replan_once", "replan", "risk")
    print(f"Saving captured per month (cost objective | carbon objective): {', '.join(shown)}")
    month_rows = {}
    for month, m in sorted(monthly.items()):
        row = {o: {p: saving_captured(m[o]["run_now"], m[o][p], m[o]["perfect"])
                   for p in (*shown, "chosen")} for o in OBJECTIVES}
        month_rows[month] = row
        f = [f"{_fmt(row[o][p]):>6}" for o in OBJECTIVES for p in shown]
        print(f"  {month}  {' '.join(f[:len(shown)])} | {' '.join(f[len(shown):])}")
    if errors:
        print(f"planner errors (days not counted): {errors}")
    print(f"chooser picks: {picks}")
    for o in OBJECTIVES:
        for p in REPLANS:
            print(f"  {o:<7} {p:<12} re-plans {moves[o][p]['replans']:>5} (skipped {moves[o][p]['skipped']}, "
                  f"kept current {moves[o][p]['kept_current']}), moved {moves[o][p]['moved']} of "
                  f"{moves[o][p]['replanned']} jobs not started by the first")
    return {
        "mode": "closed_loop",
        "replay_days": len(good),
        "day_step": args.day_step,
        "skipped_days": skipped,
        "incomplete_days": [(results[d] or {})["day"] for d in incomplete],
        "planner_errors": errors,
        "jobs_per_day": args.jobs,
        "horizon_days": args.days,
        "time_limit_s": args.time_limit,
        "risk_weight": args.risk_weight,
        "totals": totals,
        "monthly_captured": month_rows,
        "chooser_picks": picks,
        "replan_moves": moves,
        "replan_saving_captured": captured["cost"]["replan"],
        "replan_carbon_saving_captured": captured["carbon"]["replan"],
        "replan_once_saving_captured": captured["cost"]["replan_once"],
        "replan_once_carbon_saving_captured": captured["carbon"]["replan_once"],
        "carbon_refresh_h": getattr(args, "carbon_refresh_h", 0),
        "saving_captured": captured["cost"]["production"],
        "carbon_saving_captured": captured["carbon"]["production"],
        "naive_saving_captured": captured["cost"]["naive"],
        "naive_carbon_saving_captured": captured["carbon"]["naive"],
        "risk_saving_captured": captured["cost"]["risk"],
        "risk_carbon_saving_captured": captured["carbon"]["risk"],
        "chosen_saving_captured": captured["cost"]["chosen"],
        "chosen_carbon_saving_captured": captured["carbon"]["chosen"],
        "deadline_misses": {o: {p: totals[o][p]["deadline_misses"] for p in POLICIES} for o in OBJECTIVES},
    }


def _complete(day: dict) -> bool:
    """Every plan of the day, under each objective, left out no more jobs than run-now and perfect foresight."""
    return all(day[o][p]["unplanned"] <= max(day[o]["perfect"]["unplanned"], day[o]["run_now"]["unplanned"])
               and day[o]["perfect"]["unplanned"] <= day[o]["run_now"]["unplanned"]
               for o in OBJECTIVES for p in POLICIES)


def _fmt(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.3f}"


def load(results_dir: Path) -> dict[int, dict | None]:
    """The per-day files a run wrote (for a summary of a run cut short, or one made elsewhere)."""
    return {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in sorted(results_dir.glob("day-*.json"))}
