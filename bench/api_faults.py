"""API fault trials (issue 8): a PostgreSQL restart during planning and during batch submissions, and a Redis
restart during batch submissions. No lost job, no duplicated batch, no half-stored batch or plan.

Real processes: a private PostgreSQL cluster and a private Redis (bench/dispatch_env.py) on ports 8760-8761,
gunicorn (2 workers) on 127.0.0.1:8753 with the production settings (database on that PostgreSQL, rate-limit
counters in that Redis). bench/faults.py covers dispatch (kill -9, Redis and PostgreSQL restarts while runs are
in flight); this bench covers the API's own writes.

A client behaves as documented for Gridshift clients: a batch carries an ``Idempotency-Key`` and is retried with
the same key on a transport error or a 5xx until it gets its 201; a re-plan (202, then its run polled) is asked for again when its run failed.

* ``redis-batch`` / ``pg-batch``: a batch of ``--batch-jobs`` jobs is posted and the server is restarted while the
  request is in flight. Scored from the database: **lost** = acknowledged batches missing or incomplete;
  **duplicated** = batches stored more than once for one key; **half-stored** = any batch whose job count is not the
  batch size.
* ``pg-plan``: POST /api/v1/plans (operator; 202, a run executed here as the worker's task does, polled until done,
  asked for again if it failed) and PostgreSQL restarts while the planner works. **lost** = planned
  jobs without an assignment in the current plan, or jobs that vanished; **duplicated** = a job twice in the current
  plan; **half-stored** = not exactly one current plan.

Usage::

    python bench/api_faults.py [--pg-batch 5] [--redis-batch 5] [--pg-plan 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.api_env import BenchEnv, job_items, prepare
from bench.dispatch_env import PrivatePostgres, PrivateRedis
from bench.load_bench import start_gunicorn, stop

PG_PORT, REDIS_PORT, WEB_PORT = 8761, 8760, 8753


class Client:
    """Retries with the same Idempotency-Key until the server acknowledges (bounded)."""

    def __init__(self, base: str, token: str, deadline_s: float = 120.0) -> None:
        self.base, self.deadline_s = base, deadline_s
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {token}"
        self.failures: list[str] = []

    def call(self, method: str, path: str, *, ok: int, **kw: Any) -> dict[str, Any] | None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < self.deadline_s:
            try:
                resp = self.http.request(method, self.base + path, timeout=60, **kw)
                if resp.status_code == ok:
                    return resp.json()  # type: ignore[no-any-return]
                self.failures.append(f"{method} {path} -> {resp.status_code}")
                if resp.status_code < 500 and resp.status_code != 409:
                    return None  # a client error will not heal by retrying
            except requests.RequestException as exc:
                self.failures.append(f"{method} {path} -> {type(exc).__name__}")
            time.sleep(0.5)
        return None


def _db(env: BenchEnv):  # type: ignore[no-untyped-def]
    from sqlalchemy import create_engine

    return create_engine(env.settings.database_url, pool_pre_ping=True)


def batch_trial(kind: str, index: int, env: BenchEnv, client: Client, server: Any, args: argparse.Namespace,
                rng: random.Random) -> dict[str, Any]:  # fmt: skip
    from sqlalchemy import text

    key = f"{kind}-{index}-{rng.getrandbits(32):08x}"
    body = {"jobs": job_items(args.batch_jobs, seed=index)}
    out: dict[str, Any] = {}
    failures_before = len(client.failures)
    engine = _db(env)
    with engine.connect() as conn:
        started = conn.execute(text("SELECT now()")).scalar_one()
    engine.dispose()

    def post() -> None:
        out["resp"] = client.call(
            "POST", "/api/v1/jobs/batch", ok=201, json=body, headers={"Idempotency-Key": key}
        )

    thread = threading.Thread(target=post)
    thread.start()
    time.sleep(rng.uniform(0.05, args.max_delay_s))  # the request is being parsed, validated or written
    server.restart(down_s=args.down_s)
    thread.join(timeout=180)
    resp = out.get("resp")
    engine = _db(env)
    with engine.connect() as conn:  # every batch stored since this trial began
        counts = dict(conn.execute(text(
            "SELECT batch_id, count(*) FROM jobs WHERE name LIKE 'bench-%' AND created_at >= :t GROUP BY batch_id"
        ), {"t": started}).all())  # fmt: skip
    engine.dispose()
    acked = resp["batch_id"] if resp else None
    return {
        "kind": kind,
        "acknowledged": resp is not None,
        "retries": len(client.failures) - failures_before,
        "answers": client.failures[failures_before:],
        "lost": int(resp is None or counts.get(acked, 0) != args.batch_jobs),
        "duplicated": sum(1 for b in counts if b != acked),
        "half_stored": sum(1 for n in counts.values() if n != args.batch_jobs),
    }


def work_plan_run(env: BenchEnv, run_id: int) -> None:
    """What the worker's ``gridshift.plan.run`` task does with a queued run (this bench starts no Celery worker)."""
    from app.db import make_engine, make_session_factory
    from app.services import plan_runs

    engine = make_engine(env.settings)
    try:
        with make_session_factory(engine)() as session:
            plan_runs.execute(session, env.settings, run_id)
    except Exception as exc:  # the database went away and did not come back in time to record the failure
        print(f"plan run {run_id}: {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        engine.dispose()


def replan_run(env: BenchEnv, ops: Client, attempts: int = 3) -> dict[str, Any] | None:
    """A re-plan as a client does it: POST (202), poll the run; a run that failed is asked for again."""
    for _ in range(attempts):
        run = ops.call("POST", "/api/v1/plans", ok=202)
        if run is None:
            return None
        worker = threading.Thread(target=work_plan_run, args=(env, run["id"]))
        worker.start()
        worker.join(timeout=240)
        polled = ops.call("GET", f"/api/v1/plans/runs/{run['id']}", ok=200)
        if polled is not None and polled["state"] == "succeeded":
            return polled
        ops.failures.append(f"plan run {run['id']} -> {polled and polled['state']}")
    return None


def plan_trial(index: int, env: BenchEnv, ops: Client, members: Client, pg: PrivatePostgres,
               args: argparse.Namespace, rng: random.Random) -> dict[str, Any]:  # fmt: skip
    from sqlalchemy import text

    items = [
        {**item, "name": f"plan-{index}-{i}"}
        for i, item in enumerate(job_items(args.plan_jobs, seed=99 + index))
    ]
    if not members.call("POST", "/api/v1/jobs/batch", ok=201, json={"jobs": items}):
        raise SystemExit(f"could not submit the jobs to plan: {members.failures[-3:]}")
    engine = _db(env)
    with engine.connect() as conn:
        jobs_before = conn.execute(text("SELECT count(*) FROM jobs")).scalar_one()
    failures_before = len(ops.failures)
    out: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: out.update(resp=replan_run(env, ops)))
    thread.start()
    time.sleep(rng.uniform(0.3, args.max_plan_delay_s))
    pg.restart(down_s=args.down_s)
    thread.join(timeout=300)
    with engine.connect() as conn:
        current = conn.execute(text("SELECT id FROM plans WHERE is_current")).scalars().all()
        jobs_after = conn.execute(text("SELECT count(*) FROM jobs")).scalar_one()
        planned_without = conn.execute(text(
            "SELECT count(*) FROM jobs j WHERE j.state = 'planned' AND NOT EXISTS (SELECT 1 FROM assignments a "
            "JOIN plans p ON p.id = a.plan_id AND p.is_current WHERE a.job_id = j.id)")).scalar_one()  # fmt: skip
        doubled = conn.execute(text(
            "SELECT count(*) FROM (SELECT a.job_id FROM assignments a JOIN plans p ON p.id = a.plan_id AND p.is_current "
            "GROUP BY a.job_id HAVING count(*) > 1) d")).scalar_one()  # fmt: skip
    engine.dispose()
    return {
        "kind": "pg-plan",
        "acknowledged": out.get("resp") is not None,
        "retries": len(ops.failures) - failures_before,
        "answers": ops.failures[failures_before:],
        "lost": int(planned_without) + max(0, jobs_before - jobs_after),
        "duplicated": int(doubled),
        "half_stored": int(len(current) != 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pg-batch", type=int, default=5)
    parser.add_argument("--redis-batch", type=int, default=5)
    parser.add_argument("--pg-plan", type=int, default=3)
    parser.add_argument("--batch-jobs", type=int, default=2000)
    parser.add_argument("--plan-jobs", type=int, default=60)
    parser.add_argument("--down-s", type=float, default=1.0)
    parser.add_argument("--max-delay-s", type=float, default=0.8)
    parser.add_argument("--max-plan-delay-s", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    base = Path(tempfile.mkdtemp(prefix="gs-api-faults-"))
    base.chmod(0o755)  # the postgres user must reach its data directory below
    (base / "pg").mkdir()
    pg, redis = PrivatePostgres(PG_PORT, base / "pg"), PrivateRedis(REDIS_PORT, base)
    proc = None
    rows: list[dict[str, Any]] = []
    try:
        pg.start()
        redis.start()
        env = prepare(pg.url.rsplit("/", 1)[0] + "/gridshift", redis_url=redis.url, n_tokens=1,
                      rate_limit="100000 per minute")  # fmt: skip
        proc = start_gunicorn(env, WEB_PORT, 2, 4, base / "gunicorn.log")
        web = f"http://127.0.0.1:{WEB_PORT}"
        members, ops = Client(web, env.tokens[0]), Client(web, env.operator_token)
        for i in range(args.pg_plan):
            rows.append(plan_trial(i, env, ops, members, pg, args, rng))
        for kind, server, n in (("pg-batch", pg, args.pg_batch), ("redis-batch", redis, args.redis_batch)):
            for i in range(n):
                rows.append(batch_trial(kind, i, env, members, server, args, rng))
    finally:
        if proc is not None:
            stop(proc)
        for part in (redis, pg):
            try:
                part.stop()
            except Exception as exc:  # keep stopping the others
                print(f"stopping {type(part).__name__}: {exc}", file=sys.stderr)
        shutil.rmtree(base, ignore_errors=True)
    return report(rows, args.json)


def report(rows: list[dict[str, Any]], as_json: bool) -> int:
    kinds = sorted({r["kind"] for r in rows})
    summary = {
        k: {
            "trials": sum(1 for r in rows if r["kind"] == k),
            "acknowledged": sum(r["acknowledged"] for r in rows if r["kind"] == k),
            "client_retries": sum(r["retries"] for r in rows if r["kind"] == k),
            "lost": sum(r["lost"] for r in rows if r["kind"] == k),
            "duplicated": sum(r["duplicated"] for r in rows if r["kind"] == k),
            "half_stored": sum(r["half_stored"] for r in rows if r["kind"] == k),
            "answers_while_down": dict(
                Counter(a.split(" -> ")[1] for r in rows if r["kind"] == k for a in r["answers"])
            ),
        }
        for k in kinds
    }
    print(f"{'fault':<12} {'trials':>6} {'acked':>6} {'retries':>8} {'lost':>5} {'dup':>5} {'half':>5}")
    for k, s in summary.items():
        print(f"{k:<12} {s['trials']:>6} {s['acknowledged']:>6} {s['client_retries']:>8} {s['lost']:>5} "
              f"{s['duplicated']:>5} {s['half_stored']:>5}")  # fmt: skip
    total = {f: sum(s[f] for s in summary.values()) for f in ("trials", "lost", "duplicated", "half_stored")}
    if as_json:
        print(json.dumps({"faults": summary, **{f"total_{k}": v for k, v in total.items()}}))
    return 0 if total["lost"] == total["duplicated"] == total["half_stored"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
