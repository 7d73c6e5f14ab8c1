"""Is a bench instance's gap the bound or the plan? A valid bound stronger than the LP's, by price and branch.

The planner plans the instance (``--plan-s``), the LP is solved to convergence, and every option within the
reduced-cost gap ``plan - L(duals)`` is listed (``optimizer.fixing``: one runs anywhere, and every split and pair of
starts of the interruptible jobs' two chunks). HiGHS then solves that integer program (``--mip-s``, presolve off:
on 200,000 columns its presolve alone outlasts the limit), warm-started from the plan. Its dual bound, capped at
the plan, bounds the Problem (a better plan uses only listed options); its best plan is a plan of the Problem.

    python bench/fixing_probe.py --days 1 --seed 7 --mip-s 240 --json

Not part of the planner: at 1,000 jobs over one day the listing holds ~200,000 options and HiGHS's root alone
takes minutes. The JSON (last line) gives the LP bound, the probe's bound, the plan and the MIP's best plan.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
from ortools.math_opt import model_parameters_pb2
from ortools.math_opt.python import mathopt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.plan_bench import make_objective
from bench.plan_workload import add_workload_args, workload_problem
from optimizer.assemble import choice_of
from optimizer.cpsat import build_classes
from optimizer.fixing import enumerate_options
from optimizer.heuristic import penalised_objective
from optimizer.lp import column_generation
from optimizer.master import master_model, run_model
from optimizer.problem import SolveParams
from optimizer.solve import solve_gridshift
from optimizer.submip import _lookup, plan_columns
from optimizer.tables import build_tables


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_args(ap, jobs=1000)
    ap.add_argument("--plan-s", type=float, default=10.0, help="the planner's time limit [s]")
    ap.add_argument("--mip-s", type=float, default=240.0, help="HiGHS's time limit [s]")
    ap.add_argument(
        "--max-options",
        type=int,
        default=2_000_000,
        help="stop with a message when more options lie within the gap (one day at 1,000 jobs: ~200,000; four days "
        "ran a 24-GB machine out of memory)",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    pb = workload_problem(args, make_objective("cost", 0.0))
    plan = solve_gridshift(pb, SolveParams(time_limit_s=args.plan_s))
    tb = build_tables(pb)
    cls, rep, counts = build_classes(tb)
    ch = choice_of(tb, plan)
    upper = penalised_objective(tb, ch)
    t = time.perf_counter()
    lower, m, info = column_generation(tb, cls, rep, counts, [ch], time_limit_s=120.0)
    lp_s = time.perf_counter() - t
    t = time.perf_counter()
    listed = enumerate_options(tb, cls, rep, m, upper, max_options=args.max_options)
    if listed is None:
        raise SystemExit(
            f"more than --max-options {args.max_options:,} options lie within the gap (plan {upper:.2f}, LP bound "
            f"{lower:.2f}): too many for HiGHS here; try a shorter horizon (--days) or fewer jobs"
        )
    table, _, exact = listed
    list_s = time.perf_counter() - t
    keys, n_on = plan_columns(cls, ch)
    table = np.unique(np.concatenate((table, keys)), axis=0)
    n, n_cls = len(table), len(rep)
    model = master_model(tb, rep, counts, table)
    del model.variables.integers[:]
    model.variables.integers.extend([True] * (n + n_cls))
    hint_x = np.zeros(n + n_cls)
    hint_x[_lookup(table, keys)] = n_on
    hint_x[n:] = counts - np.bincount(table[:, 0], weights=hint_x[:n], minlength=n_cls)
    params = mathopt.SolveParameters(
        time_limit=timedelta(seconds=args.mip_s), presolve=mathopt.Emphasis.OFF
    ).to_proto()
    model_params = model_parameters_pb2.ModelSolveParametersProto()
    hint = model_params.solution_hints.add()
    hint.variable_values.ids.extend(range(n + n_cls))
    hint.variable_values.values.extend(hint_x.tolist())
    t = time.perf_counter()
    out = run_model(model, mathopt.SolverType.HIGHS, params, model_params)
    mip_s = time.perf_counter() - t
    dual = float(out.termination.objective_bounds.dual_bound)
    primal = float(out.termination.objective_bounds.primal_bound)
    # both bounds are valid: HiGHS's (capped at the plan, over a complete listing) and the LP's; a short run may
    # report no dual bound yet (infinite, or 0 before its root)
    bound = max(float(lower), min(dual, upper)) if exact and np.isfinite(dual) else float(lower)
    result = {
        "seed": args.seed,
        "days": args.days,
        "jobs_in_tables": int(tb.J),
        "plan_penalised": round(upper, 4),
        "planner_bound": plan.penalised_bound,
        "lp_bound": round(float(lower), 4),
        "lp_converged": bool(info["converged"]),
        "options": int(n),
        "exact": bool(exact),
        "probe_bound": round(bound, 4),
        "mip_best_plan": round(primal, 4),
        "gap_to_lp_pct": round(100 * (upper - lower) / lower, 3),
        "gap_to_probe_bound_pct": round(100 * (upper - bound) / bound, 3),
        "lp_s": round(lp_s, 2),
        "list_s": round(list_s, 2),
        "mip_s": round(mip_s, 1),
        "mip_status": int(out.termination.reason),
    }
    print(f"seed {args.seed}, {args.days} day(s): plan {upper:.2f}, LP bound {lower:.2f}, probe bound {bound:.2f} "
          f"({n} options, exact={exact}), MIP best {primal:.2f} in {mip_s:.0f} s")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
