"""How far the LP over hour blocks lies below the per-slot LP, and how long each takes to converge (issue 27).

On a 15-minute grid with hourly prices held, the planner prices an hour's GPU and power rows as one
(``optimizer.blocks``). That LP is a relaxation of the per-slot LP; this probe runs the column generation of both
to convergence (no planner, no time shares) on the bench workload and prints each one's rounds, wall time, value
and bound, so the aggregation's cost in bound can be read off:

    python bench/lp_blocks_probe.py --jobs 1000 --seed 0 --slot-minutes 15 --time-limit 60 --json

A per-slot LP that does not converge in ``--time-limit`` still gives a bracket: its restricted LP value is at least
the per-slot LP optimum, its Lagrangian bound at most.
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
from optimizer.cpsat import build_classes
from optimizer.lp import column_generation
from optimizer.tables import build_tables


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_workload_args(ap, jobs=1000, slot_minutes=True)
    ap.add_argument("--time-limit", type=float, default=60.0, help="per LP [s]")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    problem = workload_problem(args, make_objective("cost", 0.0, None))
    tb = build_tables(problem)
    cls, rep, counts = build_classes(tb)
    blocks = tb.blocks
    rows = {}
    for name, starts in (("hour blocks", blocks), ("per slot", None)):
        if name == "hour blocks" and starts is None:
            continue  # curves not held over any hour: nothing aggregated
        tb.blocks = starts
        t0 = time.perf_counter()
        bound, _, info = column_generation(
            tb, cls, rep, counts, [], time_limit_s=args.time_limit, max_rounds=1000
        )
        rows[name] = {
            "rounds": info["rounds"],
            "converged": bool(info["converged"]),
            "wall_s": round(time.perf_counter() - t0, 2),
            "lp_value": info["lp_value"],
            "bound": bound,
            "capacity_blocks": tb.T if starts is None else len(starts),
        }
    print(f"{'LP':<12} {'rows/pair':>9} {'rounds':>7} {'conv':>5} {'wall s':>7} {'LP value':>12} {'bound':>12}")
    for name, r in rows.items():
        print(
            f"{name:<12} {r['capacity_blocks']:>9} {r['rounds']:>7} {r['converged']!s:>5} {r['wall_s']:>7.2f} "
            f"{r['lp_value'] or float('nan'):>12.3f} {r['bound']:>12.3f}"
        )
    if args.json:
        print(json.dumps({"jobs": args.jobs, "seed": args.seed, "slot_minutes": args.slot_minutes, "lp": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
