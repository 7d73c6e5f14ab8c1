"""Slurm runtime: through the CLI (sbatch/squeue/sacct/scancel/scontrol) or slurmrestd (JWT, v0.0.38).

The run key is the job name, and the comment carries ``run_key;power_w_per_gpu=P;gpus=N`` so that energy
can be estimated without our database. Submission is idempotent across workers: a job is submitted held,
then among the jobs of that name the lowest id is kept and released and any other held twin is cancelled.

Tenants: Slurm lets a job read the batch script (hence the environment) of every job of its own user
(``scontrol write batch_script``), so one Slurm user is one trust domain. In CLI mode with the service running as
root, each tenant's jobs are submitted as that tenant's own unprivileged user (``runuser -u USER -- sbatch``,
``run_as``), with output in a 0700 directory of that user under ``workdir``; Slurm then refuses one tenant's job
the scripts of another's. A cluster can also be bound to one tenant (``tenant``), as it must be in REST mode, where
every job runs as the one user of the token.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar

from connectors.base import (
    TENANT_SCHEMA,
    Capacity,
    ConfigError,
    ConnectorError,
    EnergyReading,
    EnergySource,
    JobSpec,
    RunStatus,
    RuntimeState,
    check_tenant,
    estimate_energy,
    read_tail,
)
from connectors.slurm_users import check_run_as, tenant_user, tenant_workdir

__all__ = ["SlurmConnector", "map_state", "parse_gres"]

_STATES: Mapping[str, RunStatus] = {
    "PENDING": RunStatus.PENDING, "REQUEUED": RunStatus.PENDING, "REQUEUE_HOLD": RunStatus.PENDING,
    "REQUEUE_FED": RunStatus.PENDING, "RESV_DEL_HOLD": RunStatus.PENDING,
    "CONFIGURING": RunStatus.RUNNING, "RUNNING": RunStatus.RUNNING, "COMPLETING": RunStatus.RUNNING,
    "SUSPENDED": RunStatus.RUNNING, "STOPPED": RunStatus.RUNNING, "RESIZING": RunStatus.RUNNING,
    "SIGNALING": RunStatus.RUNNING, "STAGE_OUT": RunStatus.RUNNING,
    "COMPLETED": RunStatus.SUCCEEDED, "CANCELLED": RunStatus.CANCELLED,
    "FAILED": RunStatus.FAILED, "TIMEOUT": RunStatus.FAILED, "NODE_FAIL": RunStatus.FAILED,
    "OUT_OF_MEMORY": RunStatus.FAILED, "BOOT_FAIL": RunStatus.FAILED, "DEADLINE": RunStatus.FAILED,
    "PREEMPTED": RunStatus.FAILED, "SPECIAL_EXIT": RunStatus.FAILED, "REVOKED": RunStatus.CANCELLED,
}  # fmt: skip
_GRES = re.compile(r"gpu:([^:,()]+):(\d+)")
_KV = re.compile(r"(\w[\w/:]*)=(\S*)")
_HELD = "JobHeldUser"
_USABLE_NODE_STATES = ("IDLE", "MIXED", "ALLOCATED", "COMPLETING")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
#: What every Slurm job starts from, under its own ``env`` (Slurm adds its SLURM_* and GPU variables).
JOB_BASE_ENV = {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"}


def map_state(slurm_state: str) -> RunStatus:
    """Our status for a Slurm job state such as ``RUNNING`` or ``CANCELLED by 0``."""
    word = (slurm_state or "").split()[0].split("+")[0].upper() if slurm_state else ""
    return _STATES.get(word, RunStatus.UNKNOWN)


def parse_gres(text: str | None) -> dict[str, int]:
    """GPUs per GRES type from ``gpu:h100:4(S:0-1),gpu:a100:2`` or ``gpu:h100:1(IDX:0)`` [count]."""
    counts: dict[str, int] = {}
    for gres_type, count in _GRES.findall(text or ""):
        counts[gres_type] = counts.get(gres_type, 0) + int(count)
    return counts


def _parse_time(value: Any) -> datetime | None:
    """A Slurm time (ISO text printed with TZ=UTC, or UNIX seconds from slurmrestd) as UTC."""
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC) if value > 0 else None
    if not value or value in ("Unknown", "None", "N/A"):
        return None
    return datetime.fromisoformat(str(value)).replace(tzinfo=UTC)


def _parse_comment(comment: str | None) -> dict[str, str]:
    parts = (comment or "").split(";")
    fields = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
    return {"run_key": parts[0], **fields}


class SlurmConnector:
    """Jobs on one Slurm cluster; GRES types map to our hardware type codes through ``gres_types``."""

    kind: ClassVar[str] = "slurm"
    config_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "mode": {"type": "string", "enum": ["cli", "rest"], "default": "cli"},
            "slurm_conf": {"type": ["string", "null"], "default": None},
            "bin_dir": {"type": ["string", "null"], "default": None},
            "partition": {"type": ["string", "null"], "default": None},
            "account": {"type": ["string", "null"], "default": None},
            "gres_types": {"type": "object", "additionalProperties": {"type": "string"}, "default": {}},
            "workdir": {"type": "string", "default": "/tmp"},
            "rest_url": {"type": ["string", "null"], "default": None},
            "rest_user": {"type": ["string", "null"], "default": None},
            "rest_token": {"type": ["string", "null"], "default": None, "secret": True},
            "energy_from_accounting": {"type": "boolean", "default": False},
            "timeout_s": {"type": "number", "minimum": 0.1, "default": 15.0},
            "tenant": dict(TENANT_SCHEMA),
            # who jobs run as: "tenant" = each tenant's own user (CLI, service as root), "service" = the service's
            # account (CLI) or the token's user (REST): one trust domain; "auto" = "tenant" where it can work
            "run_as": {"type": "string", "enum": ["auto", "tenant", "service"], "default": "auto"},
            "tenant_users": {"type": "object", "additionalProperties": {"type": "string"}, "default": {}},
            "tenant_user_prefix": {"type": "string", "default": "gs-tenant-"},
            "create_users": {"type": "boolean", "default": True},
        },
    }

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.timeout_s = float(config["timeout_s"])
        #: hardware code -> GRES type, and back
        self.gres_of: dict[str, str] = {hw.lower(): gres for hw, gres in config["gres_types"].items()}
        self.hardware_of: dict[str, str] = {gres: hw for hw, gres in self.gres_of.items()}
        self.rest = None
        if config["mode"] == "rest":
            for name in ("rest_url", "rest_user", "rest_token"):
                if not config[name]:
                    raise ConfigError(f"config.{name}: required when mode is 'rest'", field=f"config.{name}",
                                      kind=self.kind)  # fmt: skip
            from connectors.slurm_rest import SlurmRestClient

            self.rest = SlurmRestClient(
                config["rest_url"], config["rest_user"], config["rest_token"], self.timeout_s
            )
        # the Slurm commands' environment: never the worker's (sbatch would hand it to the job), only what they need
        self._env = {"PATH": os.environ.get("PATH") or DEFAULT_PATH, "TZ": "UTC", "LANG": "C.UTF-8"}
        slurm_conf = config["slurm_conf"] or os.environ.get("SLURM_CONF")
        if slurm_conf:
            self._env["SLURM_CONF"] = slurm_conf
        self.run_as = check_run_as(config, self.kind)

    def user_of(self, tenant: str | None) -> str | None:
        """The OS/Slurm user that runs ``tenant``'s jobs, or None when they run as the service (``run_as``)."""
        return tenant_user(self.config, tenant) if self.run_as == "tenant" else None

    @classmethod
    def enabled(cls) -> bool:
        """Always registered: the CLI or slurmrestd is checked when the cluster is first called."""
        return True

    # -- protocol ------------------------------------------------------------------------------------------
    def capacity(self) -> Capacity:
        """GPUs per hardware type on nodes that take jobs, total and not allocated."""
        total: dict[str, int] = {}
        free: dict[str, int] = {}
        for node in self._nodes():
            gres, used = parse_gres(node["gres"]), parse_gres(node["gres_used"])
            usable = any(s in node["state"].upper() for s in _USABLE_NODE_STATES) and not any(
                bad in node["state"].upper() for bad in ("DRAIN", "DOWN", "FAIL")
            )
            for gres_type, count in gres.items():
                hw = self.hardware_of.get(gres_type, gres_type)
                total[hw] = total.get(hw, 0) + count
                free[hw] = free.get(hw, 0) + (max(0, count - used.get(gres_type, 0)) if usable else 0)
        return Capacity(gpus_total=total, gpus_free=free)

    def submit(self, spec: JobSpec) -> str:
        """Submit ``spec`` held, keep the lowest job id of its run key, release it; return that id."""
        if spec.command is None:
            raise ConfigError(f"run {spec.run_key}: Slurm needs a command", field="command", kind=self.kind)
        check_tenant(self.config, spec, self.kind)
        if self.find(spec.run_key) is None:
            self._submit_held(spec)
        return self._settle(spec.run_key)

    def find(self, run_key: str) -> str | None:
        """Lowest job id named ``run_key`` (controller first, then the job completion log)."""
        ids = [job["job_id"] for job in self._jobs_named(run_key)]
        return str(min(ids, key=int)) if ids else None

    def poll(self, runtime_job_id: str) -> RuntimeState:
        """State of a job from the controller, or the completion log once the controller forgot it."""
        job = self._job(runtime_job_id)
        if job is None:
            raise ConnectorError(f"Slurm job {runtime_job_id} is unknown to the cluster", retryable=False,
                                 kind=self.kind)  # fmt: skip
        status = map_state(job["job_state"])
        reason = job.get("state_reason") or ""
        return RuntimeState(
            runtime_job_id=runtime_job_id,
            status=status,
            started_at=job["start_time"] if status is not RunStatus.PENDING else None,
            finished_at=job["end_time"] if status.terminal else None,
            exit_code=job["exit_code"] if status.terminal else None,
            message="" if reason in ("None", "") else reason,
        )

    def cancel(self, runtime_job_id: str) -> None:
        """scancel the job; finished jobs are left as they are."""
        if self.rest is not None:
            self.rest.cancel(runtime_job_id)
            return
        self._run("scancel", runtime_job_id, ok_errors=("already completing or completed", "Invalid job id"))

    def energy(self, runtime_job_id: str) -> EnergyReading | None:
        """Accounting energy (ConsumedEnergyRaw) when configured and recorded, else the profile estimate."""
        job = self._job(runtime_job_id)
        if job is None or map_state(job["job_state"]) is RunStatus.PENDING or job["start_time"] is None:
            return None
        if self.config["energy_from_accounting"] and self.rest is None:
            out = self._run("sacct", "-X", "-n", "-P", "-j", runtime_job_id, "-o", "ConsumedEnergyRaw,ElapsedRaw",
                            ok_errors=("",))  # fmt: skip
            fields = out.strip().splitlines()[0].split("|") if out.strip() else []
            if len(fields) == 2 and fields[0].isdigit() and int(fields[0]) > 0 and fields[1].isdigit():
                joules, seconds = int(fields[0]), max(int(fields[1]), 1)
                return EnergyReading(joules / 3.6e6, joules / seconds, EnergySource.ACCOUNTING)
        meta = _parse_comment(job.get("comment"))
        finished = job["end_time"] if map_state(job["job_state"]).terminal else datetime.now(UTC)
        return estimate_energy(float(meta.get("power_w_per_gpu", 0.0)), int(meta.get("gpus", 0)),
                               job["start_time"], finished)  # fmt: skip

    # -- submission ----------------------------------------------------------------------------------------
    def log(self, runtime_job_id: str, max_bytes: int) -> bytes | None:
        """Tail of the job's output file, ``<workdir>[/<tenant user>]/<job name>-<job id>.out`` (read where the
        workdir is shared with this host, as on the one-node clusters; None when the file is not reachable here)."""
        job = self._job(runtime_job_id)
        if job is None or not job.get("name"):
            return None
        if job.get("std_out"):
            return read_tail(job["std_out"], max_bytes)
        name = f"{job['name']}-{runtime_job_id}.out"
        for path in (f"{self.config['workdir']}/{name}", *self._tenant_dirs(name)):
            text = read_tail(path, max_bytes)
            if text is not None:
                return text
        return None

    def _tenant_dirs(self, name: str) -> list[str]:
        """``name`` in each directory of a tenant user under the workdir (a job the controller has forgotten)."""
        try:
            return [os.path.join(e.path, name) for e in os.scandir(self.config["workdir"])
                    if e.is_dir(follow_symlinks=False)]  # fmt: skip
        except OSError:
            return []

    def _script(self, spec: JobSpec) -> str:
        """The batch script: it sets the job's whole environment (the submission exports none: ``--export=NONE``)."""
        env = {**JOB_BASE_ENV, **spec.env, "GRIDSHIFT_RUN_KEY": spec.run_key}
        exports = "".join(f"export {k}={_sh_quote(v)}\n" for k, v in env.items() if _is_name(k))
        return f"#!/bin/sh\n{exports}{spec.command}\n"

    def _gres(self, spec: JobSpec) -> str | None:
        if spec.gpu_count == 0:
            return None
        return f"{self.gres_of.get(spec.hardware.lower(), spec.hardware.lower())}:{spec.gpu_count}"

    def _submit_held(self, spec: JobSpec) -> None:
        comment = f"{spec.run_key};power_w_per_gpu={spec.power_w_per_gpu:g};gpus={spec.gpu_count}"
        gres = self._gres(spec)
        begin_s = math.ceil((spec.begin_at - datetime.now(UTC)).total_seconds()) if spec.begin_at else 0
        if self.rest is not None:
            job: dict[str, Any] = {
                "name": spec.run_key, "comment": comment, "hold": True, "time_limit": spec.time_limit_minutes,
                "environment": {**JOB_BASE_ENV, "GRIDSHIFT_RUN_KEY": spec.run_key},  # the job's env: in the script
                "current_working_directory": self.config["workdir"],
                "standard_output": f"{self.config['workdir']}/%x-%j.out",
            }  # fmt: skip
            if gres:
                job["gpus_per_node"] = gres
            if begin_s > 0:
                job["begin_time"] = f"now+{begin_s}"  # slurmrestd v0.0.38 parses it like sbatch --begin
            for key in ("partition", "account"):
                if self.config[key]:
                    job[key] = self.config[key]
            self.rest.submit(self._script(spec), job)
            return
        user = self.user_of(spec.tenant)
        workdir = tenant_workdir(self.config, user, self.kind) if user else self.config["workdir"]
        args = ["sbatch", "--parsable", "--hold", "--export=NONE", f"--job-name={spec.run_key}", f"--comment={comment}",
                f"--time={spec.time_limit_minutes}", f"--chdir={workdir}", f"--output={workdir}/%x-%j.out"]  # fmt: skip
        if gres:
            args.append(f"--gres=gpu:{gres}")
        if begin_s > 0:
            args.append(f"--begin=now+{begin_s}")
        args += [f"--{key}={self.config[key]}" for key in ("partition", "account") if self.config[key]]
        self._run(*args, stdin=self._script(spec), as_user=user)

    def _settle(self, run_key: str) -> str:
        """Keep the lowest job id of ``run_key``: cancel held twins, release the keeper if held."""
        jobs = sorted(self._jobs_named(run_key), key=lambda j: int(j["job_id"]))
        if not jobs:
            raise ConnectorError(
                f"Slurm lost the job just submitted for {run_key}", retryable=True, kind=self.kind
            )
        keeper, twins = jobs[0], jobs[1:]
        for twin in twins:
            if map_state(twin["job_state"]) is RunStatus.PENDING:
                self.cancel(twin["job_id"])
        if map_state(keeper["job_state"]) is RunStatus.PENDING and keeper.get("state_reason") == _HELD:
            if self.rest is not None:
                self.rest.release(keeper["job_id"])
            else:
                # a keeper that started or ended meanwhile needs no release; any other failure is raised (retryable
                # when the controller is unreachable), so the submit is retried and settles again, never left held
                self._run("scontrol", "release", keeper["job_id"],
                          ok_errors=("no longer pending", "already completing or completed"))  # fmt: skip
        return str(keeper["job_id"])

    # -- reading -------------------------------------------------------------------------------------------
    def _jobs_named(self, run_key: str) -> list[dict[str, Any]]:
        if self.rest is not None:
            return [self._from_rest(j) for j in self.rest.jobs_named(run_key)]
        out = self._run("squeue", "--states=all", "-h", "-n", run_key, "-o", "%i|%j|%T|%r")
        jobs: list[dict[str, Any] | None] = []
        for line in out.splitlines():
            job_id, name, state, reason = [*line.split("|"), "", "", "", ""][:4]
            jobs.append({"job_id": job_id, "name": name, "job_state": state, "state_reason": reason})
        if not jobs:  # the controller forgot it (MinJobAge): ask the job completion log
            rows = self._sacct(["--name", run_key], fields="JobID,JobName")  # -c may ignore --name: filter
            jobs = [self._job(row.split("|")[0]) for row in rows if row.split("|")[1:2] == [run_key]]
        return [j for j in jobs if j is not None and j["name"] == run_key]

    def _job(self, job_id: str) -> dict[str, Any] | None:
        if self.rest is not None:
            raw = self.rest.job(job_id)
            return self._from_rest(raw) if raw else None
        out = self._run("scontrol", "show", "job", "-o", job_id, ok_errors=("Invalid job id",))
        if out.strip():
            kv = dict(_KV.findall(out.splitlines()[0]))
            return self._normalize(
                kv.get("JobId"),
                kv.get("JobName"),
                kv.get("JobState"),
                kv.get("Reason"),
                kv.get("StartTime"),
                kv.get("EndTime"),
                kv.get("ExitCode"),
                kv.get("Comment"),
                kv.get("StdOut"),
            )
        rows = self._sacct(["-j", job_id], fields="JobID,JobName,State,Start,End,ExitCode")
        rows = [row for row in rows if row.split("|")[0] == job_id]
        if not rows:
            return None
        jid, name, state, start, end, exit_code = (rows[-1].split("|") + [""] * 6)[:6]
        return self._normalize(jid, name, state, None, start, end, exit_code, None)

    def _sacct(self, selector: list[str], fields: str = "JobID") -> list[str]:
        """Rows of the job completion log. A failed sacct is raised, retryable: only an answer with no row
        says that a job is gone (a run whose job is gone is marked lost and dispatched again)."""
        try:
            out = self._run("sacct", "-c", "-n", "-P", *selector, "-o", fields)
        except ConnectorError as exc:
            if exc.retryable:
                raise
            raise ConnectorError(f"{exc} (the job completion log could not be read)", retryable=True,
                                 kind=self.kind) from exc  # fmt: skip
        return [line for line in out.splitlines() if line and "." not in line.split("|")[0]]

    @staticmethod
    def _normalize(job_id, name, state, reason, start, end, exit_code, comment, std_out=None) -> dict[str, Any]:
        code: int | None = None
        if exit_code not in (None, ""):
            number, _, signal = str(exit_code).partition(":")
            code = -int(signal) if signal and int(signal) else int(number)
        return {"job_id": str(job_id), "name": name, "job_state": state or "", "state_reason": reason,
                "start_time": _parse_time(start), "end_time": _parse_time(end), "exit_code": code,
                "comment": comment, "std_out": std_out if std_out and "%" not in std_out else None}  # fmt: skip

    def _from_rest(self, raw: dict[str, Any]) -> dict[str, Any]:
        code = raw.get("exit_code")
        if isinstance(code, int) and code > 255:  # a raw wait status
            code = code >> 8
        job = self._normalize(raw.get("job_id"), raw.get("name"), raw.get("job_state"), raw.get("state_reason"),
                              raw.get("start_time"), raw.get("end_time"), None, raw.get("comment"),
                              raw.get("standard_output"))  # fmt: skip
        job["exit_code"] = code
        return job

    def _nodes(self) -> list[dict[str, str]]:
        if self.rest is not None:
            return [{"gres": n.get("gres", ""), "gres_used": n.get("gres_used", ""), "state": n.get("state", "")}
                    for n in self.rest.nodes()]  # fmt: skip
        out = self._run("scontrol", "show", "node", "-d", "-o")
        nodes = []
        for line in out.splitlines():
            kv = dict(_KV.findall(line))
            if kv:
                nodes.append({"gres": kv.get("Gres", ""), "gres_used": kv.get("GresUsed", ""),
                              "state": kv.get("State", "")})  # fmt: skip
        return nodes

    def _run(self, *args: str, stdin: str | None = None, ok_errors: tuple[str, ...] = (),
             as_user: str | None = None) -> str:  # fmt: skip
        """Run a Slurm command with this cluster's SLURM_CONF and TZ=UTC (as ``as_user`` through ``runuser`` when
        given); wrap failures in ConnectorError."""
        binary = os.path.join(self.config["bin_dir"], args[0]) if self.config["bin_dir"] else args[0]
        argv = [binary, *args[1:]]
        if as_user:
            argv = ["runuser", "-u", as_user, "--", *argv]
        try:
            done = subprocess.run(argv, input=stdin, env=self._env, capture_output=True, text=True,
                                  timeout=self.timeout_s)  # fmt: skip
        except FileNotFoundError as exc:
            raise ConnectorError(
                f"Slurm command {binary!r} not found", retryable=False, kind=self.kind
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise ConnectorError(f"{args[0]} timed out after {self.timeout_s} s", retryable=True,
                                 kind=self.kind) from exc  # fmt: skip
        if done.returncode != 0:
            err = done.stderr.strip()
            if any(marker in err for marker in ok_errors):
                return done.stdout
            retryable = any(s in err for s in ("Unable to contact", "Socket timed out", "Connection refused",
                                                   "Zero Bytes", "Communication connection failure"))  # fmt: skip
            raise ConnectorError(f"{' '.join(args[:3])} failed: {err}", retryable=retryable, kind=self.kind)
        return done.stdout


def _is_name(key: str) -> bool:
    return re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) is not None


def _sh_quote(value: str) -> str:
    return "'" + value.replace("'", "'\"'\"'") + "'"
