"""Helpers shared by the dispatch and task tests (no tests here): a plan written by hand, clusters, waiting.

Dispatch is tested against the real local runtime, so times are real: jobs are planned to start now.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.enums import JobState, PlanStatus, SeriesKind
from app.models import Assignment, HardwareType, Job, JobEvent, Plan, Region, Run
from app.services import fleet, market


def utcnow() -> datetime:
    return datetime.now(UTC)


def add_local_clusters(session: Session, base: Path) -> dict[str, str]:
    """A local cluster per region of ``small_fleet`` (de: h100 x4 + a100 x2, fi: a100 x2 + l40s x2)."""
    dirs = {}
    for region, gpus in (("de", {"h100": [0, 1, 2, 3], "a100": [4, 5]}), ("fi", {"a100": [0, 1], "l40s": [2, 3]})):
        state_dir = base / f"{region}-runtime"
        fleet.upsert_cluster(session, f"{region}-local", region, "local",
                             {"state_dir": str(state_dir), "gpus": gpus, "meter_interval_s": 0.2})  # fmt: skip
        dirs[region] = str(state_dir)
    session.commit()
    return dirs


def add_job(session: Session, tenant_id: int, *, command: str | None = "echo hello", gpus: int = 1,
            name: str = "job", **over: Any) -> Job:  # fmt: skip
    now = utcnow()
    job = Job(tenant_id=tenant_id, name=name, workload_class="training", gpu_count=gpus, reference_gpu_hours=1.0,
              reference_hardware="h100", release_at=now - timedelta(minutes=5), deadline_at=now + timedelta(hours=12),
              command=command, state=JobState.PENDING, env={})  # fmt: skip
    for key, value in over.items():
        setattr(job, key, value)
    session.add(job)
    session.flush()
    session.add(JobEvent(job_id=job.id, at=now, state="pending", message="submitted"))
    session.commit()
    return job


def write_plan(session: Session, placements: list[tuple[int, str, str, datetime, int]]) -> Plan:
    """Store a current plan: (job id, region code, hardware code, start, minutes) per assignment."""
    for old in session.scalars(select(Plan).where(Plan.is_current.is_(True))):
        old.is_current = False
    now = utcnow()
    plan = Plan(horizon_start=now, horizon_end=now + timedelta(hours=24), slot_minutes=60, objective="cost",
                solver="hand", trigger="test", status=PlanStatus.OPTIMAL, is_current=True)  # fmt: skip
    session.add(plan)
    session.flush()
    for job_id, region, hw, start, minutes in placements:
        region_id = session.scalar(select(Region.id).where(Region.code == region))
        hw_id = session.scalar(select(HardwareType.id).where(HardwareType.code == hw))
        session.add(Assignment(plan_id=plan.id, job_id=job_id, region_id=region_id, hardware_type_id=hw_id,
                               start_at=start, end_at=start + timedelta(minutes=minutes), energy_kwh=1.0, cost=0.1,
                               carbon_kg=0.1))  # fmt: skip
        job = session.get(Job, job_id)
        assert job is not None
        job.state = JobState.PLANNED
    session.commit()
    return plan


def add_market(session: Session, zone: str, price_per_mwh: float, carbon_g_per_kwh: float, hours: int = 3) -> None:
    """Flat price and carbon intensity from the previous hour on."""
    start = utcnow().replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    points = []
    for h in range(hours + 1):
        ts = start + timedelta(hours=h)
        points.append(market.Point(zone, SeriesKind.PRICE, ts, price_per_mwh, "EUR/MWh", "test"))
        points.append(market.Point(zone, SeriesKind.CARBON_INTENSITY, ts, carbon_g_per_kwh, "gCO2eq/kWh", "test"))
    market.store(session, points)
    session.commit()


def wait_for(check: Callable[[], Any], timeout_s: float = 20.0, every_s: float = 0.2) -> Any:
    """Call ``check`` until it returns something truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s (last value {value!r})")
        time.sleep(every_s)


def runs_of(session: Session, job_id: int) -> list[Run]:
    session.expire_all()
    return list(session.scalars(select(Run).where(Run.job_id == job_id).order_by(Run.id)))


def job_states(session: Session, job_id: int) -> list[str]:
    session.expire_all()
    return list(session.scalars(select(JobEvent.state).where(JobEvent.job_id == job_id).order_by(JobEvent.id)))
