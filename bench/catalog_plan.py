"""Feed the hardware catalog's profiles to the planning benchmark, and show that they steer hardware choice.

``bench/plan_bench.py --catalog FILE`` takes rows ``{name, tdp_w, memory_gb, relative_throughput}``; its
workload (bench/plan_workload.py) draws ``tdp_w x BUSY[kind]`` per GPU. :func:`rows_from_catalog` writes the
profile in force for one workload class (measured where the catalog has a measurement, else the estimate) in
that form: ``relative_throughput`` of the class, and ``tdp_w = profile power / BUSY[kind]`` so that the bench
draws the profile's power for jobs of that kind.

Examples::

    python bench/catalog_plan.py rows --class training --out /tmp/rows.json
    python bench/plan_bench.py --catalog /tmp/rows.json --jobs 200 --days 2 --time-limit 5
    python bench/catalog_plan.py compare --class training --set h200.training.power_w=2000 --json
    python bench/catalog_plan.py compare --class batch_inference --baseline estimates --json

``compare`` plans the same seeded plan-bench workload twice, "before" on the catalog (or, with ``--baseline
estimates``, on its estimates alone, without the measured profiles) and "after" on the catalog with ``--set``
changes to a profile, and prints the GPU-hours each hardware type receives under each.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from app.services.catalog import CATALOG, measurement_from_catalog, read_catalog  # noqa: E402
from app.services.profiles import estimate  # noqa: E402
from bench.plan_workload import BUSY  # noqa: E402

#: plan-bench workload kind of each workload class
KIND = {"training": "training", "fine_tuning": "training", "rendering": "rendering", "batch_inference": "inference"}


def profile_table(entries: list[dict[str, Any]], workload_class: str) -> dict[str, dict[str, float]]:
    """Profile in force per hardware code for one class: {code: {relative_throughput, power_w, memory_gb}}."""
    ref = next((e for e in entries if e["code"] == "h100"), None)
    ns = {e["code"]: SimpleNamespace(**{**e, "relative_throughput": e.get("relative_throughput") or {}})
          for e in entries}  # fmt: skip
    out = {}
    for e in entries:
        est = estimate(ns[e["code"]], ns[ref["code"]] if ref else None, workload_class)  # type: ignore[arg-type]
        thr, watts = est.relative_throughput, est.power_w
        for p in e.get("measured_profiles") or []:
            if p["workload_class"] == workload_class:
                m = measurement_from_catalog(e["code"], p)
                thr, watts = m.relative_throughput or thr, m.power_w
        out[e["code"]] = {"relative_throughput": thr, "power_w": watts, "memory_gb": float(e["memory_gb"])}
    return out


def rows_from_catalog(entries: list[dict[str, Any]], workload_class: str = "training",
                      overrides: dict[str, dict[str, float]] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """Plan-bench catalog rows for ``workload_class`` (names upper-cased: ``H100`` is the bench's reference)."""
    table = profile_table(entries, workload_class)
    for code, changes in (overrides or {}).items():
        if code not in table:
            raise ValueError(f"--set names unknown hardware {code!r}; known: {', '.join(sorted(table))}")
        table[code].update(changes)
    busy = BUSY[KIND[workload_class]]
    return [{"name": code.upper(), "tdp_w": round(p["power_w"] / busy, 3), "memory_gb": p["memory_gb"],
             "relative_throughput": p["relative_throughput"]} for code, p in table.items()]  # fmt: skip


def parse_sets(items: list[str]) -> tuple[str | None, dict[str, dict[str, float]]]:
    """``code.class.field=value`` items -> (class, {code: {field: value}}); field is relative_throughput or power_w."""
    out: dict[str, dict[str, float]] = {}
    classes = set()
    for item in items:
        try:
            key, value = item.split("=", 1)
            code, cls, field = key.split(".")
            number = float(value)
        except ValueError:
            raise SystemExit(f"--set {item!r}: expected code.class.field=value") from None
        if field not in ("relative_throughput", "power_w") or number <= 0:
            raise SystemExit(f"--set {item!r}: field must be relative_throughput or power_w, value > 0")
        classes.add(cls)
        out.setdefault(code, {})[field] = number
    if len(classes) > 1:
        raise SystemExit("--set: one workload class at a time")
    return (classes.pop() if classes else None), out


def hardware_gpu_hours(rows: list[dict[str, Any]], *, jobs: int, seed: int, days: int, time_limit_s: float,
                       kind: str | None = None) -> dict[str, float]:  # fmt: skip
    """GPU-hours per hardware type in the gridshift plan of the seeded plan-bench workload.

    The curves are a fixed synthetic day shape (price and carbon per region), so the run needs no data files.
    """
    import numpy as np
    import pandas as pd

    from bench.plan_workload import build_problem, generate, hardware_from_dicts
    from optimizer import SOLVERS, Objective, ObjectiveKind, SolveParams, check_plan

    regions = ["DE", "FR", "ES"]
    hours = days * 24
    start = datetime(2022, 3, 1, tzinfo=UTC)
    idx = pd.date_range(start, start + timedelta(hours=hours - 1), freq="h")
    h = np.arange(hours) % 24
    shape = 1.0 + 0.4 * np.cos((h - 19) / 24 * 2 * np.pi)
    price = pd.DataFrame({r: base * shape for r, base in zip(regions, (120, 95, 100), strict=True)}, index=idx)
    carbon = pd.DataFrame({r: base * shape for r, base in zip(regions, (420, 60, 170), strict=True)}, index=idx)
    specs = generate(jobs, regions, seed)
    if kind is not None:
        specs = [s for s in specs if s.kind == kind]
    problem = build_problem(specs, hardware_from_dicts(rows), price, carbon, start, Objective(ObjectiveKind.COST))
    plan = SOLVERS["gridshift"](problem, SolveParams(time_limit_s, 1, seed))
    report = check_plan(problem, plan)
    if not report.ok:
        raise RuntimeError(f"plan failed its check: {report.violations[:3]}")
    gpus = {j.job_id: j.gpus for j in problem.jobs}
    used: dict[str, float] = {}
    for a in plan.assignments:
        used[a.hardware] = used.get(a.hardware, 0.0) + gpus[a.job_id] * sum(c.end_slot - c.start_slot for c in a.chunks) * problem.slot_hours
    return dict(used)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=("rows", "compare"))
    ap.add_argument("--catalog", type=Path, default=CATALOG)
    ap.add_argument("--class", dest="workload_class", default=None, choices=sorted(KIND))
    ap.add_argument("--set", dest="sets", action="append", default=[], help="code.class.field=value")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--days", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-limit", type=float, default=5.0)
    ap.add_argument("--baseline", choices=("catalog", "estimates"), default="catalog",
                    help="compare: plan 'before' on the catalog as it is, or on its estimates alone (no measured)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    set_class, overrides = parse_sets(args.sets)
    cls = args.workload_class or set_class or "training"
    entries = read_catalog(args.catalog)
    if args.mode == "rows":
        rows = rows_from_catalog(entries, cls, overrides)
        text = json.dumps(rows, indent=1)
        if args.out:
            args.out.write_text(text)
            print(f"{len(rows)} rows for {cls} written to {args.out}")
        else:
            print(text)
        return 0
    kind = KIND[cls]
    base = entries if args.baseline == "catalog" else [
        {k: v for k, v in e.items() if k != "measured_profiles"} for e in entries]
    before = hardware_gpu_hours(rows_from_catalog(base, cls), jobs=args.jobs, seed=args.seed, days=args.days,
                                time_limit_s=args.time_limit, kind=kind)  # fmt: skip
    after = hardware_gpu_hours(rows_from_catalog(entries, cls, overrides), jobs=args.jobs, seed=args.seed,
                               days=args.days, time_limit_s=args.time_limit, kind=kind)  # fmt: skip
    names = sorted(set(before) | set(after))
    print(f"GPU-hours per hardware, plan-bench workload ({kind} jobs of {args.jobs}, seed {args.seed}), "
          f"profiles for {cls}; before: {args.baseline}, after: catalog {' '.join(args.sets)}")  # fmt: skip
    print(f"{'hardware':<11} {'before':>10} {'after':>10}")
    for n in names:
        print(f"{n:<11} {before.get(n, 0.0):>10.1f} {after.get(n, 0.0):>10.1f}")
    if args.json:
        print(json.dumps({"workload_class": cls, "sets": args.sets, "baseline": args.baseline, "before_gpu_hours": before,
                          "after_gpu_hours": after}, sort_keys=True))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
