"""CPU and wall seconds of the tables and of the first plan (issue 22: first plan within 10 % of the limit).

Builds the scale benchmark's instance (bench/plan_bench.py --scale, same jobs for a seed) and times
``optimizer.tables.build_tables`` and ``optimizer.solve.start_run`` (the zero-price evaluation, candidates and the
greedy placement). CPU time moves less with what runs beside it than wall time; run two checkouts side by side to
compare them::

    python bench/first_plan_probe.py --jobs 100000 --limit 300
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
from optimizer.solve import SolveParams, start_run
from optimizer.tables import build_tables


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_args(ap, jobs=100_000)
    ap.add_argument(
        "--limit", type=float, default=300.0, help="time limit [s] (the first plan stops at 60 %% of it)"
    )
    args = ap.parse_args()
    pb = workload_problem(args, make_objective("cost", 100.0))
    c0, w0 = time.process_time(), time.perf_counter()
    tb = build_tables(pb)
    c1, w1 = time.process_time(), time.perf_counter()
    run = start_run(tb, SolveParams(args.limit), w0, w1, {})
    c2, w2 = time.process_time(), time.perf_counter()
    out = {
        "jobs": args.jobs,
        "tables_cpu_s": round(c1 - c0, 2),
        "tables_wall_s": round(w1 - w0, 2),
        "first_plan_cpu_s": round(c2 - c1, 2),
        "first_plan_wall_s": round(w2 - w1, 2),
        "left_out": int((run.best.plan.r < 0).sum()),
        "reached": int(len(run.order) - len(run.unreached)),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
