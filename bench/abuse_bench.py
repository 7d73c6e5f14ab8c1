"""Abuse bench (issue 20): slow clients and an expensive-endpoint flood against the production web tier, on loopback.

Set-up: the bench database (bench/api_env.py; default ``gridshift_hostile_bench``) with the demo fleet, two tenants
("bench", whose reads are measured, and "flood"); gunicorn with the production command (``--preload``, 4 sync
workers, ``--timeout 60``) on 127.0.0.1:``--port``, its limit counters in Redis (``--redis-url``); and nginx with
``deploy/nginx.conf`` (only its upstream and listen lines changed) on ``--port`` + 1.

Trials, each ``--seconds`` long (everything is bounded: sockets, threads and the two servers end with the bench):

1. ``slow``: 16 slow-header sockets (a header line every 5 s, never the blank line) and 16 slow-body sockets (a
   POST announcing 1 MB and sending 100 bytes every 5 s) held open, reopened when closed; meanwhile a normal client
   asks ``/api/v1/health`` and ``/api/v1/jobs?limit=20`` (bench's token) 5 times a second each, with a 5 s timeout
   (a timeout counts as an error, at 5,000 ms). Run once against gunicorn directly and once through nginx.
2. ``flood``: tenant "bench" reads ``/api/v1/jobs?limit=20`` sequentially for ``--seconds`` / 3 (quiet), then
   again while tenant "flood" sends 10,000-job invalid batches (the most expensive request: ~3 CPU-s each on
   main) from ``--flood-connections`` (4) processes, each one connection at a time with no pause, for ``--seconds``, through nginx
   (``--flood-direct``: to gunicorn itself, as on main). ``--no-cost-limits`` turns the per-tenant
   budget and concurrency cap off, for the before figure.

Targets: through nginx, health p99 <= 100 ms and 0 errors; the other tenant's read p50 during the flood within 2x of
its quiet p50. The last line with ``--json`` is one JSON object.

``--server-cpus``, ``--flood-cpus`` and ``--probe-cpus`` (``taskset`` lists such as ``0`` or ``0-7``) pin gunicorn and
nginx, the flooding processes and the measuring client to cores of their own, so that the flood measures what the
server does with a flood, not how flooding processes on the same cores slow it down (PostgreSQL and Redis are not
pinned). The server's CPU time during a flood is reported for gunicorn and nginx apart.

Usage::

    python bench/abuse_bench.py [--seconds 30] [--trials slow,flood] [--no-cost-limits]
        [--server-cpus 0 --flood-cpus 1] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy.orm import Session

from bench.api_env import BenchEnv, job_items, percentile, prepare

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DB = "postgresql+psycopg://postgres@127.0.0.1:5432/gridshift_hostile_bench"
DEFAULT_REDIS = "redis://127.0.0.1:6379/3"
HOST = "127.0.0.1"  # loopback only
PROBE_TIMEOUT_S = 5.0
#: docker-compose.yml's web-heavy service: its gunicorn's workers and niceness (tests/security/test_web_tier.py checks
#: that they match the compose file, so that the bench runs the production shape)
HEAVY_WORKERS = 2
HEAVY_NICE = 10


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode}; see {log}")
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.5):
            return
        time.sleep(0.2)
    raise SystemExit(f"{what} did not listen on {port} within 60 s; see {log}")


def _pinned(cmd: list[str], cpus: str | None) -> list[str]:
    return ["taskset", "-c", cpus, *cmd] if cpus else cmd


def start_gunicorn(env: BenchEnv, port: int, log: Path, *, cost_limits: bool, cpus: str | None = None,
                   workers: int = 4, nice: int = 0, cost_concurrency: int = 1) -> subprocess.Popen[bytes]:
    """The production command of docker-compose.yml's web service (``workers=4``) or web-heavy service
    (``workers=2, nice=10``), on loopback; ``cost_concurrency`` is compose's GRIDSHIFT_COST_CONCURRENCY."""
    s = env.settings
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("GRIDSHIFT_")}
    child_env.update(
        GRIDSHIFT_DATABASE_URL=s.database_url, GRIDSHIFT_BROKER_URL=s.broker_url,
        GRIDSHIFT_RATE_LIMIT_STORAGE_URL=s.rate_limit_storage_url, GRIDSHIFT_VAR_DIR=str(s.var_dir),
        GRIDSHIFT_SECRET_KEY="bench", GRIDSHIFT_LOCAL_RUNTIME_DIR=str(s.local_runtime_dir),
        GRIDSHIFT_TRUSTED_PROXIES=HOST,  # nginx, on loopback
        GRIDSHIFT_RATE_LIMIT="100000 per minute",  # request counting is not what this bench measures
        GRIDSHIFT_COST_CONCURRENCY=str(cost_concurrency),
    )
    if not cost_limits:
        child_env.update(GRIDSHIFT_COST_BUDGET="", GRIDSHIFT_COST_CONCURRENCY="1000")
    cmd = [sys.executable, "-m", "gunicorn", "--bind", f"{HOST}:{port}", "--workers", str(workers), "--timeout", "60",
           "--preload", "--log-level", "warning", "app.wsgi:app"]
    if nice:
        cmd = ["nice", "-n", str(nice), *cmd]
    proc = subprocess.Popen(_pinned(cmd, cpus), cwd=REPO, env=child_env, stdout=log.open("wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    _wait_port(port, proc, "gunicorn", log)
    return proc


def start_nginx(upstream_port: int, heavy_port: int, port: int, workdir: Path,
                cpus: str | None = None, conf_path: Path | None = None) -> subprocess.Popen[bytes]:
    """nginx with deploy/nginx.conf; only the two upstream lines and the listen line (marked ``# bench:``) are
    changed. ``heavy_port`` equal to ``upstream_port`` sends the heavy locations to the one pool (``--one-pool``)."""
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(binary).exists():
        raise SystemExit("needs nginx (apt-get install nginx-light)")
    conf = (conf_path or REPO / "deploy" / "nginx.conf").read_text()
    conf = conf.replace("server web:8000;  # bench: upstream", f"server {HOST}:{upstream_port};")
    conf = conf.replace("server web-heavy:8000;  # bench: heavy upstream", f"server {HOST}:{heavy_port};")
    conf = conf.replace("listen 8080;  # bench: listen", f"listen {HOST}:{port};")
    conf = conf.replace("/tmp/gridshift-nginx", str(workdir / "nginx"))
    if any(line in conf for line in ("server web:8000;", "server web-heavy:8000;", "listen 8080;")):
        raise SystemExit("deploy/nginx.conf lost its '# bench:' lines")
    path = workdir / "nginx.conf"
    path.write_text(conf)
    log = workdir / "nginx.log"
    proc = subprocess.Popen(_pinned([binary, "-c", str(path), "-g", "daemon off;"], cpus), stdout=log.open("wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    _wait_port(port, proc, "nginx", log)
    return proc


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


class SlowClients:
    """``n_header`` slow-header and ``n_body`` slow-body sockets held open against ``port`` until stopped."""

    def __init__(self, port: int, n_header: int, n_body: int, token: str, interval_s: float = 5.0) -> None:
        self.port, self.interval_s, self.token = port, interval_s, token
        self.stop_event = threading.Event()
        self.opened = 0
        self.threads = [threading.Thread(target=self._hold, args=(kind,), daemon=True)
                        for kind in ["header"] * n_header + ["body"] * n_body]

    def __enter__(self) -> SlowClients:
        for t in self.threads:
            t.start()
        time.sleep(1.0)  # let them connect and take what they can before measuring
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout=self.interval_s + 2)

    def _hold(self, kind: str) -> None:
        while not self.stop_event.is_set():
            with contextlib.suppress(OSError), socket.create_connection((HOST, self.port), timeout=5) as sock:
                self.opened += 1
                if kind == "header":
                    sock.sendall(b"GET /api/v1/health HTTP/1.1\r\nHost: bench\r\n")
                else:
                    sock.sendall(b"POST /api/v1/jobs HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                                 b"Authorization: Bearer " + self.token.encode() +
                                 b"\r\nContent-Length: 1000000\r\n\r\n{")
                n = 0
                while not self.stop_event.wait(self.interval_s):
                    n += 1
                    sock.sendall(f"X-Slow-{n}: {'a' * 20}\r\n".encode() if kind == "header" else b" " * 100)


def _get(port: int, path: str, token: str = "", timeout: float = PROBE_TIMEOUT_S) -> tuple[int, float]:
    """One GET on a fresh connection: (status or 0 on a transport error/timeout, latency [ms])."""
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        resp = conn.getresponse()
        resp.read()
        status = resp.status
    except (OSError, http.client.HTTPException):
        status = 0
    finally:
        conn.close()
    return status, (time.perf_counter() - t0) * 1000.0


def probe(port: int, path: str, token: str, seconds: float, rate: float) -> list[tuple[int, float]]:
    """``path`` at ``rate`` per second for ``seconds`` (requests start on schedule; a slow one delays the next)."""
    out: list[tuple[int, float]] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.monotonic()
        out.append(_get(port, path, token))
        time.sleep(max(0.0, 1.0 / rate - (time.monotonic() - started)))
    return out


def _stats(samples: list[tuple[int, float]]) -> dict[str, Any]:
    ms = [m for _s, m in samples]
    errors = sum(1 for s, _m in samples if not 200 <= s < 300)
    return {"n": len(samples), "errors": errors, "p50_ms": round(percentile(ms, 50), 1),
            "p99_ms": round(percentile(ms, 99), 1), "max_ms": round(max(ms, default=float("nan")), 1)}


def trial_slow(name: str, port: int, token: str, slow_token: str, seconds: float) -> dict[str, Any]:
    results: dict[str, list[tuple[int, float]]] = {}

    def run(kind: str, path: str, tok: str) -> None:
        results[kind] = probe(port, path, tok, seconds, rate=5.0)

    with SlowClients(port, 16, 16, slow_token) as slow:
        probes = [threading.Thread(target=run, args=("health", "/api/v1/health", "")),
                  threading.Thread(target=run, args=("read", "/api/v1/jobs?limit=20", token))]
        for t in probes:
            t.start()
        for t in probes:
            t.join()
        opened = slow.opened
    return {"target": name, "slow_sockets": 32, "opened": opened,
            "health": _stats(results["health"]), "read": _stats(results["read"])}


def _flood(port: int, flood_token: str, body: bytes | None, until: float, out: Any,
           cpus: set[int] | None = None, nice: int = 0) -> None:
    """One flooding connection loop (in its own process, so that it does not share the prober's interpreter);
    ``body`` None floods the cheapest request instead (the control). ``nice`` lowers its CPU priority: an attacker's
    processes run on the attacker's machine, not on the server's cores."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    if nice:
        os.nice(nice)
    codes: dict[int, int] = {}
    while time.time() < until:
        conn = http.client.HTTPConnection(HOST, port, timeout=120)
        try:
            if body is None:
                conn.request("GET", "/api/v1/health")
            else:
                conn.request("POST", "/api/v1/jobs/batch", body=body, headers={
                    "Authorization": f"Bearer {flood_token}", "Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            codes[resp.status] = codes.get(resp.status, 0) + 1
        except (OSError, http.client.HTTPException):
            codes[0] = codes.get(0, 0) + 1
        finally:
            conn.close()
    out.put(codes)


def _cpu_s(pgids: list[int]) -> float:
    """CPU seconds (user + system) used so far by every process of these process groups (gunicorn's, nginx's)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) in pgids:
                total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def trial_flood(port: int, token: str, flood_tokens: list[str], seconds: float, connections: int,
                server_pgids: list[int], *, cheap: bool = False, flood_cpus: set[int] | None = None,
                flood_nice: int = 0) -> dict[str, Any]:
    import multiprocessing
    import resource

    quiet = probe(port, "/api/v1/jobs?limit=20", token, seconds / 3, rate=10.0)
    bad = json.dumps({"jobs": [{**item, "allowed_regions": ["nowhere"] * 3} for item in job_items(10_000)]}).encode()
    body = None if cheap else bad
    ctx = multiprocessing.get_context("fork")
    results: Any = ctx.Queue()
    until = time.time() + seconds + 1.0
    # flooder i uses token i mod len(flood_tokens): one tenant's tokens (nginx's limits are per token)
    flooders = [ctx.Process(target=_flood, args=(port, flood_tokens[i % len(flood_tokens)], body, until, results,
                                                 flood_cpus, flood_nice),
                            daemon=True)
                for i in range(connections)]
    server_cpu0 = _cpu_s(server_pgids)
    parts0 = [_cpu_s([pgid]) for pgid in server_pgids]
    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    for proc in flooders:
        proc.start()
    time.sleep(1.0)
    loud = probe(port, "/api/v1/jobs?limit=20", token, seconds, rate=10.0)
    codes: dict[int, int] = {}
    for _ in flooders:
        for code, n in results.get(timeout=150).items():
            codes[code] = codes.get(code, 0) + n
    for proc in flooders:
        proc.join(timeout=10)
    kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    flooder_cpu = (kids1.ru_utime + kids1.ru_stime) - (kids0.ru_utime + kids0.ru_stime)
    server_cpu = _cpu_s(server_pgids) - server_cpu0
    parts = [round(_cpu_s([pgid]) - before, 1) for pgid, before in zip(server_pgids, parts0, strict=True)]
    q, f = _stats(quiet), _stats(loud)
    return {"quiet": q, "flood": f, "flood_answers": {str(k): v for k, v in sorted(codes.items())},
            "p50_ratio": round(f["p50_ms"] / q["p50_ms"], 2) if q["p50_ms"] else None,
            "request": "GET /api/v1/health" if cheap else f"POST /api/v1/jobs/batch ({len(bad)} bytes, invalid)",
            "flood_connections": len(flooders),
            "server_cpu_s": round(server_cpu, 1), "gunicorn_cpu_s": parts[0], "nginx_cpu_s": parts[1],
            "heavy_pool_cpu_s": parts[2] if len(parts) > 2 else None,
            "flooders_cpu_s": round(flooder_cpu, 1)}


def _seed(port: int, token: str, n: int) -> None:
    """``n`` jobs for the measured tenant, so that its read returns a full page."""
    conn = http.client.HTTPConnection(HOST, port, timeout=60)
    conn.request("POST", "/api/v1/jobs/batch", body=json.dumps({"jobs": job_items(n)}),
                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 201:
        raise SystemExit(f"seeding failed: {resp.status} {resp.read()[:300]!r}")
    conn.close()


def _flood_tenant(env: BenchEnv, n_tokens: int = 1) -> list[str]:
    from app.db import make_engine
    from app.enums import Role
    from app.services import auth

    engine = make_engine(env.settings)
    with Session(engine) as session:
        tenant = auth.create_tenant(session, "flood")
        tokens = [auth.issue_token(session, tenant, f"flood-{i}", Role.MEMBER)[1] for i in range(n_tokens)]
        session.commit()
    engine.dispose()
    return tokens


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", default=DEFAULT_DB)
    parser.add_argument("--redis-url", default=DEFAULT_REDIS)
    parser.add_argument("--port", type=int, default=8771, help="gunicorn; nginx listens on the next port")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each trial [s]")
    parser.add_argument("--trials", default="slow,flood,control")
    parser.add_argument("--flood-connections", type=int, default=4)
    parser.add_argument("--flood-tokens", type=int, default=1,
                        help="tokens of the flooding tenant, shared out among the connections")
    parser.add_argument("--flood-direct", action="store_true", help="flood gunicorn itself, not through nginx")
    parser.add_argument("--no-cost-limits", action="store_true", help="budget and concurrency cap off (before)")
    parser.add_argument("--server-cpus", default=None, help="taskset CPU list for gunicorn and nginx (e.g. 0)")
    parser.add_argument("--flood-cpus", default=None, help="CPU list for the flooding processes (e.g. 1)")
    parser.add_argument("--probe-cpus", default=None, help="CPU list for the measuring client (default: any)")
    parser.add_argument("--one-pool", action="store_true",
                        help="no heavy pool: nginx sends the heavy locations to the one gunicorn (the before figure)")
    parser.add_argument("--nginx-conf", type=Path, default=None,
                        help="another nginx.conf (e.g. an older deploy/nginx.conf, for a before figure)")
    parser.add_argument("--flood-nice", type=int, default=0, help="niceness of the flooding processes (0-19)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.probe_cpus:
        os.sched_setaffinity(0, _cpu_list(args.probe_cpus))
    flood_cpus = _cpu_list(args.flood_cpus) if args.flood_cpus else None
    trials = {t.strip() for t in args.trials.split(",") if t.strip()}

    import redis

    redis.Redis.from_url(args.redis_url).flushdb()  # this bench's own db: no counters left from a previous run
    env = prepare(args.database_url, redis_url=args.redis_url, n_tokens=1)
    flood_tokens = _flood_tenant(env, args.flood_tokens)
    flood_token = flood_tokens[0]
    workdir = Path(tempfile.mkdtemp(prefix="gs-abuse-"))
    workdir.chmod(0o755)  # nginx's workers (nobody, when started as root) keep their temp files under it
    gunicorn = nginx = heavy = None
    out: dict[str, Any] = {"seconds": args.seconds, "cost_limits": not args.no_cost_limits,
                           "flood_target": "gunicorn" if args.flood_direct else "nginx",
                           "load": os.getloadavg()[0], "cpus": os.cpu_count(), "server_cpus": args.server_cpus,
                           "flood_cpus": args.flood_cpus, "probe_cpus": args.probe_cpus,
                           "pools": "one" if args.one_pool else "two (heavy: 2 workers, nice 10)",
                           "flood_nice": args.flood_nice, "flood_tokens": args.flood_tokens, "nginx_conf": str(args.nginx_conf or "deploy/nginx.conf"),
                           "trials": {}}
    try:
        # docker-compose's two pools: web (4 workers) and web-heavy (2 workers at nice 10), a tenant's expensive
        # requests capped at 1 in flight; --one-pool: the single pool of before, capped at 2
        cap = 2 if args.one_pool else 1
        gunicorn = start_gunicorn(env, args.port, workdir / "gunicorn.log", cost_limits=not args.no_cost_limits,
                                  cpus=args.server_cpus, cost_concurrency=cap)
        heavy_port = args.port
        if not args.one_pool:
            heavy_port = args.port + 2
            heavy = start_gunicorn(env, heavy_port, workdir / "gunicorn-heavy.log", cost_limits=not args.no_cost_limits,
                                   cpus=args.server_cpus, workers=HEAVY_WORKERS, nice=HEAVY_NICE, cost_concurrency=cap)
        nginx = start_nginx(args.port, heavy_port, args.port + 1, workdir, cpus=args.server_cpus,
                            conf_path=args.nginx_conf)
        pgids = [gunicorn.pid, nginx.pid] + ([heavy.pid] if heavy else [])
        token = env.tokens[0]
        _seed(args.port, token, 200)
        if "slow" in trials:
            out["trials"]["slow_direct"] = trial_slow("gunicorn", args.port, token, flood_token, args.seconds)
            time.sleep(PROBE_TIMEOUT_S + 1)  # the direct trial's slow sockets are gone
            out["trials"]["slow_nginx"] = trial_slow("nginx", args.port + 1, token, flood_token, args.seconds)
        if "flood" in trials:
            port = args.port if args.flood_direct else args.port + 1
            out["trials"]["flood"] = trial_flood(port, token, flood_tokens, args.seconds,
                                                 args.flood_connections, pgids, flood_cpus=flood_cpus,
                                                 flood_nice=args.flood_nice)
        if "control" in trials:  # the same flood of the cheapest request: what any flood costs on this machine
            out["trials"]["control"] = trial_flood(args.port + 1, token, flood_tokens, args.seconds,
                                                   args.flood_connections, pgids, cheap=True,
                                                   flood_cpus=flood_cpus, flood_nice=args.flood_nice)
    finally:
        stop(nginx)
        stop(heavy)
        stop(gunicorn)
    out["load_after"] = os.getloadavg()[0]
    _print(out)
    if args.json:
        print(json.dumps(out))
    return 0


def _cpu_list(text: str) -> set[int]:
    """``0,2-3`` -> {0, 2, 3} (taskset's list syntax)."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, _sep, last = part.strip().partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def _print(out: dict[str, Any]) -> None:
    pinned = "".join(f", {what} on CPUs {out[key]}" for what, key in
                     (("server", "server_cpus"), ("flooders", "flood_cpus"), ("prober", "probe_cpus")) if out.get(key))
    print(f"abuse bench: {out['seconds']:.0f} s per trial, cost limits {'on' if out['cost_limits'] else 'off'}, "
          f"load {out['load']:.1f} -> {out['load_after']:.1f}, {out['cpus']} CPUs{pinned}, pools: {out['pools']}, "
          f"flooders' nice {out['flood_nice']}")
    for name in ("slow_direct", "slow_nginx"):
        t = out["trials"].get(name)
        if t:
            for kind in ("health", "read"):
                s = t[kind]
                print(f"  {name:<12} {kind:<7} n={s['n']:>4} errors={s['errors']:>4} p50={s['p50_ms']:>8.1f} ms "
                      f"p99={s['p99_ms']:>8.1f} ms max={s['max_ms']:>8.1f} ms")
    for name in ("flood", "control"):
        f = out["trials"].get(name)
        if not f:
            continue
        print(f"  {name:<12} {f['request']}: quiet p50={f['quiet']['p50_ms']:.1f} ms, during flood p50={f['flood']['p50_ms']:.1f} ms "
              f"(x{f['p50_ratio']}), p99={f['flood']['p99_ms']:.1f} ms, errors={f['flood']['errors']}; "
              f"flood answers {f['flood_answers']}; CPU during the flood: server {f['server_cpu_s']} s "
              f"(gunicorn {f['gunicorn_cpu_s']}, heavy pool {f['heavy_pool_cpu_s']}, nginx {f['nginx_cpu_s']}), "
              f"flooding clients {f['flooders_cpu_s']} s")


if __name__ == "__main__":
    raise SystemExit(main())
