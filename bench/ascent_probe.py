"""Subgradient ascent with each job shape evaluated once against job by job, at equal wall time (issue 22).

Off the LP path (beyond ``max_lp_jobs``) the bound is the Lagrangian ascent's; each iteration evaluates every
start of every job, or, with ``optimizer.shapes``, one job per shape of each segment. This probe builds the scale
benchmark's instance (``bench/plan_bench.py --scale``, same jobs for a seed), then runs the ascent from zero prices
both ways for the same wall time, alternating (job by job, shared, job by job, ...), and prints iterations, the
bound reached and the CPU time of each::

    python bench/ascent_probe.py --jobs 10000 --seed 0 --budget 20 --repeats 2 --json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from bench.plan_bench import make_objective
from bench.plan_workload import add_workload_args, workload_problem
from optimizer.bound import Multipliers, evaluate, subgradient
from optimizer.candidates import Candidates, place_fast
from optimizer.heuristic import greedy_order, penalised_objective
from optimizer.shapes import share_shapes
from optimizer.tables import Tables, build_tables
from optimizer.windows import SharedSegments


def job_by_job(tb: Tables) -> SharedSegments:
    """Every segment its own unit: ``evaluate`` prices every job's starts (the evaluation before shapes)."""
    contig = [(seg, np.arange(len(seg.job))) for seg in tb.contig]
    halves = [(a, b, np.arange(len(a.job))) for a, b in tb.halves]
    every = sum(len(s.ok) for s in tb.contig) + 2 * sum(len(a.ok) for a, _ in tb.halves)
    return SharedSegments(contig, halves, every, every)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_workload_args(ap, jobs=10000)
    ap.add_argument("--budget", type=float, default=20.0, help="wall time of each ascent [s]")
    ap.add_argument("--repeats", type=int, default=1, help="ascents of each kind, alternating")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    problem = workload_problem(args, make_objective("cost", 100.0))
    plain, shared = build_tables(problem), build_tables(problem)
    plain.shared = job_by_job(plain)
    share_shapes(shared)
    found: list = []
    evaluate(shared, Multipliers.zeros(shared), collect=found)
    upper = penalised_objective(shared, place_fast(shared, greedy_order(shared), Candidates(shared, found)))
    rows: dict[str, list[dict]] = {"job by job": [], "shapes": []}
    for _ in range(args.repeats):
        for name, tb in (("job by job", plain), ("shapes", shared)):
            w0, c0 = time.perf_counter(), time.process_time()
            value, _, hist = subgradient(tb, upper, max_iter=100_000, time_limit_s=args.budget)
            rows[name].append(
                {
                    "bound": round(value, 4),
                    "iterations": len(hist),
                    "wall_s": round(time.perf_counter() - w0, 2),
                    "cpu_s": round(time.process_time() - c0, 2),
                }
            )
    assert plain.shared is not None and shared.shared is not None
    print(f"{args.jobs} jobs, seed {args.seed}, {args.budget:.0f} s each, upper {upper:.2f}")
    print(f"starts priced per evaluation: job by job {plain.shared.starts:,}, shapes {shared.shared.starts:,}")
    print(f"{'ascent':<12} {'bound':>14} {'iterations':>10} {'wall s':>8} {'cpu s':>8}")
    for name, runs in rows.items():
        for r in runs:
            print(f"{name:<12} {r['bound']:>14.2f} {r['iterations']:>10d} {r['wall_s']:>8.2f} {r['cpu_s']:>8.2f}")
    if args.json:
        out = {
            "jobs": args.jobs,
            "seed": args.seed,
            "budget_s": args.budget,
            "upper": upper,
            "starts": {"job by job": plain.shared.starts, "shapes": shared.shared.starts},
            "runs": rows,
        }
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
