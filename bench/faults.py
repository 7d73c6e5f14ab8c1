"""Fault injection for dispatch: no job may be lost or run twice.

Real processes throughout: a private Redis (broker) and a private PostgreSQL cluster (database) on ports
8600-8649, Celery worker processes (prefork, acks_late), the local runtime and, for the controller trials, a
one-node Slurm cluster (tests/runtimes/slurm.py; root and Debian's slurm-wlm needed). This process plays
Celery beat (a tick and a sync every second) and a stand-in planner that plans every pending job to start
now (the workers' re-plan task is a no-op here, so the planner's own timing does not blur the results).

Every job's command appends its job id to a marker file, so executions are counted at the source:

* **duplicated**: executions beyond the first, summed over jobs;
* **lost**: jobs that, when the trial ends, are neither terminal (succeeded/failed/cancelled) nor back in
  planning, or that are recorded ``succeeded`` without having run.

Faults: ``kill9`` (kill -9 of the whole worker or of one pool child while a run is on the runtime but not
yet recorded in the database: alternately once the runtime accepted it and while it is being launched), ``redis`` (``shutdown nosave`` and restart while runs are in flight), ``redis_task`` (the same while
a worker is executing a dispatch task: the submit takes 4 s and Redis is down for 1 s of it, so the worker has
reconnected when the task ends and acks; even trials kill -9 Redis, odd ones shut it down; celery 5.7 / kombu 5.7 workers died of it, see app/celery_app.py),
``postgres``
(``pg_ctl stop -m fast`` and start), ``slurmctld`` (controller down ``--slurm-down-s`` seconds, 60 by
default), ``errors`` (a connector raising retryable errors on 30 % of calls, 30 % of submits failing after
the job landed, 10 % refused outright).

Every row also says whether the worker was still running after the trial (``worker_alive``); a dead worker is
counted (``worker_deaths``) and started again for the next trial.

Usage::

    python bench/faults.py [--kill9 15] [--redis 10] [--redis-task 6] [--postgres 10] [--slurmctld 5] [--errors 12]
                           [--redis-port 8601] [--pg-port 8602] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


from connectors.base import ConnectorError, JobSpec
from connectors.local import LocalConnector
from connectors.registry import register, validate_config

REDIS_PORT, PG_PORT = 8601, 8602
JOBS_PER_TRIAL = 3
T = TypeVar("T")
TERMINAL = {"succeeded", "failed", "cancelled"}


@register
class FaultyLocalConnector:
    """The local runtime behind injected faults (configured per cluster, so per trial)."""

    kind: ClassVar[str] = "faulty-local"
    config_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            **LocalConnector.config_schema["properties"],
            "error_rate": {"type": "number", "default": 0.0},
            "after_submit_error_rate": {"type": "number", "default": 0.0},
            "refuse_rate": {"type": "number", "default": 0.0},
            "submit_delay_s": {"type": "number", "default": 0.0},
        },
    }

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        local = {k: v for k, v in config.items() if k in LocalConnector.config_schema["properties"]}
        self.inner = LocalConnector(validate_config(LocalConnector.config_schema, local))

    @classmethod
    def enabled(cls) -> bool:
        return True

    def _maybe_fail(self, op: str) -> None:
        if random.random() < self.config["error_rate"]:
            raise ConnectorError(f"injected {op} error", retryable=True, kind=self.kind)

    def capacity(self):  # type: ignore[no-untyped-def]
        return self.inner.capacity()

    def submit(self, spec: JobSpec) -> str:
        if random.random() < self.config["refuse_rate"]:
            raise ConnectorError(f"injected refusal of {spec.run_key}", retryable=False, kind=self.kind)
        self._maybe_fail("submit")
        runtime_id = self.inner.submit(spec)
        time.sleep(self.config["submit_delay_s"])  # the window in which a worker dies "mid-dispatch"
        if random.random() < self.config["after_submit_error_rate"]:
            raise ConnectorError(f"injected lost response for {spec.run_key}", retryable=True, kind=self.kind)
        return runtime_id

    def find(self, run_key: str) -> str | None:
        self._maybe_fail("find")
        return self.inner.find(run_key)

    def poll(self, runtime_job_id: str):  # type: ignore[no-untyped-def]
        self._maybe_fail("poll")
        return self.inner.poll(runtime_job_id)

    def cancel(self, runtime_job_id: str) -> None:
        self.inner.cancel(runtime_job_id)

    def energy(self, runtime_job_id: str):  # type: ignore[no-untyped-def]
        return self.inner.energy(runtime_job_id)


def __getattr__(name: str) -> Any:
    """``celery -A bench.faults:celery_app worker``: the app, with the re-plan task made a no-op."""
    if name != "celery_app":
        raise AttributeError(name)
    import app.tasks.planning as planning
    from app.worker import celery_app

    planning.run_planning = lambda session, cfg, trigger: {"trigger": trigger, "skipped": "bench planner"}
    return celery_app


# --- the bench ---------------------------------------------------------------------------------------------
class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        from bench.dispatch_env import PrivatePostgres, PrivateRedis, temp_base

        self.args = args
        self.base = temp_base("gs-faults-")
        self.redis = PrivateRedis(args.redis_port, self.base)
        self.pg = PrivatePostgres(args.pg_port, self.base / "pg")
        self.lab: Any = None
        self.worker: Any = None
        self.rows: list[dict[str, Any]] = []
        self._last_beat = 0.0

    # setup / teardown
    def start(self) -> None:
        from app import create_app, migrate
        from app.config import Settings
        from bench.dispatch_env import Worker, worker_env

        (self.base / "pg").mkdir()
        self.redis.start()
        self.pg.start()
        env = {"GRIDSHIFT_DATABASE_URL": self.pg.url, "GRIDSHIFT_BROKER_URL": self.redis.url,
               "GRIDSHIFT_VAR_DIR": str(self.base / "var"), "GRIDSHIFT_SECRET_KEY": "bench",
               "GRIDSHIFT_DISPATCH_INTERVAL_S": "2", "GRIDSHIFT_CLAIM_STALE_S": "8",
               "GRIDSHIFT_VISIBILITY_TIMEOUT_S": "6", "GRIDSHIFT_SYNC_INTERVAL_S": "1"}  # fmt: skip
        self.settings = Settings.from_env(env)
        migrate.upgrade(self.settings)
        self.flask = create_app(self.settings)
        self.celery = self.flask.extensions["celery"]
        self.sessions = self.flask.extensions["gridshift"].sessions
        self.worker = Worker(worker_env(env), self.base / "worker.log", app_module="bench.faults:celery_app")
        self.worker.start()
        if self.args.slurmctld:
            from tests.runtimes.slurm import SlurmLab

            self.lab = SlurmLab({"gs-faults": {"h100": 8}}, rest=False)
            self.lab.start()
        self._seed()

    def stop(self) -> None:
        for part in (self.worker, self.lab, self.redis, self.pg):
            if part is not None:
                try:
                    part.stop()
                except Exception as exc:  # keep stopping the others
                    print(f"stopping {type(part).__name__}: {exc}", file=sys.stderr)
        if not self.args.keep:
            shutil.rmtree(self.base, ignore_errors=True)

    def _seed(self) -> None:
        from app.services import auth, fleet

        with self.sessions() as s:
            fleet.upsert_hardware(s, "h100", dict(vendor="nvidia", model="H100", memory_gb=80, tdp_w=700, idle_w=90,
                                                  relative_throughput={"default": 1.0}))  # fmt: skip
            for code in ("r1", "r2", "sl"):
                fleet.upsert_region(s, code, dict(name=code, zone=code.upper(), power_budget_kw=1000, pue=1.1))
                fleet.set_inventory(s, code, "h100", 8)
            for code in ("r1", "r2"):
                self._local_config(s, code, {})
            if self.lab is not None:
                fleet.upsert_cluster(s, "sl-slurm", "sl", "slurm", self.lab.clusters["gs-faults"].connector_config("cli"))
            self.tenant_id = auth.create_tenant(s, "bench").id
            s.commit()

    def _local_config(self, session, region: str, faults: dict[str, float]) -> None:  # type: ignore[no-untyped-def]
        from app.services import fleet

        config = {"state_dir": str(self.base / f"{region}-runtime"), "gpus": {"h100": list(range(8))},
                  "meter_interval_s": 0.5, **faults}  # fmt: skip
        fleet.upsert_cluster(session, f"{region}-local", region, "faulty-local", config)

    # one trial
    def trial(self, kind: str, index: int) -> dict[str, Any]:
        faults = {"submit_delay_s": {"kill9": 1.5, "redis_task": 4.0}.get(kind, 0.5)}
        if kind == "errors":
            faults.update(error_rate=0.3, after_submit_error_rate=0.3, refuse_rate=0.1)
        with self.sessions() as s:
            for region in ("r1", "r2"):
                self._local_config(s, region, faults)
            s.commit()
        marker = self.base / f"trial-{kind}-{index}.log"
        marker.touch()
        marker.chmod(0o666)
        job_ids = self._add_jobs(kind, marker)
        t0 = time.monotonic()
        self._inject(kind, index, job_ids)
        limit_s = 90 + (self.args.slurm_down_s if kind == "slurmctld" else 0)
        while time.monotonic() - t0 < limit_s and not self._all_terminal(job_ids):
            self._beat()
            time.sleep(1.0)
        row = self._score(kind, index, job_ids, marker, time.monotonic() - t0)
        row["worker_alive"] = self.worker.proc is not None and self.worker.proc.poll() is None
        if not row["worker_alive"]:
            self.worker.start()  # only an outside restart brings a dead worker back
        return row

    def _add_jobs(self, kind: str, marker: Path) -> list[int]:
        from app.models import Job, JobEvent

        now = datetime.now(UTC)
        regions = ["sl", "r1"] if kind == "slurmctld" else ["r1", "r2"]
        # redis_task: one job, so that one dispatch task executes while the worker's other pool slot is free and
        # its consumer is waiting on Redis (BRPOP) when Redis goes away: the case that killed workers
        n_jobs = 1 if kind == "redis_task" else JOBS_PER_TRIAL
        with self.sessions() as s:
            jobs = [Job(tenant_id=self.tenant_id, name=f"{kind}-{i}", workload_class="training", gpu_count=1,
                        reference_gpu_hours=0.1, reference_hardware="h100", release_at=now,
                        deadline_at=now + timedelta(hours=1), allowed_regions=regions, command="true",
                        state="pending", env={}) for i in range(n_jobs)]  # fmt: skip
            s.add_all(jobs)
            s.flush()
            for job in jobs:
                job.command = f"echo {job.id} >> {marker}; sleep 1"
                s.add(JobEvent(job_id=job.id, at=now, state="pending", message="bench"))
            s.commit()
            return [j.id for j in jobs]

    def _inject(self, kind: str, index: int, job_ids: list[int]) -> None:
        from bench.dispatch_env import wait_until

        if kind == "errors":
            return
        if kind == "kill9":
            # Wait until the runtime holds a job whose run the database still shows as dispatching.
            # Even-numbered pairs kill once the supervisor runs, the others while it is being launched.
            launched = index % 4 < 2
            wait_until(lambda: self._beat_then(self._landed_unrecorded(job_ids, launched)), 30, every_s=0.05,
                       what="a run submitted but not yet recorded")  # fmt: skip
            self.worker.kill9(whole=index % 2 == 0)
            if index % 2 == 0:
                self.worker.start()
            return
        wait_until(lambda: self._beat_then(self._any_run(job_ids)), 30, every_s=0.1, what="a claimed run")
        if kind == "redis_task":
            # the dispatch task is inside the connector's 4 s submit: Redis goes away under the executing task
            wait_until(lambda: self._beat_then(self._landed_unrecorded(job_ids, False)), 30, every_s=0.05,
                       what="a dispatch task executing a submit")  # fmt: skip
            if index % 2 == 0:  # Redis crashes: its sockets close at once, a reconnect is refused at once
                assert self.redis.proc is not None
                self.redis.proc.kill()
                self.redis.proc.wait(timeout=10)
                time.sleep(1.0)
                self.redis.start()
            else:  # shutdown nosave: clients are dropped first, and a quick reconnect may still get in
                self.redis.restart(down_s=1.0)
        elif kind == "redis":
            self.redis.restart(down_s=1.0)
        elif kind == "postgres":
            self.pg.restart(down_s=1.0)
        elif kind == "slurmctld":
            self._slurmctld_down(self.args.slurm_down_s)

    def _slurmctld_down(self, down_s: float) -> None:
        import os
        import signal

        from tests.runtimes.slurm import _sbin

        cluster = self.lab.clusters["gs-faults"]
        pid = cluster.pids["slurmctld"]
        os.kill(pid, signal.SIGTERM)
        from bench.dispatch_env import wait_until

        wait_until(lambda: not Path(f"/proc/{pid}").exists(), 30, what="slurmctld stopped")
        end = time.monotonic() + down_s
        while time.monotonic() < end:
            self._beat()
            time.sleep(1.0)
        subprocess.run([_sbin("slurmctld"), "-i"], env={**os.environ, **cluster.env}, check=True,
                       capture_output=True, timeout=30)  # fmt: skip
        cluster.pids["slurmctld"] = int(wait_until(lambda: (cluster.base_dir / "slurmctld.pid").read_text().strip()
                                                   if (cluster.base_dir / "slurmctld.pid").exists() else None, 15,
                                                   what="slurmctld pid"))  # fmt: skip

    # the beat and the stand-in planner
    def _beat_then(self, value: T) -> T:
        """Beat (at most once a second), then hand ``value`` back: a wait_until check that keeps the beat going."""
        self._beat()
        return value

    def _beat(self) -> None:
        if time.monotonic() - self._last_beat < 1.0:
            return
        self._last_beat = time.monotonic()
        for name in ("gridshift.dispatch.tick", "gridshift.dispatch.sync"):
            with contextlib.suppress(Exception):
                self.celery.send_task(name, expires=5)
        with contextlib.suppress(Exception):
            self._plan_pending()

    def _plan_pending(self) -> None:
        from sqlalchemy import select

        from app.enums import JobState, PlanStatus
        from app.models import Assignment, HardwareType, Job, Plan, Region

        with self.sessions() as s:
            pending = list(s.scalars(select(Job).where(Job.state == JobState.PENDING).with_for_update(skip_locked=True)))
            if not pending:
                return
            now = datetime.now(UTC)
            for old in s.scalars(select(Plan).where(Plan.is_current.is_(True))):
                old.is_current = False
            plan = Plan(horizon_start=now, horizon_end=now + timedelta(hours=1), slot_minutes=60, objective="cost",
                        solver="bench", trigger="bench", status=PlanStatus.OPTIMAL, is_current=True)  # fmt: skip
            s.add(plan)
            s.flush()
            hw = s.scalar(select(HardwareType.id).where(HardwareType.code == "h100"))
            for job in pending:
                region = s.scalar(select(Region.id).where(Region.code == (job.allowed_regions or ["r1"])[0]))
                s.add(Assignment(plan_id=plan.id, job_id=job.id, region_id=region, hardware_type_id=hw, start_at=now,
                                 end_at=now + timedelta(minutes=5), energy_kwh=0, cost=0, carbon_kg=0))  # fmt: skip
                job.state = JobState.PLANNED
            s.commit()

    # observations
    def _runs(self, job_ids: list[int]) -> list[Any]:
        from sqlalchemy import select

        from app.models import Run

        with self.sessions() as s:
            return list(s.scalars(select(Run).where(Run.job_id.in_(job_ids))))

    def _any_run(self, job_ids: list[int]) -> bool:
        return bool(self._runs(job_ids))

    def _landed_unrecorded(self, job_ids: list[int], launched: bool) -> bool:
        """A run the database shows unsubmitted while the runtime has its directory (``launched``: and a
        running supervisor, i.e. the runtime accepted it)."""
        for run in self._runs(job_ids):
            if run.state.value != "dispatching" or run.runtime_job_id is not None:
                continue
            for region in ("r1", "r2"):
                run_dir = self.base / f"{region}-runtime" / "runs" / run.run_key
                state = run_dir / "state.json"
                if run_dir.is_dir() and (not launched or (state.exists() and "supervisor_pid" in state.read_text())):
                    return True
        return False

    def _states(self, job_ids: list[int]) -> dict[int, str]:
        from sqlalchemy import select

        from app.models import Job

        try:
            with self.sessions() as s:
                return {j.id: j.state.value for j in s.scalars(select(Job).where(Job.id.in_(job_ids)))}
        except Exception:
            return {}

    def _all_terminal(self, job_ids: list[int]) -> bool:
        states = self._states(job_ids)
        return len(states) == len(job_ids) and all(v in TERMINAL for v in states.values())

    def _score(self, kind: str, index: int, job_ids: list[int], marker: Path, seconds: float) -> dict[str, Any]:
        states = self._states(job_ids)
        runs_by_job = Counter(r.job_id for r in self._runs(job_ids))
        executions = Counter(int(line) for line in marker.read_text().split())
        lost = sum(1 for j in job_ids if states.get(j) not in TERMINAL | {"pending", "planned"}
                   or (states.get(j) == "succeeded" and executions[j] == 0))  # fmt: skip
        duplicated = sum(max(0, executions[j] - 1) for j in job_ids)
        return {"kind": kind, "trial": index, "jobs": len(job_ids), "lost": lost, "duplicated": duplicated,
                "succeeded": sum(1 for j in job_ids if states.get(j) == "succeeded"),
                "failed": sum(1 for j in job_ids if states.get(j) == "failed"),
                "replanned": sum(max(0, runs_by_job[j] - 1) for j in job_ids), "seconds": round(seconds, 1)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Dispatch fault injection: lost and duplicated runs")
    for kind, default in (("kill9", 15), ("redis", 10), ("redis_task", 6), ("postgres", 10), ("slurmctld", 5),
                          ("errors", 12)):  # fmt: skip
        parser.add_argument(f"--{kind.replace('_', '-')}", type=int, default=default, dest=kind,
                            help=f"trials of {kind} (default {default})")
    parser.add_argument("--redis-port", type=int, default=REDIS_PORT)
    parser.add_argument("--pg-port", type=int, default=PG_PORT)
    parser.add_argument("--slurm-down-s", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, markers)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    random.seed(args.seed)
    bench = Bench(args)
    try:
        bench.start()
        for kind in ("kill9", "redis", "redis_task", "postgres", "errors", "slurmctld"):
            for index in range(getattr(args, kind)):
                row = bench.trial(kind, index)
                bench.rows.append(row)
                print(f"  {kind:<10} #{index:<2} lost={row['lost']} dup={row['duplicated']} ok={row['succeeded']}/"
                      f"{row['jobs']} failed={row['failed']} replanned={row['replanned']} {row['seconds']} s"
                      f"{'' if row['worker_alive'] else ' WORKER DIED'}",
                      file=sys.stderr, flush=True)  # fmt: skip
    finally:
        bench.stop()
    return report(bench.rows, args.json)


def report(rows: list[dict[str, Any]], as_json: bool) -> int:
    print(f"{'fault':<10} {'trials':>6} {'jobs':>5} {'lost':>5} {'dup':>4} {'ok':>4} {'failed':>6} {'replanned':>9} {'max s':>6} {'deaths':>6}")
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    for kind in [*kinds, "all"]:
        sel = [r for r in rows if kind in ("all", r["kind"])]
        if not sel:
            continue
        tot = {k: sum(r[k] for r in sel) for k in ("jobs", "lost", "duplicated", "succeeded", "failed", "replanned")}
        print(f"{kind:<10} {len(sel):>6} {tot['jobs']:>5} {tot['lost']:>5} {tot['duplicated']:>4} {tot['succeeded']:>4} "
              f"{tot['failed']:>6} {tot['replanned']:>9} {max(r['seconds'] for r in sel):>6} "
              f"{sum(1 for r in sel if not r.get('worker_alive', True)):>6}")  # fmt: skip
    summary = {"trials": len(rows), "jobs": sum(r["jobs"] for r in rows), "lost": sum(r["lost"] for r in rows),
               "duplicated": sum(r["duplicated"] for r in rows), "succeeded": sum(r["succeeded"] for r in rows),
               "failed": sum(r["failed"] for r in rows),
               "worker_deaths": sum(1 for r in rows if not r.get("worker_alive", True)),
               "by_kind": {k: sum(1 for r in rows if r["kind"] == k) for k in dict.fromkeys(r["kind"] for r in rows)}}  # fmt: skip
    if as_json:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
