"""What-if replay benchmark: the engine of ``gridshift simulate`` on plain data (no database), timed per day.

A synthetic fleet of ``--regions`` regions (8 H100 and 8 A100 each, 150 kW), ``--jobs`` jobs a day (1-8 GPUs,
2-24 reference GPU-hours, 12-48 h to their deadline) and hourly synthetic prices and carbon with a daily swing; the
period is replayed under the current settings and under a scenario with twice the GPUs. Prints one table; ``--json``
adds one JSON object as the last line.

    python bench/simulation_bench.py --days 7 --jobs 20
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.config import Settings
from app.enums import WorkloadClass
from app.services.fleet import FleetSnapshot, HardwareInfo, RegionInfo
from app.services.job_values import JobValues
from app.services.simulation import History, compare
from app.services.simulation.scenario import parse

START = datetime(2026, 3, 2, tzinfo=UTC)


def history(n_regions: int, days: int, jobs_per_day: int, horizon_h: int, seed: int) -> History:
    rng = random.Random(seed)
    hw = {"h100": HardwareInfo("h100", "nvidia", 80, 700, 90, {"default": 1.0}),
          "a100": HardwareInfo("a100", "nvidia", 80, 400, 60, {"default": 0.45})}
    zones = [f"Z{k}" for k in range(n_regions)]
    regions = {f"r{k}": RegionInfo(f"r{k}", zones[k], 1.1 + 0.05 * k, 150.0, frozenset(), {"h100": 8, "a100": 8})
               for k in range(n_regions)}
    n = (days + 1) * 24 + horizon_h
    price, carbon = {}, {}
    for k, z in enumerate(zones):
        phase = rng.uniform(0, 2 * math.pi)
        price[z] = [60 + 12 * k + 35 * math.sin(2 * math.pi * h / 24 + phase) + rng.gauss(0, 8) for h in range(n)]
        carbon[z] = [150 + 60 * k + 120 * math.cos(2 * math.pi * h / 24 + phase) + rng.gauss(0, 15) for h in range(n)]
    jobs = []
    for d in range(days):
        for i in range(jobs_per_day):
            release = START + timedelta(days=d, minutes=rng.randrange(0, 24 * 60, 15))
            gpus = rng.choice([1, 2, 4, 8])
            jobs.append((f"{d}-{i}", JobValues(
                name=None, workload_class=WorkloadClass.TRAINING, gpu_count=gpus,
                reference_gpu_hours=rng.uniform(2, 24), reference_hardware="h100", durations_minutes=None,
                memory_gb_per_gpu=0.0, allowed_regions=None, residency_tag=None, allowed_hardware=None,
                home_region=f"r{rng.randrange(n_regions)}", release_at=release,
                deadline_at=release + timedelta(hours=rng.choice([12, 24, 48])), priority=0, interruptible=False,
                checkpoint_overhead_minutes=0, min_chunk_minutes=60, command="x", image=None, env={})))
    return History(START, 60, FleetSnapshot(regions, hw), {r: "EUR" for r in regions},
                   {z: v for z, v in price.items()}, {z: v for z, v in carbon.items()}, jobs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--jobs", type=int, default=20, help="jobs released per day")
    ap.add_argument("--regions", type=int, default=5)
    ap.add_argument("--time-limit", type=float, default=10.0, help="solver limit per day [s] (the re-plan's)")
    ap.add_argument("--slot-minutes", type=int, default=15)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    settings = Settings(slot_minutes=args.slot_minutes, horizon_hours=72, plan_time_limit_s=args.time_limit)
    h = history(args.regions, args.days, args.jobs, settings.horizon_hours, args.seed)
    if args.slot_minutes != 60:  # the same hourly values held over the finer slots
        per = 60 // args.slot_minutes
        h = History(h.start, args.slot_minutes, h.fleet, h.currencies,
                    {z: [x for x in v for _ in range(per)] for z, v in h.price.items()},
                    {z: [x for x in v for _ in range(per)] for z, v in h.carbon.items()}, h.jobs)
    scenario = parse({"regions": {code: {"gpus": {"h100": 16, "a100": 16}} for code in h.fleet.regions}})
    t0, cpu0 = time.perf_counter(), time.process_time()
    result = compare(h, settings, START, args.days, scenario)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    print(f"replay of {args.days} days x {args.jobs} jobs/day, {args.regions} regions, {args.slot_minutes}-min slots, "
          f"time limit {args.time_limit:g} s/day; current vs 2x GPUs")
    print(f"{'':<18}{'current':>14}{'2x GPUs':>14}")
    for key in ("cost", "carbon_kg", "energy_kwh", "deadline_misses", "jobs_run", "not_placed"):
        print(f"{key:<18}{result['current'][key]:>14,.1f}{result['changed'][key]:>14,.1f}")
    per_day = wall / (2 * args.days)
    print(f"wall {wall:.1f} s ({per_day:.2f} s per replayed day), CPU {cpu:.1f} s")
    if args.json:
        print(json.dumps({"days": args.days, "jobs_per_day": args.jobs, "regions": args.regions,
                          "slot_minutes": args.slot_minutes, "time_limit_s": args.time_limit, "wall_s": wall,
                          "cpu_s": cpu, "wall_s_per_day": per_day, "current": result["current"],
                          "changed": result["changed"]}))


if __name__ == "__main__":
    main()
