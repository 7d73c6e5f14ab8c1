"""Connector-level submit rate to one local Slurm cluster (CLI and slurmrestd), and start lateness.

Starts a one-node cluster on loopback (tests.runtimes.slurm), submits N one-GPU jobs through the Slurm
connector as fast as one caller can, then waits for them to start and reports the start lateness
(actual start minus submit; it includes waiting for a free GPU). The REST path lists every job the
controller holds to find a run key (v0.0.38 has no name filter), so its rate falls as jobs accumulate. The dispatch benchmark (bench/dispatch_bench.py) measures the whole path;
this isolates the connector.

Usage: .venv/bin/python tests/runtimes/slurm_submit_rate.py [--jobs 100] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from connectors import JobSpec, RunStatus, get_connector
from tests.runtimes.slurm import SlurmLab


def measure(cluster, mode: str, jobs: int) -> dict:
    connector = get_connector("slurm", cluster.connector_config(mode))
    submitted: dict[str, datetime] = {}
    start = time.perf_counter()
    for i in range(jobs):
        spec = JobSpec(
            run_key=f"gs-rate-{mode}-{i}", name="rate", command="sleep 1", hardware="h100", gpu_count=1
        )
        submitted[connector.submit(spec)] = datetime.now(UTC)
    rate = jobs / (time.perf_counter() - start)
    lateness: list[float] = []
    deadline = time.monotonic() + 300
    pending = dict(submitted)
    while pending and time.monotonic() < deadline:
        for job_id in list(pending):
            state = connector.poll(job_id)
            if state.status is not RunStatus.PENDING and state.started_at is not None:
                lateness.append(max(0.0, (state.started_at - pending.pop(job_id)).total_seconds()))
        time.sleep(0.5)
    lateness.sort()
    return {
        "mode": mode,
        "jobs": jobs,
        "submits_per_s": round(rate, 1),
        "started": len(lateness),
        "lateness_p50_s": round(statistics.median(lateness), 1) if lateness else None,
        "lateness_p99_s": round(lateness[min(len(lateness) - 1, int(0.99 * len(lateness)))], 1)
        if lateness
        else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description="Slurm connector submit rate")
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    # 16 GPUs (the node runs at most 16 jobs: 2 CPUs, OverSubscribe=FORCE:8) and one-GPU jobs of 1 s each;
    # jobs arrive faster than 16 slots drain them, so lateness includes queueing, not only scheduler delay
    lab = SlurmLab({"gs-rate": {"h100": 16}}, rest=True)
    try:
        cluster = lab.start()["gs-rate"]
        rows = [measure(cluster, mode, args.jobs) for mode in ("cli", "rest")]
    finally:
        lab.stop()
    print(f"{'mode':6} {'jobs':>5} {'submits/s':>10} {'started':>8} {'late p50 s':>11} {'late p99 s':>11}")
    for r in rows:
        print(f"{r['mode']:6} {r['jobs']:>5} {r['submits_per_s']:>10} {r['started']:>8} "
              f"{r['lateness_p50_s']!s:>11} {r['lateness_p99_s']!s:>11}")  # fmt: skip
    if args.json:
        print(json.dumps({"rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
