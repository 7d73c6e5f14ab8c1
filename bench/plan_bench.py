"""Planning benchmark: savings against baselines, scale, and a rolling replay on real 2022 market data.

Examples (each run prints one table; ``--json`` adds one JSON object as the last line)::

    python bench/plan_bench.py --jobs 1000 --days 4 --time-limit 10             # savings table
    python bench/plan_bench.py --scale 100,1000,10000,100000 --scale-limits 10,10,60,300
    python bench/plan_bench.py --replay-days 30 --jobs 200 --time-limit 5        # rolling daily replay
    python bench/plan_bench.py --start 2022-01-01 --replay-days 362 --day-step 4 --forecast production \
        --jobs 200 --time-limit 2 --workers 1 --replay-workers 16 --json           # closed loop (docs/closed-loop.md)

Policies are evaluated on realised prices and carbon intensity. ``gridshift`` plans on ``--forecast``
curves (``realised``: perfect information, ``naive``: day-ahead prices for the first day, then repeated;
carbon persistence); ``oracle`` is the same planner on realised curves with twice the time limit.
Workload, hardware and fleet parameters are documented in ``bench/plan_workload.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import multiprocessing
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.plan_workload import (
    CATALOG,
    DEFAULT_DATA,
    build_problem,
    generate,
    hardware_from_dicts,
    read_curves,
    start_of,
    window,
    with_curves,
)
from optimizer import SOLVERS, Objective, ObjectiveKind, Plan, Problem, SolveParams, check_plan


def realised_totals(problem: Problem, plan: Plan) -> dict:
    """Cost [EUR], carbon [kg], energy [kWh] of ``plan`` on ``problem``'s curves, and its deadline misses."""
    regions = {r.name: r for r in problem.regions}
    jobs = {j.job_id: j for j in problem.jobs}
    cost = carbon = energy = 0.0
    late = 0
    for a in plan.assignments:
        r, j = regions[a.region], jobs[a.job_id]
        kw = j.gpus * problem.job_power_kw_per_gpu(j, a.hardware) * r.pue
        for c in a.chunks:
            for t in range(c.start_slot, c.end_slot):
                e = kw * problem.slot_hours
                energy += e
                cost += e * r.price_per_mwh[t] / 1000.0
                carbon += e * r.carbon_g_per_kwh[t] / 1000.0
        late += a.end_slot > j.deadline_slot
    return {
        "cost": cost,
        "carbon_kg": carbon,
        "energy_kwh": energy,
        "deadline_misses": late + len(plan.unplanned),
        "planned": len(plan.assignments),
        "unplanned": len(plan.unplanned),
    }


def objective_of(problem: Problem, row: dict) -> float:
    kind = problem.objective.kind
    if kind is ObjectiveKind.COST:
        return row["cost"]
    if kind is ObjectiveKind.WEIGHTED:
        return row["cost"] + problem.objective.carbon_price_per_tonne * row["carbon_kg"] / 1000.0
    return row["carbon_kg"]


def make_objective(name: str, carbon_price: float, cost_cap: float | None = None) -> Objective:
    """The objective ``name`` (an ``ObjectiveKind`` value) with its carbon price [EUR/t] or cost cap [EUR]."""
    kind = ObjectiveKind(name)
    if kind is ObjectiveKind.WEIGHTED:
        return Objective(kind, carbon_price_per_tonne=carbon_price)
    if kind is ObjectiveKind.CARBON_WITH_COST_CAP:
        return Objective(kind, cost_cap=cost_cap)
    return Objective(kind)


def run_policies(
    realised: Problem, planned_on: Problem, params: SolveParams, policies: list[str]
) -> tuple[dict, Plan | None]:
    """Run each policy, check its plan, evaluate it on realised curves."""
    out: dict[str, dict] = {}
    ours: Plan | None = None
    for name in policies:
        pb = realised if name in ("oracle", "run_now") else planned_on
        p = params
        if name == "oracle":
            p = dataclasses.replace(params, time_limit_s=params.time_limit_s * 2)
        t0 = time.perf_counter()
        plan = SOLVERS[name](pb, p)
        solve_s = time.perf_counter() - t0
        allow_late = name in ("run_now", "best_window")
        report = check_plan(pb, plan, allow_late=allow_late)
        row = realised_totals(realised, plan)
        row.update(
            solve_s=round(solve_s, 3),
            checked=report.ok,
            objective=objective_of(realised, row),
            status=str(plan.status),
            gap_pct=plan.gap_pct,
            best_bound=plan.best_bound,
        )
        if not report.ok:
            row["violations"] = list(report.violations[:3])
        out[name] = row
        if name == "gridshift":
            ours = plan
    return out, ours


def savings(args, hardware) -> dict:
    curves = read_curves(Path(args.data), args.regions, year=int(args.start[:4]))
    start = start_of(args.start)
    hours = args.days * 24
    price, carbon = window(curves, start, hours, "realised")
    specs = generate(args.jobs, args.regions, args.seed)
    realised = build_problem(
        specs, hardware, price, carbon, start, make_objective(args.objective, args.carbon_price, args.cost_cap),
        slot_minutes=args.slot_minutes,
    )
    f_price, f_carbon = window(curves, start, hours, args.forecast)
    planned_on = with_curves(realised, f_price, f_carbon)
    params = _params(args, args.time_limit)
    rows, ours = run_policies(realised, planned_on, params, args.policies)
    assert ours is not None, "--policies must include gridshift"
    run_now, g, oracle = (
        rows["run_now"]["objective"],
        rows["gridshift"]["objective"],
        rows.get("oracle", {}).get("objective"),
    )
    result = {
        "jobs": args.jobs,
        "regions": args.regions,
        "start": args.start,
        "days": args.days,
        "slots": realised.n_slots,
        "slot_minutes": args.slot_minutes,
        "objective": args.objective,
        "forecast": args.forecast,
        "time_limit_s": args.time_limit,
        "seed": args.seed,
        "policies": rows,
        "lp_bound": ours.best_bound,
        "gap_pct": ours.gap_pct,
        "saving_vs_run_now_pct": 100.0 * (run_now - g) / run_now if run_now else None,
        "saving_captured": (run_now - g) / (run_now - oracle)
        if oracle is not None and run_now != oracle
        else None,
        "gridshift_phases": dict(ours.stats.phases),
        "gridshift_notes": list(ours.stats.notes),
    }
    print(
        f"Savings: {args.jobs} jobs x {len(args.regions)} regions x {len(hardware)} hardware x {realised.n_slots} "
        f"slots of {args.slot_minutes} min "
        f"from {args.start}, objective={args.objective}, gridshift plans on {args.forecast} curves"
    )
    print(
        f"{'policy':<12} {'cost EUR':>12} {'carbon kg':>12} {'energy kWh':>12} {'misses':>7} {'planned':>8} "
        f"{'solve s':>8} {'checked':>8}"
    )
    for name, r in rows.items():
        print(
            f"{name:<12} {r['cost']:>12.2f} {r['carbon_kg']:>12.1f} {r['energy_kwh']:>12.1f} "
            f"{r['deadline_misses']:>7d} {r['planned']:>8d} {r['solve_s']:>8.2f} {r['checked']!s:>8}"
        )
    print(
        f"lp_bound={result['lp_bound']:.4f} gap_pct={_fmt(result['gap_pct'])} "
        f"saving_vs_run_now_pct={_fmt(result['saving_vs_run_now_pct'])} "
        f"saving_captured={_fmt(result['saving_captured'])}"
    )
    return result


def per_seed(args, hardware, seeds: list[int]) -> dict:
    """The savings run for each seed (its own workload), then a summary line per seed."""
    runs = {}
    for k in seeds:
        args.seed = k
        runs[k] = savings(args, hardware)
        print()
    print(f"Per seed: {args.jobs} jobs, {args.time_limit:g} s, objective={args.objective}")
    print(f"{'seed':>5} {'gridshift':>12} {'lp_bound':>12} {'gap %':>8} {'captured':>9} {'misses':>7} {'checked':>8}")
    for k, r in runs.items():
        g = r["policies"]["gridshift"]
        print(
            f"{k:>5} {g['objective']:>12.2f} {r['lp_bound']:>12.2f} {_fmt(r['gap_pct']):>8} "
            f"{_fmt(r['saving_captured']):>9} {g['deadline_misses']:>7d} {g['checked']!s:>8}"
        )
    gaps = [r["gap_pct"] for r in runs.values() if r["gap_pct"] is not None]
    return {"seeds": runs, "gap_pct_max": max(gaps) if gaps else None}


def _params(args, limit: float) -> SolveParams:
    """The planner's parameters for a run of ``limit`` seconds."""
    return SolveParams(
        limit,
        args.workers,
        args.seed,
        rins=not args.no_rins,
        capacity_blocks=not args.no_blocks,
        coarse_share=0.0 if args.no_coarse else SolveParams().coarse_share,
        coarse_plan_share=args.coarse_plan,
        coarse_lp_share=args.coarse_lp,
    )


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def scale(args, hardware) -> dict:
    curves = read_curves(Path(args.data), args.regions, year=int(args.start[:4]))
    start = start_of(args.start)
    price, carbon = window(curves, start, args.days * 24, "realised")
    sizes = [int(x) for x in args.scale.split(",")]
    limits = (
        [float(x) for x in args.scale_limits.split(",")]
        if args.scale_limits
        else [args.time_limit] * len(sizes)
    )
    rows = []
    print(
        f"Scale: gridshift, {len(args.regions)} regions x {len(hardware)} hardware x "
        f"{args.days * 24 * 60 // args.slot_minutes} slots of {args.slot_minutes} min, "
        f"objective={args.objective}, {args.workers} workers"
    )
    print(
        f"{'jobs':>8} {'limit s':>8} {'solve s':>8} {'check s':>8} {'status':>9} {'objective':>14} {'bound':>14} "
        f"{'gap %':>8} {'left out':>8} {'classes':>8} {'options':>9} {'checked':>8}"
    )
    for n, limit in zip(sizes, limits, strict=True):
        specs = generate(n, args.regions, args.seed)
        pb = build_problem(
            specs, hardware, price, carbon, start, make_objective(args.objective, args.carbon_price, args.cost_cap),
            slot_minutes=args.slot_minutes,
        )
        t0 = time.perf_counter()
        plan = SOLVERS["gridshift"](pb, _params(args, limit))
        solve_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        report = check_plan(pb, plan)
        check_s = time.perf_counter() - t1
        row = {
            "jobs": n,
            "time_limit_s": limit,
            "solve_s": round(solve_s, 2),
            "check_s": round(check_s, 2),
            "status": str(plan.status),
            "objective": plan.objective,
            "lp_bound": plan.best_bound,
            "gap_pct": plan.gap_pct,
            "unplanned": len(plan.unplanned),
            "classes": plan.stats.num_classes,
            "options": plan.stats.num_options,
            "checked": report.ok,
            "phases": dict(plan.stats.phases),
            "unplanned_reasons": _count(plan),
            "notes": list(plan.stats.notes),
        }
        rows.append(row)
        print(
            f"{n:>8d} {limit:>8.0f} {solve_s:>8.2f} {check_s:>8.2f} {row['status']:>9} {plan.objective:>14.2f} "
            f"{(plan.best_bound or math.nan):>14.2f} {_fmt(plan.gap_pct):>8} {len(plan.unplanned):>8d} "
            f"{plan.stats.num_classes:>8d} {plan.stats.num_options:>9d} {report.ok!s:>8}"
        )
    return {"scale": rows, "regions": args.regions, "days": args.days, "objective": args.objective,
            "slot_minutes": args.slot_minutes}


def _count(plan: Plan) -> dict:
    out: dict[str, int] = {}
    for u in plan.unplanned:
        out[str(u.reason)] = out.get(str(u.reason), 0) + 1
    return out


REPLAY_OBJECTIVES = (ObjectiveKind.COST, ObjectiveKind.CARBON, ObjectiveKind.WEIGHTED)
REPLAY_KEYS = ("cost", "carbon_kg", "energy_kwh", "deadline_misses", "solve_s")
_REPLAY: dict = {}  # the curves and settings each replay process reads (filled before the pool forks)


def _replay_day(d: int) -> tuple[int, dict | None]:
    """Day ``d`` of the replay: run-now and gridshift under each objective, totals on realised curves.

    ``None`` when the data has a hole in that day's horizon (the day is reported as skipped)."""
    args, hardware, curves = _REPLAY["args"], _REPLAY["hardware"], _REPLAY["curves"]
    start = start_of(args.start) + timedelta(days=d)
    price, carbon = window(curves, start, args.days * 24, "realised")
    if price.isna().any().any() or carbon.isna().any().any():
        return d, None
    specs = generate(args.jobs, args.regions, args.seed + d)
    f_price, f_carbon = window(curves, start, args.days * 24, args.forecast)
    out: dict = {}
    for o in REPLAY_OBJECTIVES:
        realised = build_problem(specs, hardware, price, carbon, start, make_objective(o, args.carbon_price),
                                 slot_minutes=args.slot_minutes)
        planned_on = with_curves(realised, f_price, f_carbon)
        rows, _ = run_policies(
            realised,
            planned_on,
            _params(args, args.time_limit),
            ["run_now", "gridshift"],
        )
        out[o] = {p: {k: rows[p][k] for k in REPLAY_KEYS} | {"checked": rows[p]["checked"]} for p in rows}
    return d, out


def replay(args, hardware) -> dict:
    """Daily plans over ``--replay-days`` days; each day's jobs are planned over ``--days`` days from that day.

    Days are independent (each has its own seeded workload), so ``--replay-workers`` processes share them out;
    each solve keeps ``--workers`` threads, so use ``--workers 1`` with many processes."""
    _REPLAY.update(args=args, hardware=hardware, curves=read_curves(Path(args.data), args.regions,
                                                                    year=int(args.start[:4])))
    totals = {
        o: {p: dict.fromkeys(REPLAY_KEYS, 0.0) | {"deadline_misses": 0, "unchecked_plans": 0} for p in ("run_now", "gridshift")}
        for o in REPLAY_OBJECTIVES
    }
    monthly: dict[str, dict] = {}
    skipped: list[int] = []
    t0 = time.perf_counter()
    if args.replay_workers > 1:
        import multiprocessing as mp

        with mp.get_context("fork").Pool(args.replay_workers) as pool:
            results = list(pool.imap_unordered(_replay_day, range(args.replay_days)))
    else:
        results = [_replay_day(d) for d in range(args.replay_days)]
    for d, out in sorted(results):
        if out is None:
            skipped.append(d)
            continue
        month = (start_of(args.start) + timedelta(days=d)).strftime("%Y-%m")
        for o in REPLAY_OBJECTIVES:
            for p, row in out[o].items():
                for k in REPLAY_KEYS:
                    totals[o][p][k] += row[k]
                totals[o][p]["unchecked_plans"] += not row["checked"]
            m = monthly.setdefault(month, {}).setdefault(o, {"run_now": [0.0, 0.0], "gridshift": [0.0, 0.0]})
            for p in ("run_now", "gridshift"):
                m[p][0] += out[o][p]["cost"]
                m[p][1] += out[o][p]["carbon_kg"]
    days_run = args.replay_days - len(skipped)
    wall_s = time.perf_counter() - t0
    print(
        f"Replay: {days_run} daily plans from {args.start} ({len(skipped)} skipped for gaps in the data), "
        f"{args.jobs} jobs/day, horizon {args.days} d, gridshift on {args.forecast} curves, time limit "
        f"{args.time_limit} s x {args.workers} workers, carbon price {args.carbon_price} EUR/t (weighted); "
        f"{wall_s:.0f} s on {args.replay_workers} processes"
    )
    print(
        f"{'objective':<10} {'run_now EUR':>12} {'ours EUR':>12} {'cost %':>8} {'run_now kg':>12} {'ours kg':>12} "
        f"{'carbon %':>9} {'misses now/ours':>16}"
    )
    summary = {}
    for o in REPLAY_OBJECTIVES:
        a, b = totals[o]["run_now"], totals[o]["gridshift"]
        dc = 100.0 * (b["cost"] - a["cost"]) / a["cost"] if a["cost"] else math.nan
        dk = 100.0 * (b["carbon_kg"] - a["carbon_kg"]) / a["carbon_kg"] if a["carbon_kg"] else math.nan
        summary[o] = {
            "run_now": a,
            "gridshift": b,
            "cost_change_pct": dc,
            "carbon_change_pct": dk,
            "carbon_above_run_now": dk > 0,
        }
        print(
            f"{o:<10} {a['cost']:>12.0f} {b['cost']:>12.0f} {dc:>8.2f} {a['carbon_kg']:>12.0f} "
            f"{b['carbon_kg']:>12.0f} {dk:>9.2f} {a['deadline_misses']:>8d}/{b['deadline_misses']:<7d}"
        )
        if dk > 0:
            print(f"  note: optimising {o} raised carbon above run-now by {dk:.2f} %")
    print("Cost change vs run-now per month [%] (objective cost) and carbon change [%] (objective carbon):")
    for month, m in sorted(monthly.items()):
        c, k = m["cost"], m["carbon"]
        dc = 100.0 * (c["gridshift"][0] - c["run_now"][0]) / c["run_now"][0] if c["run_now"][0] else math.nan
        dk = 100.0 * (k["gridshift"][1] - k["run_now"][1]) / k["run_now"][1] if k["run_now"][1] else math.nan
        print(f"  {month}  cost {dc:7.2f}   carbon {dk:7.2f}")
    return {
        "replay_days": days_run,
        "skipped_days": skipped,
        "jobs_per_day": args.jobs,
        "horizon_days": args.days,
        "forecast": args.forecast,
        "time_limit_s": args.time_limit,
        "wall_s": round(wall_s, 1),
        "totals": summary,
        "monthly": monthly,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="harmonized data folder")
    ap.add_argument("--regions", default="DE,FR,ES,FI,PL")
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--start", default="2022-03-01")
    ap.add_argument("--days", type=int, default=4, help="planning horizon [days]")
    ap.add_argument(
        "--slot-minutes", type=int, default=60, choices=[5, 10, 15, 20, 30, 60],
        help="slot length [min]; hourly prices are held over the hour's slots",
    )
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--seeds", help="comma-separated seeds: the savings run once per seed, then one line per seed"
    )
    ap.add_argument("--objective", default="cost", choices=[k.value for k in ObjectiveKind])
    ap.add_argument(
        "--carbon-price", type=float, default=100.0, help="EUR per tonne for --objective weighted"
    )
    ap.add_argument("--cost-cap", type=float, help="EUR a plan may spend, for --objective carbon_cost_cap")
    ap.add_argument(
        "--forecast", default="realised", choices=["realised", "perfect", "naive", "production"],
        help="curves gridshift plans on: realised (= perfect foresight), naive, or with --replay-days the service's "
        "own forecasts (production; bench/closed_loop.py), reported beside naive and perfect",
    )
    ap.add_argument("--day-step", type=int, default=1, help="production replay: every N-th day only")
    ap.add_argument("--carbon-refresh-h", type=int, default=0,
                    help="production replay: carbon forecasts re-issued every N hours through the day (0: as beat's "
                         "carbon-forecast entry, every hour; more is cheaper and not the service)")
    ap.add_argument("--risk-weight", type=float, default=0.5,
                    help="production replay: weight of the q10-q90 spread in the risk-adjusted plan (optimizer.scenarios)")
    ap.add_argument("--cache", default=str(Path(__file__).resolve().parent / ".cache" / "closed_loop"),
                    help="production replay: forecast cache folder (git-ignored)")
    ap.add_argument("--results-dir", help="production replay: one JSON file per day (default: under --cache)")
    ap.add_argument("--summarise", metavar="DIR", help="production replay: only summarise the day files in DIR")
    ap.add_argument("--policies", default="run_now,best_window,greedy,gridshift,oracle")
    ap.add_argument(
        "--catalog", help="JSON list of hardware rows {name, tdp_w, memory_gb, relative_throughput}"
    )
    ap.add_argument("--scale", help="comma-separated job counts for the scale table")
    ap.add_argument("--scale-limits", help="time limit per scale size [s], comma-separated")
    ap.add_argument("--replay-days", type=int, default=0, help="rolling replay of this many daily plans")
    ap.add_argument("--replay-workers", "--processes", type=int, default=1,
                    help="processes sharing the replay's days")
    ap.add_argument(
        "--no-rins",
        action="store_true",
        help="leave out the MIP around the best plan (SolveParams.rins=False)",
    )
    ap.add_argument(
        "--no-blocks",
        action="store_true",
        help="a capacity row per slot in the LP bound and the ascent (SolveParams.capacity_blocks=False)",
    )
    ap.add_argument(
        "--no-coarse",
        action="store_true",
        help="on finer grids, no ascent on whole hours first (SolveParams.coarse_share=0)",
    )
    ap.add_argument(
        "--coarse-plan",
        type=float,
        default=0.0,
        help="on finer grids, plan the jobs on whole hours on the second worker in this share of the time and start "
        "the fine search from that plan (SolveParams.coarse_plan_share; 0: off)",
    )
    ap.add_argument(
        "--coarse-lp",
        type=float,
        default=0.0,
        help="on finer grids, on the LP path, run the hourly LP first for this share of the LP's time and start the "
        "fine LP from its columns (SolveParams.coarse_lp_share; 0: off)",
    )
    ap.add_argument(
        "--load-hog",
        type=int,
        default=0,
        help="busy processes spinning beside the planner for the whole run (a machine under load; they share the "
        "cores this process may use)",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.load_hog < 0:
        ap.error("--load-hog must be 0 or more")
    args.regions = [r.strip() for r in args.regions.split(",") if r.strip()]
    if args.forecast == "perfect":
        args.forecast = "realised"
    if args.forecast == "production" and not (args.replay_days or args.summarise):
        ap.error("--forecast production needs --replay-days N (the closed-loop replay)")
    if args.day_step < 1:
        ap.error("--day-step must be 1 or more")
    if args.results_dir is None:
        args.results_dir = str(Path(args.cache) / f"results-{args.start}-{args.replay_days}d-{args.jobs}j-"
                               f"{args.time_limit:g}s-seed{args.seed}-risk{args.risk_weight:g}")
    args.policies = [p.strip() for p in args.policies.split(",")]
    for p in args.policies:
        if p not in SOLVERS:
            ap.error(f"unknown policy {p!r}; valid: {', '.join(SOLVERS)}")
    for needed in ("run_now", "gridshift"):
        if needed not in args.policies:
            args.policies.insert(0, needed)
    if args.objective == ObjectiveKind.CARBON_WITH_COST_CAP and args.cost_cap is None:
        ap.error("--objective carbon_cost_cap needs --cost-cap")
    if not Path(args.data).exists():
        ap.error(f"data folder {args.data} not found (set --data or GRIDSHIFT_SHARED_DATA)")
    rows = json.loads(Path(args.catalog).read_text()) if args.catalog else CATALOG
    hardware = hardware_from_dicts(rows)
    with load_hog(args.load_hog):
        result = _run(args, hardware)
    if args.json:
        print(json.dumps(result, default=str))
    return 0


def _spin() -> None:  # pragma: no cover - runs in a child until terminated
    while True:
        pass


@contextlib.contextmanager
def load_hog(n: int):
    """``n`` busy processes for the duration of the block (killed at its end)."""
    procs = [multiprocessing.get_context("fork").Process(target=_spin, daemon=True) for _ in range(n)]
    for p in procs:
        p.start()
    try:
        yield
    finally:
        for p in procs:
            p.terminate()
            p.join()


def _run(args, hardware) -> dict:
    if args.forecast == "production":
        from bench import closed_loop_replay  # imports the service's modules (app.services)

        if args.summarise:
            result = closed_loop_replay.summarise(args, closed_loop_replay.load(Path(args.summarise)))
        else:
            result = closed_loop_replay.run(args, hardware)
    elif args.scale:
        result = scale(args, hardware)
    elif args.replay_days:
        result = replay(args, hardware)
    elif args.seeds:
        result = per_seed(args, hardware, [int(k) for k in args.seeds.split(",") if k.strip()])
    else:
        result = savings(args, hardware)
    result["load_hog"] = args.load_hog
    return result


if __name__ == "__main__":
    raise SystemExit(main())
