"""Run benchmark commands side by side, each pinned to its own cores (``os.sched_setaffinity``), and keep each one's output.

Used for the planner tables of docs/planner.md on a many-core machine: each planner run gets the 2 cores it plans
with, so runs beside it do not slow it down and the figures match a quiet 2-core machine.

Example::

    python bench/side_by_side.py --cores-per-run 2 --out results/ commands.txt

``commands.txt`` holds one shell command a line (``#`` starts a comment); its output goes to ``<out>/<k>.log``
(``k`` the line's number among the commands). Prints one line per finished command and, with ``--json``, one JSON
object as the last line (each command, its cores, exit status and wall time [s]).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def _pin(cores: tuple[int, ...]):
    def pin() -> None:
        os.sched_setaffinity(0, cores)

    return pin


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("commands", help="file with one shell command a line")
    ap.add_argument("--cores-per-run", type=int, default=2)
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="cores to share out")
    ap.add_argument("--out", default="side_by_side", help="folder for each command's log")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.cores_per_run < 1 or args.cores < args.cores_per_run:
        ap.error("--cores-per-run must be at least 1 and at most --cores")
    lines = [ln.strip() for ln in Path(args.commands).read_text().splitlines()]
    commands = [ln for ln in lines if ln and not ln.startswith("#")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    free = [
        tuple(range(k, k + args.cores_per_run))
        for k in range(0, args.cores - args.cores_per_run + 1, args.cores_per_run)
    ]
    running: dict[int, tuple[subprocess.Popen, tuple[int, ...], float]] = {}
    done: list[dict] = []
    todo = list(enumerate(commands))
    while todo or running:
        while todo and free:
            k, cmd = todo.pop(0)
            cores = free.pop(0)
            log = (out / f"{k}.log").open("w")
            proc = subprocess.Popen(
                ["bash", "-c", cmd], stdout=log, stderr=subprocess.STDOUT, preexec_fn=_pin(cores)
            )
            running[k] = (proc, cores, time.perf_counter())
        time.sleep(0.2)
        for k, (proc, cores, t0) in list(running.items()):
            if proc.poll() is None:
                continue
            del running[k]
            free.append(cores)
            row = {
                "k": k,
                "command": commands[k],
                "cores": list(cores),
                "rc": proc.returncode,
                "wall_s": round(time.perf_counter() - t0, 2),
            }
            done.append(row)
            print(f"[{k}] rc={row['rc']} {row['wall_s']:.1f} s cores {cores}: {commands[k]}", flush=True)
    if args.json:
        print(json.dumps({"runs": sorted(done, key=lambda r: r["k"])}))
    return 0 if all(r["rc"] == 0 for r in done) else 1


if __name__ == "__main__":
    sys.exit(main())
