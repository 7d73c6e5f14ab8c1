"""How much of the planner's gap is packing inside one (region, hardware)? A probe of the LP bound.

At the converged LP's prices (GPU prices ``lam``, power prices ``mu``, and each job's best priced value ``pi``),
relax the rows that tie (region, hardware) pairs together: "each job runs once" (priced by ``pi``) and the power
budgets (priced by ``mu``). What is left is one subproblem per pair: choose whole jobs and starts, at most a class's
count, within the pair's GPUs per slot, for the largest profit ``pi - cost - mu * power``. With the LP relaxation
of every subproblem this Lagrangian bound is the LP bound; with integer subproblems it is at least that:

    bound = L(lam, mu) + sum over pairs of (lam . GPU capacity  -  integer optimum of the pair)

Each pair's integer optimum is bounded from above by HiGHS's dual bound within ``--time-limit`` (or by its LP
value ``lam . capacity`` where HiGHS proves nothing), so the result is a valid lower bound of the planner's option
model. Where it rises little above the LP bound, the plan's gap is not holes in one pair's packing but the coupling
between pairs (a job that can go to several, the region's power), which this relaxation drops.

    python bench/plan_bound_probe.py --data ../shared/data/harmonized --jobs 1000 --seed 0 --json

Not part of the planner: a 10 s solve has no time for these MIPs (FI's H200 subproblem alone has ~33,000 columns).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import numpy as np
from ortools.math_opt.python import mathopt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.plan_bench import make_objective
from bench.plan_workload import (
    CATALOG,
    DEFAULT_DATA,
    build_problem,
    generate,
    hardware_from_dicts,
    read_curves,
    start_of,
    window,
)
from optimizer.bound import Multipliers, cumulative, evaluate, segment_values
from optimizer.candidates import Candidates, place_fast
from optimizer.cpsat import build_classes
from optimizer.heuristic import greedy_order
from optimizer.lp import column_generation
from optimizer.tables import Segments, Tables, build_tables


def pair_columns(tb: Tables, r: int, h: int, cum_a: np.ndarray, pi: np.ndarray, is_rep: np.ndarray) -> list[tuple]:
    """Options of (r, h) with positive profit ``pi - cost - mu * power``: ``(row, slots, profit)`` per option."""
    flat = np.zeros((tb.R, tb.H, tb.T + 1))  # GPUs unpriced: they are the subproblem's own rows
    out: list[tuple] = []
    for seg in tb.contig:
        if (seg.r, seg.h) != (r, h):
            continue
        si, start, _, value = segment_values(tb, seg, cum_a, flat)
        rows = seg.job[si]
        profit = pi[rows] - value
        for k in np.flatnonzero(is_rep[rows] & np.isfinite(value) & (profit > 1e-9)):
            s, n = int(start[k]), int(seg.length[si[k]])
            out.append((int(rows[k]), range(s, s + n), float(profit[k])))
    for a, b in tb.halves:
        if (a.r, a.h) != (r, h):
            continue
        out.extend(_two_chunk_columns(tb, a, b, cum_a, flat, pi, is_rep))
    return out


def _two_chunk_columns(tb: Tables, a: Segments, b: Segments, cum_a, flat, pi, is_rep) -> list[tuple]:
    _, ast, aoff, av = segment_values(tb, a, cum_a, flat)
    _, bst, boff, bv = segment_values(tb, b, cum_a, flat)
    out = []
    for q, row in enumerate(a.job.tolist()):
        if not is_rep[row]:
            continue
        va, vb = av[aoff[q] : aoff[q + 1]], bv[boff[q] : boff[q + 1]]
        sa, sb = ast[aoff[q] : aoff[q + 1]], bst[boff[q] : boff[q + 1]]
        # the k-th start of the second chunk may follow the first k + 1 starts of the first (bound.two_chunk_argmin)
        profit = pi[row] - va[:, None] - vb[None, :]
        i, k = np.nonzero(np.triu(np.isfinite(profit) & (profit > 1e-9)))
        la, lb = int(a.length[q]), int(b.length[q])
        for ii, kk in zip(i.tolist(), k.tolist(), strict=True):
            slots = [*range(int(sa[ii]), int(sa[ii]) + la), *range(int(sb[kk]), int(sb[kk]) + lb)]
            out.append((row, slots, float(profit[ii, kk])))
    return out


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """HiGHS's MIP writes progress lines to the process's stdout whatever its options: keep them out of the table."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)
        try:
            yield
        finally:
            os.dup2(saved, 1)
            os.close(saved)


def pair_bound(tb: Tables, r: int, h: int, cols: list[tuple], cls, counts, time_limit_s: float) -> dict:
    """Upper bound on the pair's integer profit: HiGHS's dual bound, capped by the LP value ``lam . capacity``."""
    model = mathopt.Model(name=f"pair[r={r},h={h}]")
    use: dict[int, list] = {}
    per_class: dict[int, list] = {}
    terms = []
    for n, (row, slots, profit) in enumerate(cols):
        c = int(cls[row])
        x = model.add_integer_variable(lb=0, ub=int(counts[c]), name=f"x[{n}]")
        terms.append(profit * x)
        per_class.setdefault(c, []).append(x)
        for t in slots:
            use.setdefault(t, []).append(int(tb.g[row]) * x)
    for t, row_terms in use.items():  # the pair's GPUs per slot
        model.add_linear_constraint(mathopt.fast_sum(row_terms) <= int(tb.cap[r, h, t]), name=f"gpu[t={t}]")
    for c, xs in per_class.items():  # at most the class's jobs on this pair
        model.add_linear_constraint(mathopt.fast_sum(xs) <= int(counts[c]), name=f"class[c={c}]")
    model.maximize(mathopt.fast_sum(terms))
    t0 = time.perf_counter()
    with _quiet_stdout():
        result = mathopt.solve(model, mathopt.SolverType.HIGHS,
                               params=mathopt.SolveParameters(time_limit=timedelta(seconds=time_limit_s),
                                                              relative_gap_tolerance=1e-6))
    bounds = result.termination.objective_bounds
    return {"upper": float(bounds.dual_bound), "best": float(bounds.primal_bound),
            "status": result.termination.reason.name.lower(), "solve_s": round(time.perf_counter() - t0, 2)}


def probe(args) -> dict:
    hardware = hardware_from_dicts(CATALOG)
    curves = read_curves(Path(args.data), args.regions, year=int(args.start[:4]))
    start = start_of(args.start)
    price, carbon = window(curves, start, args.days * 24, "realised")
    problem = build_problem(generate(args.jobs, args.regions, args.seed), hardware, price, carbon, start,
                            make_objective("cost", 0.0))
    tb = build_tables(problem)
    cls, rep, counts = build_classes(tb)
    found: list = []
    _, ch0, _ = evaluate(tb, Multipliers.zeros(tb), collect=found)
    greedy = place_fast(tb, greedy_order(tb), Candidates(tb, found))
    t0 = time.perf_counter()
    lower, m, info = column_generation(tb, cls, rep, counts, [greedy, ch0], time_limit_s=120.0)
    lp_s = time.perf_counter() - t0
    lagrangian, _, pi = evaluate(tb, m)  # pi: each job's best priced value (its penalty at most)
    cum_a = cumulative(tb.slot_h * tb.weights(0.0) + m.mu)
    is_rep = np.zeros(tb.J, dtype=bool)
    is_rep[rep] = True
    pairs = []
    for r in range(tb.R):
        for h in range(tb.H):
            lp_value = float((m.lam[r, h] * tb.cap[r, h]).sum())
            if lp_value <= 1e-9:
                continue  # an unpriced pair: profits are <= 0 there, integer and LP optimum are both 0
            cols = pair_columns(tb, r, h, cum_a, pi, is_rep)
            got = pair_bound(tb, r, h, cols, cls, counts, args.time_limit)
            upper = min(lp_value, got["upper"])
            pairs.append({"region": problem.regions[r].name, "hardware": problem.hardware[h].name,
                          "columns": len(cols), "lp_value": lp_value, "integer_upper": upper,
                          "integer_best": got["best"], "gain": lp_value - upper, "status": got["status"],
                          "solve_s": got["solve_s"]})
    gain = sum(p["gain"] for p in pairs)
    return {"jobs": args.jobs, "seed": args.seed, "regions": args.regions, "start": args.start, "days": args.days,
            "time_limit_s": args.time_limit, "lp_converged": bool(info["converged"]), "lp_s": round(lp_s, 2),
            "lp_bound": lower, "lagrangian_at_lp_prices": lagrangian, "pairs": pairs, "gain": gain,
            "pair_bound": lagrangian + gain}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="harmonized data folder")
    ap.add_argument("--regions", default="DE,FR,ES,FI,PL")
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--start", default="2022-03-01")
    ap.add_argument("--days", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-limit", type=float, default=20.0, help="HiGHS time per (region, hardware) [s]")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    args.regions = [r.strip() for r in args.regions.split(",") if r.strip()]
    if not Path(args.data).exists():
        ap.error(f"data folder {args.data} not found (set --data or GRIDSHIFT_SHARED_DATA)")
    out = probe(args)
    print(f"{args.jobs} jobs, seed {args.seed}: LP bound {out['lp_bound']:.4f} (converged {out['lp_converged']}, "
          f"{out['lp_s']:.1f} s); Lagrangian at the LP's prices {out['lagrangian_at_lp_prices']:.4f}")
    print(f"{'region':<7} {'hardware':<11} {'columns':>8} {'LP value':>10} {'integer <=':>11} {'found':>10} "
          f"{'gain':>8} {'status':<10} {'s':>6}")
    for p in out["pairs"]:
        print(f"{p['region']:<7} {p['hardware']:<11} {p['columns']:>8d} {p['lp_value']:>10.3f} "
              f"{p['integer_upper']:>11.3f} {p['integer_best']:>10.3f} {p['gain']:>8.3f} {p['status']:<10} "
              f"{p['solve_s']:>6.1f}")
    print(f"bound with integer pairs {out['pair_bound']:.4f} (+{out['gain']:.4f} over the LP bound)")
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
