"""Does the hourly LP's start make the 15-minute LP converge sooner? (issue 27, ``optimizer.coarse_lp``)

Runs the column generation of the 15-minute LP (capacity blocks, as the planner does) on the bench workload twice for
the same wall time: from the planner's first columns only, and from the hourly LP's columns and duals first
(``--coarse-share`` of the time, tables and lifting included). Prints each one's rounds, convergence, restricted LP
value and valid bound:

    python bench/coarse_lp_probe.py --jobs 1000 --seed 0 --budget 6 --json
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
from optimizer.coarse_lp import coarse_columns
from optimizer.cpsat import build_classes
from optimizer.lp import column_generation
from optimizer.tables import build_tables


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_workload_args(ap, jobs=1000, slot_minutes=True)
    ap.add_argument("--budget", type=float, default=6.0, help="wall time of each LP [s]")
    ap.add_argument("--coarse-share", type=float, default=0.3, help="share of the budget for the hourly LP")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    problem = workload_problem(args, make_objective("cost", 0.0, None))
    tb = build_tables(problem)
    cls, rep, counts = build_classes(tb)
    rows = {}
    for name in ("fine only", "hourly first"):
        t0 = time.perf_counter()
        extra: dict = {}
        kw: dict = {}
        if name == "hourly first":
            got = coarse_columns(tb, cls, rep, time_limit_s=args.coarse_share * args.budget)
            if got is not None:
                ch, job_rows, value, m, extra = got
                kw = {"columns": (ch, job_rows), "start": (value, m)}
                extra["start_bound"] = value
                extra["hourly_s"] = round(time.perf_counter() - t0, 2)
        bound, _, info = column_generation(
            tb, cls, rep, counts, [], time_limit_s=args.budget - (time.perf_counter() - t0), **kw
        )
        rows[name] = {
            "rounds": info["rounds"],
            "converged": bool(info["converged"]),
            "wall_s": round(time.perf_counter() - t0, 2),
            "lp_value": info["lp_value"],
            "bound": bound,
            "trace": info["trace"],
            **extra,
        }
    print(f"{'LP':<13} {'rounds':>7} {'conv':>5} {'wall s':>7} {'LP value':>12} {'bound':>12}")
    for name, r in rows.items():
        print(
            f"{name:<13} {r['rounds']:>7} {r['converged']!s:>5} {r['wall_s']:>7.2f} "
            f"{r['lp_value'] or float('nan'):>12.3f} {r['bound']:>12.3f}"
        )
    if args.json:
        print(json.dumps({"jobs": args.jobs, "seed": args.seed, "budget_s": args.budget, "lp": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
