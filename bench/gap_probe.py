"""Where does a plan lose against the LP bound? (issue 27: the 15-minute gap is the plan)

Plans the bench workload with the planner, converges the column-generation LP (capacity blocks, as the planner does)
and splits the plan's distance to the Lagrangian value at the LP's duals ``L(y)`` into its exact parts:

    plan - L(y) = sum over planned jobs of (priced value of its option - its best priced value)   [reduced cost]
                + sum over (region, hardware, slot) of lam * GPUs left idle                      [idle GPUs]
                + sum over (region, slot) of mu * kW left idle                                    [idle power]

per region (a job's reduced cost counts in the region it runs in), with the jobs that lose most. A region with
neither priced capacity nor reduced cost plans as the LP does; the loss sits where capacity is priced.

    python bench/gap_probe.py --jobs 1000 --seed 0 --slot-minutes 15 --time-limit 10 --lp-budget 60 --json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.plan_bench import make_objective
from bench.plan_workload import add_workload_args, workload_problem
from optimizer.assemble import choice_of
from optimizer.bound import Choice, Multipliers, cumulative, evaluate, usage
from optimizer.cpsat import build_classes
from optimizer.heuristic import penalised_objective
from optimizer.lp import column_generation
from optimizer.problem import SolveParams
from optimizer.solve import solve_gridshift
from optimizer.tables import Tables, build_tables


def priced_values(tb: Tables, ch: Choice, m: Multipliers) -> np.ndarray:
    """Objective plus capacity prices of each planned option of ``ch``; NaN where a job is left out."""
    cum_a = cumulative(tb.slot_h * tb.weights(m.nu) + m.mu)  # per kW
    cum_l = cumulative(m.lam)  # per GPU
    out = np.full(tb.J, np.nan)
    on = np.flatnonzero(ch.r >= 0)
    r, h = ch.r[on], ch.h[on]
    kw = tb.g[on] * tb.pkw[on, h] * tb.pue[r]
    total = np.zeros(len(on))
    for s, ln in ((ch.s1[on], ch.l1[on]), (ch.s2[on], ch.l2[on])):
        e = s + ln
        part = kw * (cum_a[r, e] - cum_a[r, s]) + tb.g[on] * (cum_l[r, h, e] - cum_l[r, h, s])
        total += np.where(ln > 0, part, 0.0)
    out[on] = total
    return out


def decompose(tb: Tables, ch: Choice, m: Multipliers, top: int = 10) -> dict:
    """The parts of ``penalised plan - L(m)`` per region and the ``top`` jobs of highest reduced cost."""
    value, best_ch, best = evaluate(tb, m)
    rc = priced_values(tb, ch, m) - best
    gpu, kw = usage(tb, ch)
    idle_g = m.lam * (tb.cap - gpu)
    idle_kw = m.mu * (tb.kw_cap - kw)
    names = [r.name for r in tb.problem.regions]
    regions = {}
    for r, name in enumerate(names):
        on = ch.r == r
        regions[name] = {
            "jobs": int(on.sum()),
            "reduced_cost": round(float(np.nansum(rc[on])), 4),
            "idle_gpus": round(float(idle_g[r].sum()), 4),
            "idle_power": round(float(idle_kw[r].sum()), 4),
            "priced_gpu_slots": int((m.lam[r] > 1e-9).sum()),
            "priced_power_slots": int((m.mu[r] > 1e-9).sum()),
        }
    left_out = float((tb.penalty - best)[ch.r < 0].sum())
    worst = np.argsort(-np.nan_to_num(rc, nan=-1.0))[:top]
    jobs = [
        {
            "row": int(j),
            "reduced_cost": round(float(rc[j]), 4),
            "gpus": int(tb.g[j]),
            "slots": int(ch.l1[j] + ch.l2[j]),
            "window": [int(tb.rel[j]), int(tb.dl[j])],
            "at": [names[int(ch.r[j])], int(ch.h[j]), int(ch.s1[j])],
            "best_at": [names[int(best_ch.r[j])], int(best_ch.h[j]), int(best_ch.s1[j])],
        }
        for j in worst
        if ch.r[j] >= 0
    ]
    return {
        "lagrangian": float(value),
        "reduced_cost": float(np.nansum(rc)),
        "idle_gpus": float(idle_g.sum()),
        "idle_power": float(idle_kw.sum()),
        "left_out": left_out,
        "jobs_rc_above_0.1": int((rc > 0.1).sum()),
        "jobs_rc_above_0.01": int((rc > 0.01).sum()),
        "regions": regions,
        "worst_jobs": jobs,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_workload_args(ap, jobs=1000, slot_minutes=True)
    ap.add_argument("--time-limit", type=float, default=10.0, help="planner time limit [s]")
    ap.add_argument("--lp-budget", type=float, default=60.0, help="wall time for the LP to converge [s]")
    ap.add_argument("--top", type=int, default=10, help="jobs of highest reduced cost listed")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    problem = workload_problem(args, make_objective("cost", 0.0, None), slot_minutes=args.slot_minutes)
    t0 = time.perf_counter()
    plan = solve_gridshift(problem, SolveParams(time_limit_s=args.time_limit, random_seed=args.seed))
    solve_s = time.perf_counter() - t0
    tb = build_tables(problem)
    ch = choice_of(tb, plan)
    cls, rep, counts = build_classes(tb)
    t1 = time.perf_counter()
    bound, m, info = column_generation(tb, cls, rep, counts, [ch], time_limit_s=args.lp_budget)
    out = decompose(tb, ch, m, args.top)
    out.update(
        jobs=args.jobs,
        seed=args.seed,
        slot_minutes=args.slot_minutes,
        plan=penalised_objective(tb, ch),
        planner_bound=plan.best_bound,
        solve_s=round(solve_s, 2),
        lp_bound=bound,
        lp_value=info["lp_value"],
        lp_rounds=info["rounds"],
        lp_converged=bool(info["converged"]),
        lp_s=round(time.perf_counter() - t1, 2),
    )
    print(
        f"plan {out['plan']:.3f}  L(duals) {out['lagrangian']:.3f}  LP {out['lp_value']:.3f} "
        f"({out['lp_rounds']} rounds, converged {out['lp_converged']})"
    )
    print(
        f"plan - L = reduced cost {out['reduced_cost']:.3f} + idle GPUs {out['idle_gpus']:.3f} "
        f"+ idle power {out['idle_power']:.3f} + left out {out['left_out']:.3f}"
    )
    print(f"{'region':<8} {'jobs':>5} {'red. cost':>10} {'idle GPUs':>10} {'idle kW':>8} {'priced GPU/kW slots':>20}")
    for name, r in out["regions"].items():
        print(
            f"{name:<8} {r['jobs']:>5} {r['reduced_cost']:>10.3f} {r['idle_gpus']:>10.3f} {r['idle_power']:>8.3f} "
            f"{r['priced_gpu_slots']:>11} / {r['priced_power_slots']}"
        )
    for j in out["worst_jobs"]:
        print(f"  row {j['row']}: {j['reduced_cost']:.3f}, {j['gpus']} GPUs x {j['slots']} slots, window "
              f"{j['window']}, at {j['at']}, best priced {j['best_at']}")
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
