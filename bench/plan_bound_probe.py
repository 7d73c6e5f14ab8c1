"""How much of the planner's gap is packing inside one (region, hardware)? A probe of the LP bound.

At the converged LP's prices (GPU prices ``lam``, power prices ``mu``, and each job's best priced value ``pi``),
relax the rows that tie (region, hardware) pairs together: "each job runs once" (priced by ``pi``) and the power
budgets (priced by ``mu``). What is left is one subproblem per pair: choose whole jobs and starts, at most a class's
count, within the pair's GPUs per slot, for the largest profit ``pi - cost - mu * power``. With the LP relaxation
of every subproblem this Lagrangian bound is the LP bound; with integer subproblems it is at least that:

    bound = L(lam, mu) + sum over pairs of (lam . GPU capacity  -  integer optimum of the pair)

Each pair's integer optimum is bounded from above by HiGHS's dual bound within ``--time-limit`` (or by its LP
value ``lam . capacity`` where HiGHS proves nothing), so the result is a valid lower bound of the planner's option
model. From below it is bounded by the best packing found (HiGHS's, or the pair's LP rounded down and filled, then
CP-SAT from there for ``--packing-time``): the LP value minus that packing is the most that packing inside the pair
can cost against the LP. Where it rises little above the LP bound, the plan's gap is not holes in one pair's packing but the coupling
between pairs (a job that can go to several, the region's power), which this relaxation drops. ``--by region``
keeps one block per region instead, with all its hardware types and its power budget per slot as rows (only "each
job runs once" across regions is priced out).

    python bench/plan_bound_probe.py --data ../shared/data/harmonized --jobs 1000 --seed 0 --json

Not part of the planner: a 10 s solve has no time for these MIPs (FI's H200 subproblem alone has ~33,000 columns).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import numpy as np
from ortools.math_opt.python import mathopt
from ortools.sat.python import cp_model

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
from optimizer.tables import Tables, build_tables
from optimizer.windows import Segments


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


@dataclass
class Block:
    """One subproblem: region ``r``'s options with positive profit, its GPU rows and (``power``) its power rows."""

    tb: Tables
    r: int
    power: bool
    cols: list[tuple[int, int, list[int], float]]  # (class, hardware, slots, profit)
    counts: np.ndarray
    rep: np.ndarray

    def _rows(self, x: list, *, whole: bool = False) -> list[tuple[list, float]]:
        """``(terms, right-hand side)`` of every GPU, power and class row over the variables ``x``; ``whole``:
        power in watts rounded up against budgets rounded down, for CP-SAT's integer rows (stricter, so feasible)."""
        tb, r = self.tb, self.r
        gpu: dict[tuple[int, int], list] = {}
        kw: dict[int, list] = {}
        per_class: dict[int, list] = {}
        for (c, h, slots, _), v in zip(self.cols, x, strict=True):
            row = int(self.rep[c])
            per_class.setdefault(c, []).append(v)
            power = tb.power_kw(row, r, h)
            for t in slots:
                gpu.setdefault((h, t), []).append(int(tb.g[row]) * v)
                if self.power:
                    kw.setdefault(t, []).append((math.ceil(power * 1e3) if whole else power) * v)
        budget = np.floor(tb.kw_cap[r] * 1e3) if whole else tb.kw_cap[r]
        return ([(terms, int(tb.cap[r, h, t])) for (h, t), terms in gpu.items()]
                + [(terms, float(budget[t])) for t, terms in kw.items()]
                + [(terms, int(self.counts[c])) for c, terms in per_class.items()])

    def model(self, *, integer: bool) -> tuple[mathopt.Model, list]:
        m = mathopt.Model(name=f"block[r={self.r}]")
        x = [m.add_variable(lb=0, ub=float(self.counts[c]), is_integer=integer, name=f"x[{n}]")
             for n, (c, *_rest) in enumerate(self.cols)]
        for terms, rhs in self._rows(x):
            m.add_linear_constraint(mathopt.fast_sum(terms) <= rhs)
        m.maximize(mathopt.fast_sum(p * v for (*_rest, p), v in zip(self.cols, x, strict=True)))
        return m, x


def block_bound(block: Block, time_limit_s: float) -> dict:
    """HiGHS's dual bound on the block's integer profit (an upper bound), and its best packing."""
    model, _ = block.model(integer=True)
    t0 = time.perf_counter()
    with _quiet_stdout():
        result = mathopt.solve(model, mathopt.SolverType.HIGHS,
                               params=mathopt.SolveParameters(time_limit=timedelta(seconds=time_limit_s),
                                                              relative_gap_tolerance=1e-6))
    bounds = result.termination.objective_bounds
    return {"upper": float(bounds.dual_bound), "best": float(bounds.primal_bound),
            "status": result.termination.reason.name.lower(), "solve_s": round(time.perf_counter() - t0, 2)}


def block_packing(block: Block, time_limit_s: float, workers: int) -> float:
    """A good integer packing's profit: the block's LP rounded down and filled greedily, then CP-SAT from it."""
    lp, x = block.model(integer=False)
    values = mathopt.solve(lp, mathopt.SolverType.GLOP).variable_values()
    frac = np.array([values[v] for v in x])
    count = np.floor(frac + 1e-9).astype(int)
    tb, r = block.tb, block.r
    gpu_left = tb.cap[r].astype(float).copy()
    kw_left = tb.kw_cap[r].astype(float).copy() if block.power else np.full(tb.T, np.inf)
    class_left = block.counts.astype(int).copy()

    def take(k: int, n: int) -> None:
        c, h, slots, _ = block.cols[k]
        gpu_left[h, slots] -= n * tb.g[block.rep[c]]
        kw_left[slots] -= n * tb.power_kw(int(block.rep[c]), r, h)
        class_left[c] -= n

    for col in np.flatnonzero(count):
        take(int(col), int(count[col]))
    # the LP's fractional columns first, then the rest by profit
    for k in sorted(range(len(block.cols)), key=lambda k: (count[k] >= frac[k] - 1e-9, -block.cols[k][3])):
        c, h, slots, _ = block.cols[k]
        g, kw = tb.g[block.rep[c]], tb.power_kw(int(block.rep[c]), r, h)
        while class_left[c] > 0 and gpu_left[h, slots].min() >= g and kw_left[slots].min() >= kw - 1e-9:
            take(int(k), 1)
            count[k] += 1
    rounded = float(sum(n * col[3] for n, col in zip(count, block.cols, strict=True)))
    # CP-SAT from the rounding: integer profit [1e-5 units], power [W] rounded so that its packings stay feasible
    sat = cp_model.CpModel()
    y = [sat.new_int_var(0, int(block.counts[c]), f"y[{n}]") for n, (c, *_rest) in enumerate(block.cols)]
    for v, n in zip(y, count.tolist(), strict=True):
        sat.add_hint(v, n)
    for terms, rhs in block._rows(y, whole=True):
        sat.add(sum(terms) <= int(rhs))
    sat.maximize(sum(round(p * 1e5) * v for (*_rest, p), v in zip(block.cols, y, strict=True)))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = workers
    if solver.solve(sat) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return rounded
    return max(rounded, float(sum(solver.value(v) * col[3] for v, col in zip(y, block.cols, strict=True))))


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
    # by pair the power budgets are priced out (mu in the cost); by region they are rows of the block
    cum_a = cumulative(tb.slot_h * tb.weights(0.0) + (m.mu if args.by == "pair" else 0.0))
    is_rep = np.zeros(tb.J, dtype=bool)
    is_rep[rep] = True
    blocks = [(r, [h]) for r in range(tb.R) for h in range(tb.H)] if args.by == "pair" else \
        [(r, list(range(tb.H))) for r in range(tb.R)]
    found_blocks = []
    for r, hs in blocks:
        lp_value = float(sum((m.lam[r, h] * tb.cap[r, h]).sum() for h in hs))
        if args.by == "region":
            lp_value += float((m.mu[r] * tb.kw_cap[r]).sum())
        if lp_value <= 1e-9:
            continue  # an unpriced block: profits are <= 0 there, integer and LP optimum are both 0
        cols = [(int(cls[row]), h, list(slots), profit) for h in hs
                for row, slots, profit in pair_columns(tb, r, h, cum_a, pi, is_rep)]
        block = Block(tb, r, args.by == "region", cols, counts, rep)
        got = block_bound(block, args.time_limit)
        upper = min(lp_value, got["upper"])
        best = got["best"]
        if got["status"] != "optimal" and args.packing_time > 0:
            best = max(best, block_packing(block, args.packing_time, args.workers))
        found_blocks.append({
            "region": problem.regions[r].name, "hardware": problem.hardware[hs[0]].name if len(hs) == 1 else "all",
            "columns": len(cols), "lp_value": lp_value, "integer_upper": upper, "integer_best": best,
            "gain": lp_value - upper, "loss_at_most": lp_value - best, "status": got["status"],
            "solve_s": got["solve_s"]})
    gain = sum(b["gain"] for b in found_blocks)
    return {"jobs": args.jobs, "seed": args.seed, "regions": args.regions, "start": args.start, "days": args.days,
            "by": args.by, "time_limit_s": args.time_limit, "packing_time_s": args.packing_time,
            "lp_converged": bool(info["converged"]), "lp_s": round(lp_s, 2), "lp_bound": lower,
            "lagrangian_at_lp_prices": lagrangian, "blocks": found_blocks, "gain": gain, "bound": lagrangian + gain,
            "packing_loss_at_most": sum(b["loss_at_most"] for b in found_blocks)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="harmonized data folder")
    ap.add_argument("--regions", default="DE,FR,ES,FI,PL")
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--start", default="2022-03-01")
    ap.add_argument("--days", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--by", choices=["pair", "region"], default="pair",
                    help="one integer block per (region, hardware), or per region with its power budget")
    ap.add_argument("--time-limit", type=float, default=20.0, help="HiGHS time per block [s] (its bound)")
    ap.add_argument("--packing-time", type=float, default=30.0,
                    help="CP-SAT time per block HiGHS did not close [s] (a good packing: how much packing can lose)")
    ap.add_argument("--workers", type=int, default=2, help="CP-SAT workers")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    args.regions = [r.strip() for r in args.regions.split(",") if r.strip()]
    if not Path(args.data).exists():
        ap.error(f"data folder {args.data} not found (set --data or GRIDSHIFT_SHARED_DATA)")
    out = probe(args)
    print(f"{args.jobs} jobs, seed {args.seed}: LP bound {out['lp_bound']:.4f} (converged {out['lp_converged']}, "
          f"{out['lp_s']:.1f} s); Lagrangian at the LP's prices {out['lagrangian_at_lp_prices']:.4f}")
    print(f"{'region':<7} {'hardware':<11} {'columns':>8} {'LP value':>10} {'integer <=':>11} {'packed':>10} "
          f"{'gain >=':>8} {'loss <=':>8} {'HiGHS':<10} {'s':>6}")
    for p in out["blocks"]:
        print(f"{p['region']:<7} {p['hardware']:<11} {p['columns']:>8d} {p['lp_value']:>10.3f} "
              f"{p['integer_upper']:>11.3f} {p['integer_best']:>10.3f} {p['gain']:>8.3f} {p['loss_at_most']:>8.3f} "
              f"{p['status']:<10} {p['solve_s']:>6.1f}")
    print(f"bound with integer {args.by}s {out['bound']:.4f} (+{out['gain']:.4f} over the LP bound); packing inside "
          f"the {args.by}s loses at most {out['packing_loss_at_most']:.4f} against the LP")
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
