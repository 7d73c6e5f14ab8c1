"""Helpers for report, plan-view and overview tests: jobs submitted through the service, plan rows written directly.

Writing plan rows here keeps these tests independent of the solver; the planning service's own tests cover how
plans are made.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.enums import JobState, PlanStatus, Role, RunState
from app.models import Assignment, HardwareType, Plan, Region, Run
from app.services import auth, jobs
from tests.conftest import job_payload


@dataclass(frozen=True)
class Planned:
    job_id: int
    region: str
    hardware: str
    start: datetime
    hours: float
    energy_kwh: float
    cost: float
    carbon_kg: float
    run_now_cost: float | None = None
    run_now_carbon_kg: float | None = None


def submit(session: Session, slug: str, now: datetime, n: int = 1, **over: object) -> list[int]:
    tenant = auth.get_tenant(session, slug)
    p = auth.Principal(tenant.id, slug, 0, "test", Role.ADMIN, tenant.is_operator)
    items = []
    for i in range(n):
        item = job_payload(now, name=f"{slug}-{i}", **over)
        item["release_at"], item["deadline_at"] = now, now + timedelta(hours=24)  # the service takes datetimes
        items.append(item)
    _b, ids = jobs.submit_jobs(session, p, items, now=now)
    session.commit()
    return ids


def make_plan(session: Session, now: datetime, items: list[Planned], *, current: bool = True) -> Plan:
    """A stored plan with these assignments; it replaces the current plan when ``current``."""
    if current:
        session.execute(update(Plan).values(is_current=False))
    plan = Plan(horizon_start=now, horizon_end=now + timedelta(hours=72), slot_minutes=60, objective="cost",
                solver="fixture", status=PlanStatus.OPTIMAL, is_current=current, trigger="test", created_at=now)
    session.add(plan)
    session.flush()
    region_ids = dict(session.execute(select(Region.code, Region.id)).all())
    hw_ids = dict(session.execute(select(HardwareType.code, HardwareType.id)).all())
    for it in items:
        session.add(Assignment(
            plan_id=plan.id, job_id=it.job_id, region_id=region_ids[it.region], hardware_type_id=hw_ids[it.hardware],
            start_at=it.start, end_at=it.start + timedelta(hours=it.hours), energy_kwh=it.energy_kwh, cost=it.cost,
            carbon_kg=it.carbon_kg, run_now_energy_kwh=it.energy_kwh, run_now_cost=it.run_now_cost,
            run_now_carbon_kg=it.run_now_carbon_kg,
        ))
        job = session.get(jobs.Job, it.job_id)
        assert job is not None
        job.state = JobState.PLANNED
    session.commit()
    return plan


def finish_run(session: Session, job_id: int, start: datetime, hours: float, energy_kwh: float,
               cost: float | None = None, carbon_kg: float | None = None) -> Run:
    """A finished run with metered energy, linked to the job's current assignment."""
    a = session.scalar(select(Assignment).join(Plan).where(Assignment.job_id == job_id, Plan.is_current.is_(True)))
    run = Run(job_id=job_id, assignment_id=a.id if a else None, run_key=f"run-{job_id}", state=RunState.SUCCEEDED,
              runtime_job_id=f"local-{job_id}", started_at=start, finished_at=start + timedelta(hours=hours),
              energy_kwh=energy_kwh, energy_source="nvml", cost=cost, carbon_kg=carbon_kg)
    session.add(run)
    job = session.get(jobs.Job, job_id)
    assert job is not None
    job.state = JobState.SUCCEEDED
    session.commit()
    return run
