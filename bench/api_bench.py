"""API bench (issue 2): a 10,000-job batch in one request, and single-job GET latency, against PostgreSQL.

The app runs in-process (Flask's WSGI test client: routing, auth, validation, serialisation and the database, no
sockets); bench/load_bench.py measures the same API over HTTP under gunicorn.

* ``batch_10k_submit_s``: median wall time of POST /api/v1/jobs/batch with 10,000 jobs (``--repeat`` runs,
  each into a table that already holds the previous batches); target <= 5 s.
* ``get_p50_ms`` / ``get_p99_ms``: GET /api/v1/jobs/<id> over ``--gets`` random ids of the stored jobs.
* ``list_p50_ms``: GET /api/v1/jobs?limit=100 (newest first) for comparison.

Usage::

    python bench/api_bench.py [--database-url URL] [--jobs 10000] [--repeat 3] [--gets 2000] [--profile] [--json]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.api_env import DEFAULT_DB, job_items, percentile, prepare


def run(args: argparse.Namespace) -> dict[str, float | int | str]:
    from app import create_app

    env = prepare(args.database_url, rate_limit="1000000 per minute")
    app = create_app(env.settings)
    client = app.test_client()
    auth = {"Authorization": f"Bearer {env.tokens[0]}"}
    body = json.dumps({"jobs": job_items(args.jobs)})
    print(f"payload: {args.jobs} jobs, {len(body) / 1e6:.1f} MB of JSON", file=sys.stderr)

    batch_s, ids = [], []
    for i in range(args.repeat):
        profiler = cProfile.Profile() if args.profile and i == args.repeat - 1 else None
        t0 = time.perf_counter()
        if profiler:
            profiler.enable()
        resp = client.post("/api/v1/jobs/batch", data=body, content_type="application/json", headers=auth)
        if profiler:
            profiler.disable()
        batch_s.append(time.perf_counter() - t0)
        answer = resp.json or {}
        if resp.status_code != 201 or answer["count"] != args.jobs:
            raise SystemExit(f"batch refused: {resp.status_code} {resp.get_data(as_text=True)[:500]}")
        ids.extend(answer["job_ids"])
        if profiler:
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(30)
            print(out.getvalue(), file=sys.stderr)

    rng = random.Random(3)
    get_ms = []
    for job_id in rng.choices(ids, k=args.gets):
        t0 = time.perf_counter()
        resp = client.get(f"/api/v1/jobs/{job_id}", headers=auth)
        get_ms.append((time.perf_counter() - t0) * 1000)
        assert resp.status_code == 200, resp.status_code
    list_ms = []
    for _ in range(max(20, args.gets // 20)):
        t0 = time.perf_counter()
        resp = client.get("/api/v1/jobs?limit=100", headers=auth)
        list_ms.append((time.perf_counter() - t0) * 1000)
        assert resp.status_code == 200 and len((resp.json or {})["items"]) == 100
    app.extensions["gridshift"].engine.dispose()
    return {
        "database": "postgresql" if env.settings.database_url.startswith("postgresql") else "sqlite",
        "jobs_per_batch": args.jobs,
        "batch_runs": args.repeat,
        "batch_10k_submit_s": round(statistics.median(batch_s), 3),
        "batch_submit_min_s": round(min(batch_s), 3),
        "batch_submit_max_s": round(max(batch_s), 3),
        "jobs_in_table": len(ids),
        "get_requests": args.gets,
        "get_p50_ms": round(percentile(get_ms, 50), 2),
        "get_p99_ms": round(percentile(get_ms, 99), 2),
        "list_p50_ms": round(percentile(list_ms, 50), 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", default=DEFAULT_DB)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--gets", type=int, default=2000)
    parser.add_argument("--profile", action="store_true", help="cProfile the last batch (to stderr)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run(args)
    print(f"{'metric':<22} {'value':>12}  target")
    targets = {"batch_10k_submit_s": "<= 5 s"}
    for key, value in result.items():
        print(f"{key:<22} {value!s:>12}  {targets.get(key, '')}")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
