"""Which plan does the time after the LP buy at 15 minutes? (issue 27)

Runs the planner's first phases once (tables, greedy plan, column generation for its share of ``--time-limit``),
then, each in a forked child from that same state (one core each, one after the other), one of:

* ``dives``: the planner's dives (``dive_portfolio``, both lanes, two workers);
* ``block[:S[:SHARE:EVERY]]``: one dive of ``SHARE`` of the jobs a step, pricing every ``EVERY`` steps, for ``S``
  seconds, on the LP over hour blocks as column generation left it;
* ``refined[:S[:SHARE:EVERY]]``: the same from the LP refined per slot (``refine_slots``; its time counts in ``S``);
* ``slot[:S[:SHARE:EVERY]]``: the same from the LP over the same columns with a row for every slot;
* ``mip[:S[:FREE[:START]]]``: the MIP over the LP's columns (``submip.rins``) for ``S`` seconds, the classes the
  plan and the LP place differently free (``FREE`` = ``diff``) or every class (``all``), warm-started from the LP
  rounding (``START`` = ``rounding``), the greedy plan (``greedy``) or the best of the dives (``dives``, 3 s, not
  counted in ``S``).

    python bench/rins_probe.py --jobs 1000 --seed 3 --slot-minutes 15 --modes dives,refined:4.5,mip:5 --json
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.plan_bench import make_objective
from bench.plan_workload import add_workload_args, workload_problem
from optimizer import phases_bound
from optimizer.bound import Choice
from optimizer.dive import dive_portfolio, lp_dive, refine_slots
from optimizer.heuristic import penalised_objective
from optimizer.lp import RestrictedMaster
from optimizer.parallel import fork_call
from optimizer.problem import SolveParams
from optimizer.solve import start_run
from optimizer.submip import rins
from optimizer.tables import build_tables


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_workload_args(ap, jobs=1000, slot_minutes=True)
    ap.add_argument(
        "--time-limit", type=float, default=10.0, help="planner limit the LP's share is taken of [s]"
    )
    ap.add_argument("--modes", default="dives,refined:4.5", help="comma list (see above)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    problem = workload_problem(args, make_objective("cost", 0.0, None), slot_minutes=args.slot_minutes)
    t0 = time.perf_counter()
    tb = build_tables(problem)
    run = start_run(
        tb, SolveParams(time_limit_s=args.time_limit, random_seed=args.seed), t0, time.perf_counter(), {}
    )
    greedy = run.best.plan
    phases_bound.lp_colgen(run)
    master = run.info.pop("master")
    rounding = run.best.plan
    out: dict = {
        "seed": args.seed,
        "slot_minutes": args.slot_minutes,
        "lp_value": run.info["lp_value"],
        "lp_converged": bool(run.info["converged"]),
        "lp_rounds": run.info["rounds"],
        "lp_s": run.phases.get("lp_colgen"),
        "rounding": round(penalised_objective(tb, rounding), 3),
        "bound": run.lower,
    }

    def one(mode: str) -> dict:
        name, *rest = mode.split(":")
        budget = float(rest[0]) if rest else 4.5
        t = time.perf_counter()
        got: dict = {}
        if name == "dives":
            plans = dive_portfolio(tb, master, run.rep, run.counts, time_limit_s=budget, workers=2)
            got["plans"] = [round(penalised_objective(tb, p), 3) for p in plans]
        elif name in ("block", "refined", "slot"):
            share, every = (float(rest[1]), int(rest[2])) if len(rest) >= 3 else (0.025, 1)
            lp, tb_lp = master, tb
            if name == "refined":
                got["rows_added"] = refine_slots(lp, time_limit_s=0.5 * budget)
            elif name == "slot":
                tb_lp = copy.copy(tb)
                tb_lp.blocks = None
                lp = RestrictedMaster(tb_lp, run.cls, run.rep, run.counts)
                keys = np.array([key for key, _ in master.column_vars], dtype=np.int64)
                lp.add_options(
                    Choice(*(keys[:, k] for k in range(1, 7))), np.arange(len(keys)), run.rep[keys[:, 0]]
                )
                lp.solve(budget)
            got["lp_s"], got["lp"] = round(time.perf_counter() - t, 2), lp.value()
            plan = lp_dive(
                tb_lp,
                lp,
                run.rep,
                run.counts,
                time_limit_s=budget - (time.perf_counter() - t),
                batch=max(1, int(share * tb.J)),
                price_every=every,
            )
            got["plan"] = round(penalised_objective(tb, plan), 3)
        elif name == "mip":
            free = rest[1] if len(rest) > 1 else "diff"
            start = rest[2] if len(rest) > 2 else "rounding"
            if start == "greedy":
                inc = greedy
            elif start == "dives":  # the best of the planner's dives (their time not counted in S)
                plans = dive_portfolio(tb, master, run.rep, run.counts, time_limit_s=3.0, workers=2)
                inc = min(plans, key=lambda p: penalised_objective(tb, p))
                t = time.perf_counter()
            else:
                inc = rounding
            got["start"] = round(penalised_objective(tb, inc), 3)
            mip_plan = rins(
                tb,
                run.cls,
                run.rep,
                run.counts,
                run.info["columns_table"],
                run.info["primal"],
                inc,
                time_limit_s=budget,
                seed=args.seed,
                free=np.ones(len(run.rep), dtype=bool) if free == "all" else None,
            )
            got["plan"] = None if mip_plan is None else round(penalised_objective(tb, mip_plan), 3)
        got["s"] = round(time.perf_counter() - t, 2)
        return got

    for mode in args.modes.split(","):
        child = fork_call(functools.partial(one, mode))  # each from the same LP (the dives change theirs)
        out[mode] = (child.result(timeout_s=3600) if child is not None else None) or "failed"
        if not args.json:
            print(mode, out[mode], flush=True)
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
