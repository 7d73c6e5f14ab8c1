"""Chunk probe: single interruptible jobs on real price curves, the planner's plan and bound against the exact optimum.

For each zone, start and duration, one 8-GPU H100 job (0.7 kW a GPU) may run anywhere in a 96-hour window, in one
run or in up to ``--max-chunks`` chunks of at least ``--min-chunk`` hours, each resume costing ``--overhead`` hours
more. The exact optimum over every chunking comes from a dynamic program over the hours
(``optimizer.bound.best_chunking``) and the cheapest single run; the planner (``gridshift``) must report a bound no
higher than it in every case and, with the default of two chunks, a plan within 0.5 % of it.

Example::

    python bench/chunk_probe.py --zones DE,FR,FI,BE,CH,ES,PL --json

Prints one row per case and a summary; ``--json`` adds one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.plan_workload import DEFAULT_DATA, read_curves, start_of, window
from optimizer import (
    HardwareType,
    Job,
    Objective,
    ObjectiveKind,
    Problem,
    Region,
    SolveParams,
    check_plan,
    solve,
)
from optimizer.bound import best_chunking

H100 = HardwareType("H100", memory_gb=80, power_kw_per_gpu=0.7, relative_throughput=1.0)
GPUS = 8
# winter, spring, summer, autumn, and spring 2023 with negative prices (DE, the Whitsun weekend)
STARTS = "2021-11-08,2022-03-01,2022-07-11,2023-01-09,2023-05-26"


def exact_cost(prices: np.ndarray, dur: int, overhead: int, min_chunk: int, max_chunks: int) -> float:
    """Cheapest cost [EUR] of the job over every plan ``check_plan`` accepts: one run, or up to ``max_chunks``
    chunks (DP)."""
    kw = GPUS * H100.power_kw_per_gpu
    value = np.where(np.isfinite(prices), prices * kw / 1000.0, np.inf)  # EUR per hour run
    single = min((float(value[s : s + dur].sum()) for s in range(len(value) - dur + 1)), default=math.inf)
    chunked = float(best_chunking(value[None, :], dur, overhead, min_chunk, max_chunks)[0])
    return min(single, chunked)


def probe(zone: str, start: str, prices: np.ndarray, dur: int, args) -> dict:
    region = Region(
        name=zone,
        price_per_mwh=tuple(float(p) for p in prices),
        carbon_g_per_kwh=tuple(300.0 for _ in prices),
        power_budget_kw=tuple(1000.0 for _ in prices),
        inventory={"H100": GPUS},
        pue=1.0,
    )
    job = Job(
        "probe",
        GPUS,
        {"H100": dur},
        0,
        len(prices),
        interruptible=True,
        min_chunk_slots=args.min_chunk,
        checkpoint_overhead_slots=args.overhead,
        max_chunks=args.max_chunks,
    )
    pb = Problem(
        start_of(start), 60, len(prices), (region,), (H100,), (job,), objective=Objective(ObjectiveKind.COST)
    )
    plan = solve(pb, SolveParams(time_limit_s=args.time_limit))
    exact = exact_cost(prices, dur, args.overhead, args.min_chunk, args.max_chunks)
    bound = plan.best_bound
    tol = 1e-9 * max(1.0, abs(exact))
    a = plan.assignment_of("probe")
    return {
        "zone": zone,
        "start": start,
        "duration_h": dur,
        "exact": exact,
        "plan": plan.objective if a is not None else None,
        "bound": bound,
        "status": str(plan.status),
        "chunks": [[c.start_slot, c.end_slot] for c in a.chunks] if a is not None else None,
        "checked": check_plan(pb, plan).ok,
        "bound_ok": bound is None or bound <= exact + tol,  # None: no bound claimed (no time left for it)
        "plan_gap_pct": 100.0 * (plan.objective - exact) / abs(exact) if a is not None and exact else None,
        "negative_prices": bool((prices < 0).any()),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="harmonized data folder")
    ap.add_argument("--zones", default="DE,FR,FI,BE,CH,ES,PL")
    ap.add_argument("--starts", default=STARTS, help="comma-separated YYYY-MM-DD")
    ap.add_argument("--durations", default="6,12,24", help="hours, comma-separated")
    ap.add_argument("--hours", type=int, default=96, help="window [h]")
    ap.add_argument("--min-chunk", type=int, default=2)
    ap.add_argument("--overhead", type=int, default=1)
    ap.add_argument("--max-chunks", type=int, default=2)
    ap.add_argument("--time-limit", type=float, default=1.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if not Path(args.data).exists():
        ap.error(f"data folder {args.data} not found (set --data or GRIDSHIFT_SHARED_DATA)")
    zones = [z.strip() for z in args.zones.split(",") if z.strip()]
    rows = []
    print(f"Chunk probe: {GPUS}-GPU job, min chunk {args.min_chunk} h, overhead {args.overhead} h, "
          f"max {args.max_chunks} chunks, {args.hours}-h window, {args.time_limit:g} s")
    print(f"{'zone':<5} {'start':<11} {'h':>3} {'exact EUR':>10} {'plan EUR':>10} {'bound EUR':>10} {'plan %':>8} "
          f"{'bound<=exact':>12} {'status':>9} chunks")
    for start in [s.strip() for s in args.starts.split(",") if s.strip()]:
        curves = read_curves(Path(args.data), zones, year=int(start[:4]))
        price, _ = window(curves, start_of(start), args.hours, "realised")
        for zone in zones:
            prices = price[zone].to_numpy(dtype=float)
            if not np.isfinite(prices).any():
                continue
            for dur in (int(d) for d in args.durations.split(",")):
                row = probe(zone, start, prices, dur, args)
                rows.append(row)
                gap = "n/a" if row["plan_gap_pct"] is None else f"{row['plan_gap_pct']:.4f}"
                print(f"{zone:<5} {start:<11} {dur:>3} {row['exact']:>10.3f} {row['plan'] or math.nan:>10.3f} "
                      f"{row['bound'] if row['bound'] is not None else math.nan:>10.3f} {gap:>8} "
                      f"{row['bound_ok']!s:>12} {row['status']:>9} {row['chunks']}")
    gaps = [r["plan_gap_pct"] for r in rows if r["plan_gap_pct"] is not None]
    summary = {
        "cases": len(rows),
        "bound_above_exact": sum(not r["bound_ok"] for r in rows),
        "no_bound": sum(r["bound"] is None for r in rows),
        "unchecked": sum(not r["checked"] for r in rows),
        "plan_gap_pct_max": max(gaps) if gaps else None,
        "plans_within_0_5_pct": sum(g <= 0.5 for g in gaps),
        "max_chunks": args.max_chunks,
    }
    print(f"cases={summary['cases']} bound_above_exact={summary['bound_above_exact']} no_bound={summary['no_bound']} "
          f"plan_gap_pct_max={summary['plan_gap_pct_max']} within_0.5%={summary['plans_within_0_5_pct']}")
    if args.json:
        print(json.dumps({"summary": summary, "cases": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
