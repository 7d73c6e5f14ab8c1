"""The bound of the subgradient ascent at 15-minute slots, from zero prices or from the hourly problem's (issue 27).

Off the LP path (beyond ``max_lp_jobs``, e.g. 10,000 jobs) the planner's bound comes from the subgradient ascent, and
at 15-minute slots each step prices four times the starts. ``optimizer.coarse.coarse_ascent`` first ascends on the
same jobs on whole hours and spreads the hourly prices over the quarter-hours as the fine ascent's start. This probe
runs both side by side on the bench workload, each for the same wall time, and prints the bound each reaches and the
CPU time each used (on a loaded machine compare at equal CPU time):

    python bench/coarse_probe.py --jobs 10000 --seed 0 --budget 20 --json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.plan_bench import make_objective
from bench.plan_workload import add_workload_args, workload_problem
from optimizer.bound import Multipliers, evaluate, subgradient
from optimizer.candidates import Candidates, place_fast
from optimizer.coarse import coarse_problem, lift_prices
from optimizer.heuristic import greedy_order, penalised_objective
from optimizer.tables import build_tables


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_workload_args(ap, jobs=10000)
    ap.add_argument(
        "--budget", type=float, default=20.0, help="wall time of each ascent, hourly part included [s]"
    )
    ap.add_argument(
        "--coarse-share",
        type=float,
        default=0.5,
        help="share of the budget on the hourly grid",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    problem = workload_problem(args, make_objective("cost", 0.0, None), slot_minutes=15)
    tb = build_tables(problem)
    found: list = []
    zero_value = float(evaluate(tb, Multipliers.zeros(tb), collect=found)[0])
    greedy = place_fast(tb, greedy_order(tb), Candidates(tb, found))
    upper = penalised_objective(tb, greedy)
    rows = {}
    # from the hourly prices: hourly tables, hourly ascent, then the fine ascent from the spread prices
    w0, c0 = time.perf_counter(), time.process_time()
    coarse = coarse_problem(problem)
    assert coarse is not None
    ctb = build_tables(coarse.problem)
    hourly_value, m, hist_c = subgradient(
        ctb,
        upper,
        max_iter=100_000,
        time_limit_s=args.coarse_share * args.budget - (time.perf_counter() - w0),
    )
    spread = lift_prices(tb, coarse, m)
    at_spread = float(evaluate(tb, spread)[0])
    value, _, hist_f = subgradient(
        tb, upper, max_iter=100_000, start=spread, time_limit_s=args.budget - (time.perf_counter() - w0)
    )
    rows["hourly then fine"] = {
        "bound": value,
        "at_hourly_prices": at_spread,
        "hourly_bound": hourly_value,
        "iterations": f"{len(hist_c)} hourly + {len(hist_f)} fine",
        "wall_s": round(time.perf_counter() - w0, 2),
        "cpu_s": round(time.process_time() - c0, 2),
    }
    w0, c0 = time.perf_counter(), time.process_time()
    value, _, hist = subgradient(tb, upper, max_iter=100_000, time_limit_s=args.budget)
    rows["fine from zero"] = {
        "bound": value,
        "iterations": f"{len(hist)} fine",
        "wall_s": round(time.perf_counter() - w0, 2),
        "cpu_s": round(time.process_time() - c0, 2),
    }
    print(f"greedy plan {upper:.2f}, bound at zero prices {zero_value:.2f}")
    for name, r in rows.items():
        print(
            f"{name:<18} bound {r['bound']:>12.2f}  {r['iterations']:>22}  wall {r['wall_s']:>6.2f} s  cpu {r['cpu_s']:>6.2f} s"
        )
    if args.json:
        print(
            json.dumps(
                {"jobs": args.jobs, "seed": args.seed, "greedy": upper, "zero": zero_value, "ascent": rows}
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
