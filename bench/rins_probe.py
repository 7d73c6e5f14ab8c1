"""How good a plan does the MIP over the LP's columns find at 15 minutes, against the dives? (issue 27)

Runs the planner's first phases (tables, greedy, column generation for the same share) once, then from that state,
each for the same wall time: (1) the dives (``dive_portfolio``, both lanes), (2) ``submip.rins`` from the LP
rounding, in this process, (3) both side by side (dive on one worker, MIP on the other).

    python bench/rins_probe.py --jobs 1000 --seed 3 --slot-minutes 15 --budget 5 --json
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time

from bench.plan_bench import make_objective
from bench.plan_workload import add_workload_args, workload_problem
from optimizer import phases_bound
import numpy as np

from optimizer.bound import Choice
from optimizer.dive import _complete, dive_portfolio, lp_dive
from optimizer.rounding import round_lp
from optimizer.lp import RestrictedMaster
from optimizer.parallel import fork_call
from optimizer.heuristic import penalised_objective
from optimizer.problem import SolveParams
from optimizer.solve import start_run
from optimizer.submip import rins
from optimizer.tables import build_tables


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_workload_args(ap, jobs=1000, slot_minutes=True)
    ap.add_argument("--time-limit", type=float, default=10.0, help="planner limit the LP's share is taken of [s]")
    ap.add_argument("--budget", type=float, default=5.0, help="wall time for each of dives / MIP [s]")
    ap.add_argument("--modes", default="dive,rins", help="comma list of dive, rins, rins_dive")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    problem = workload_problem(args, make_objective("cost", 0.0, None), slot_minutes=args.slot_minutes)
    params = SolveParams(time_limit_s=args.time_limit, random_seed=args.seed)
    t0 = time.perf_counter()
    tb = build_tables(problem)
    run = start_run(tb, params, t0, time.perf_counter(), {})
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
        "rounding": penalised_objective(tb, rounding),
        "bound": run.lower,
    }
    prim = run.info["primal"]
    gpu = np.zeros(tb.cap.shape)
    kw = np.zeros(tb.kw_cap.shape)
    for row_ in prim:
        c, r, h, s1, l1, s2, l2 = (int(v) for v in row_[:7])
        x = row_[7]
        j = int(run.rep[c])
        for s_, l_ in ((s1, l1), (s2, l2)):
            gpu[r, h, s_ : s_ + l_] += x * tb.g[j]
            kw[r, s_ : s_ + l_] += x * tb.g[j] * tb.pkw[j, h] * tb.pue[r]
    out["over_gpu_slots"] = int((gpu > tb.cap + 1e-6).sum())
    out["over_kw_slots"] = int((kw > tb.kw_cap / 1e6 * 1e3 + 1e-6).sum()) if False else int((kw > tb.kw_cap + 1e-6).sum())
    out["gpu_rows_block"] = len(master.gpu_rows)
    out["kw_rows_block"] = len(master.kw_rows)
    out["kw_scale"] = [float(kw.max()), float(tb.kw_cap.max())]
    args_mip = (tb, run.cls, run.rep, run.counts, run.info["columns_table"], run.info["primal"])
    def run_mode(mode: str) -> dict:
        out: dict = {}
        t = time.perf_counter()
        if mode == "dive":
            plans = dive_portfolio(tb, copy.copy(master), run.rep, run.counts, time_limit_s=args.budget, workers=2)
            out["dive"] = [round(penalised_objective(tb, p), 3) for p in plans]
        elif mode.startswith("slotdive") or mode.startswith("blockdive"):
            # one dive (first lane) untimed-ish, on the block LP or on the LP over the same columns per slot
            budget = float(mode.split(":")[1]) if ":" in mode else args.budget
            share, every = (float(x) for x in (mode.split(":")[2:4] if mode.count(":") >= 3 else (0.025, 1)))
            if mode.startswith("slotdive"):
                tb2 = copy.copy(tb)
                tb2.blocks = None
                m2 = RestrictedMaster(tb2, run.cls, run.rep, run.counts)
                keys = np.array([k for k, _ in master.column_vars], dtype=np.int64)
                m2.add_options(Choice(*(keys[:, i] for i in range(1, 7))), np.arange(len(keys)), run.rep[keys[:, 0]])
                ok = m2.solve(30.0)
                out[mode + "_resolve_s"] = round(time.perf_counter() - t, 2)
                out[mode + "_lp"] = m2.value()
                dm = m2
            else:
                dm = copy.copy(master)
                tb2 = tb
            ref = mode.startswith("blockdiveref")
            if ref:
                rows = []
                for _ in range(8):
                    n_new = dm.refine()
                    rows.append(n_new)
                    if not n_new or not dm.solve(30.0, bounds_changed=True):
                        break
                out[mode + "_refine"] = rows
                out[mode + "_refine_s"] = round(time.perf_counter() - t, 2)
                out[mode + "_lp"] = dm.value()
            if mode.startswith("blockdiveref0round"):
                m_ref, _ = dm.duals()
                t_r = time.perf_counter()
                out[mode + "_round"] = round(penalised_objective(tb, round_lp(tb, run.cls, dm.primal(), m_ref)), 3)
                out[mode + "_round_s"] = round(time.perf_counter() - t_r, 2)
                out[mode + "_complete"] = round(penalised_objective(tb, _complete(tb, dm, run.rep, {})), 3)
                return out
            got = lp_dive(tb2, dm, run.rep, run.counts, time_limit_s=budget - (time.perf_counter() - t),
                          batch=max(1, int(share * tb.J)), price_every=int(every),
                          refine=ref and not mode.startswith("blockdiveref0"))
            out[mode] = round(penalised_objective(tb, got), 3)
        elif mode.startswith("rins"):
            budget = float(mode[4:] or args.budget)
            got = rins(*args_mip, rounding, time_limit_s=budget, seed=args.seed)
            out[mode] = None if got is None else round(penalised_objective(tb, got), 3)
        out[f"{mode}_s"] = round(time.perf_counter() - t, 2)
        return out

    for mode in args.modes.split(","):
        child = fork_call(lambda mode=mode: run_mode(mode))
        got_mode = child.result(timeout_s=600) if child is not None else None
        out.update(got_mode or {mode: "failed"})
        print(mode, got_mode, flush=True)
    if args.json:
        print(json.dumps(out))
    else:
        print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
