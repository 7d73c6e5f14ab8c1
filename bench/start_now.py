"""Start-now punctuality: how late work released "now", whose cheapest start is now, is dispatched.

Replays a stream of short jobs through the real services on a simulated clock: each job is submitted at its release
(``jobs.submit_jobs``, with the planning grid's check), the minute task plans new work (``replan.replan_new_work``)
and the dispatch tick claims due assignments (``dispatch.claim.tick``), as beat runs them (``--plan-every-s``,
``--tick-s``). Prices rise hour by hour, so every job's cheapest start is its release, and hourly prices are held
over the grid's slots, so equal-cost slots tie (the planner must take the earliest). Per job it reports:

* **planned late**: the planned start minus the release: the wait for the minute planning task, since the plan
  starts the job at the moment it is made (slot 0 is plannable; when releases rounded up to the next slot boundary
  this was up to a whole slot more);
* **dispatch late**: the claim minus the planned start (the tick's share; target p99 <= one tick);
* **start late**: the claim minus the release (both, plus the wait for the minute planning task).

Solve time is not on the simulated clock; its wall time per plan is reported beside it. SQLite in a temporary
directory; nothing is submitted to a runtime.

Usage::

    python bench/start_now.py [--jobs 200] [--hours 2] [--slot-minutes 15] [--tick-s 30] [--plan-every-s 60] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import select

from app import migrate
from app.config import Settings
from app.db import make_engine, make_session_factory
from app.enums import Role, SeriesKind
from app.errors import ValidationFailed
from app.models import Job, Run
from app.services import auth, fleet, market
from app.services.dispatch import claim
from app.services.replan import replan_new_work

T0 = datetime(2030, 1, 1, 16, 7, 13, tzinfo=UTC)


def _setup(session, base: Path, hours: int) -> auth.Principal:
    fleet.upsert_hardware(session, "h100", dict(vendor="nvidia", model="H100 SXM", memory_gb=80, tdp_w=700,
                                                idle_w=90, relative_throughput={"default": 1.0}))
    fleet.upsert_region(session, "de", dict(name="Frankfurt", zone="DE", power_budget_kw=100_000, pue=1.2))
    fleet.set_inventory(session, "de", "h100", 4096)
    fleet.upsert_cluster(session, "de-local", "de", "local", {"state_dir": str(base / "runtime"), "gpus": {"h100": [0]}})
    start = T0.replace(minute=0, second=0) - timedelta(hours=1)
    points = []
    for h in range(hours + 30):  # rising prices: now is always the cheapest hour
        ts = start + timedelta(hours=h)
        points.append(market.Point("DE", SeriesKind.PRICE, ts, 40.0 + h, "EUR/MWh", "bench"))
        points.append(market.Point("DE", SeriesKind.CARBON_INTENSITY, ts, 300.0, "gCO2eq/kWh", "bench"))
    market.store(session, points)
    tenant = auth.create_tenant(session, "bench")
    row, _token = auth.issue_token(session, tenant, "bench", Role.MEMBER)
    session.commit()
    return auth.principal_for(row)


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else float("nan")


def run(args: argparse.Namespace) -> dict:
    rng = np.random.default_rng(args.seed)
    releases = sorted(T0 + timedelta(seconds=float(s)) for s in rng.uniform(0, args.hours * 3600, args.jobs))
    minutes = rng.integers(1, 11, args.jobs)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        settings = replace(Settings(var_dir=base), slot_minutes=args.slot_minutes,
                           database_url=args.database_url or f"sqlite:///{base / 'bench.db'}",
                           plan_time_limit_s=args.plan_limit_s, dispatch_interval_s=args.tick_s)
        migrate.upgrade(settings)
        engine = make_engine(settings)
        session = make_session_factory(engine)()
        from app.services import jobs

        principal = _setup(session, base, args.hours)
        released: dict[int, datetime] = {}
        claimed: dict[int, tuple[datetime, datetime]] = {}
        solve_s: list[float] = []
        refused = 0
        k, t = 0, T0.replace(second=0)
        end = T0 + timedelta(hours=args.hours, minutes=30)
        step = timedelta(seconds=args.tick_s)
        while t < end:
            while k < len(releases) and releases[k] <= t:
                item = {"name": f"j{k}", "gpu_count": 1, "durations_minutes": {"h100": int(minutes[k])},
                        "release_at": releases[k], "deadline_at": releases[k] + timedelta(minutes=65),
                        "allowed_hardware": ["h100"], "command": "true"}
                try:
                    _b, (job_id,) = jobs.submit_jobs(session, principal, [item], now=releases[k], prefix="",
                                                     slot_minutes=args.slot_minutes)
                    session.commit()
                    released[job_id] = releases[k]
                except ValidationFailed:  # the grid cannot fit its window: refused at submission, never dropped
                    session.rollback()
                    refused += 1
                k += 1
            for run_id in claim.tick(session, settings, now=t, worker="bench").claimed:  # the tick, then the plan
                r = session.get(Run, run_id)
                assert r is not None and r.planned_start_at is not None
                claimed[r.job_id] = (t, r.planned_start_at)
            if (t - T0.replace(second=0)).total_seconds() % args.plan_every_s == 0:
                t1 = time.perf_counter()
                if replan_new_work(session, settings, now=t) is not None:
                    solve_s.append(time.perf_counter() - t1)
                session.commit()
            t += step
        states = {j.id: j.state for j in session.scalars(select(Job))}
        session.close()
        engine.dispose()
    planned_late = [(p - released[j]).total_seconds() for j, (_c, p) in claimed.items()]
    dispatch_late = [(c - p).total_seconds() for j, (c, p) in claimed.items()]
    start_late = [(c - released[j]).total_seconds() for j, (c, _p) in claimed.items()]
    return {
        "jobs": args.jobs, "slot_minutes": args.slot_minutes, "tick_s": args.tick_s, "plan_every_s": args.plan_every_s,
        "dispatched": len(claimed), "refused_at_submission": refused, "not_dispatched": {str(s): sum(1 for j, st in states.items() if st == s and j not in
                                                                   claimed) for s in set(states.values())},
        "planned_late_s": {"p50": _pct(planned_late, 50), "p99": _pct(planned_late, 99), "max": max(planned_late, default=0)},
        "dispatch_late_s": {"p50": _pct(dispatch_late, 50), "p99": _pct(dispatch_late, 99),
                            "max": max(dispatch_late, default=0)},
        "start_late_s": {"p50": _pct(start_late, 50), "p99": _pct(start_late, 99), "max": max(start_late, default=0)},
        "plans": len(solve_s), "solve_wall_s": {"p50": _pct(solve_s, 50), "p99": _pct(solve_s, 99)},
        "dispatch_late_within_tick": all(x <= args.tick_s for x in dispatch_late),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--hours", type=int, default=2, help="releases spread over this many hours")
    ap.add_argument("--slot-minutes", type=int, default=15)
    ap.add_argument("--tick-s", type=float, default=30.0, help="dispatch tick (GRIDSHIFT_DISPATCH_INTERVAL_S)")
    ap.add_argument("--plan-every-s", type=int, default=60, help="the plan-new-work task's period")
    ap.add_argument("--plan-limit-s", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--database-url", default="")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    r = run(args)
    print(f"Start now: {r['jobs']} jobs of 1-10 min released over {args.hours} h, 65-min windows, rising prices; "
          f"{r['slot_minutes']}-min grid, tick {args.tick_s:g} s, plan-new-work every {args.plan_every_s} s")
    print(f"{'lateness [s]':<16} {'p50':>8} {'p99':>8} {'max':>8}")
    for key in ("planned_late_s", "dispatch_late_s", "start_late_s"):
        v = r[key]
        print(f"{key[:-2]:<16} {v['p50']:>8.1f} {v['p99']:>8.1f} {v['max']:>8.1f}")
    print(f"dispatched {r['dispatched']}/{r['jobs']} ({r['refused_at_submission']} refused at submission: the grid "
          f"cannot fit their window); {r['plans']} plans, solve wall p50 {r['solve_wall_s']['p50']:.2f} s "
          f"p99 {r['solve_wall_s']['p99']:.2f} s; dispatch lateness within one tick: {r['dispatch_late_within_tick']}")
    if args.json:
        print(json.dumps(r, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
