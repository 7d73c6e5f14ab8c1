"""Two tenants and an operator on a small fleet, with data of every kind for tenant alpha.

Alpha's rows carry distinctive markers (ids from 7_770_001, names containing ``alpha-secret``) so that a leak
into any of bravo's responses can be detected by a plain substring search.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.config import Settings
from app.enums import JobState, PlanStatus, Role, RunState, WorkloadClass
from app.models import (
    ApiToken,
    Assignment,
    Cluster,
    EnergyContract,
    HardwareType,
    Job,
    JobEvent,
    Plan,
    Region,
    Run,
    UnplannedJob,
)
from app.services import fleet
from tests.conftest import empty_tables, make_token
from tests.runtimes.fixtures import ray_head, slurm_clusters  # noqa: F401 - fixtures (tests/security/test_run_isolation.py)

ALPHA_BASE_ID = 7_770_001
MISSING_ID = 7_779_999
SHARED_BASE_ID = 8_880_001  # fleet-wide rows (plan, cluster): not alpha's secrets
MARKERS_TEXT = ("alpha-secret", "alpha-corp")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class World:
    """Tokens of every role and the ids of alpha's rows."""

    tokens: dict[str, str]  # "alpha-admin", "bravo-member", "ops-admin", ...
    alpha_ids: dict[str, list[int]] = field(default_factory=dict)  # "job", "plan", "run", "token", ...
    alpha_batch: str = "alphasecretbatch0000000000000001"

    @property
    def markers(self) -> tuple[str, ...]:
        # plans and clusters are fleet-wide (shared by every tenant); everything else is alpha's own
        own = [v for k, v in self.alpha_ids.items() if k not in ("plan", "cluster")]
        ids = [str(i) for v in own for i in v if i >= ALPHA_BASE_ID]
        return (*MARKERS_TEXT, self.alpha_batch, *ids)


def _tokens(session: Session) -> dict[str, str]:
    out = {}
    for slug in ("alpha-corp", "bravo-inc"):
        for role in Role:
            out[f"{slug.split('-')[0]}-{role.value}"] = make_token(session, slug, role)
    out["ops-admin"] = make_token(session, "ops", Role.ADMIN, operator=True)
    out["ops-member"] = make_token(session, "ops", Role.MEMBER, operator=True)
    return out


def add_shared_rows(session: Session, now: datetime) -> tuple[Cluster, Plan]:
    """The fleet-wide rows every tenant's work lands in: a cluster in ``de`` and the current plan (made once)."""
    cluster, plan = session.get(Cluster, SHARED_BASE_ID), session.get(Plan, SHARED_BASE_ID)
    if cluster is not None and plan is not None:
        return cluster, plan
    de = session.scalar(select(Region).where(Region.code == "de"))
    cluster = Cluster(id=SHARED_BASE_ID, name="de-local", region=de, kind="local", config={})
    plan = Plan(
        id=SHARED_BASE_ID,
        horizon_start=now,
        horizon_end=now + timedelta(hours=72),
        slot_minutes=60,
        objective="cost",
        solver="cpsat",
        status=PlanStatus.OPTIMAL,
        is_current=True,
        objective_value=1.0,
        stats={},
    )
    session.add_all([cluster, plan])
    session.commit()
    return cluster, plan


def add_alpha_data(session: Session, world: World, now: datetime) -> None:
    """Jobs, a current plan with assignments, runs with metered energy, an unplanned job and a contract."""
    tenant_id = session.scalar(select(ApiToken.tenant_id).where(ApiToken.name == "alpha-corp-member"))
    de = session.scalar(select(Region).where(Region.code == "de"))
    h100 = session.scalar(select(HardwareType).where(HardwareType.code == "h100"))
    assert tenant_id and de and h100
    cluster, plan = add_shared_rows(session, now)
    jobs, runs = [], []
    for k, state in enumerate([JobState.PENDING, JobState.PLANNED, JobState.RUNNING, JobState.SUCCEEDED]):
        jid = ALPHA_BASE_ID + k
        job = Job(
            id=jid,
            tenant_id=tenant_id,
            batch_id=world.alpha_batch,
            name=f"alpha-secret-job-{k}",
            workload_class=WorkloadClass.TRAINING,
            gpu_count=2,
            reference_gpu_hours=4.0,
            reference_hardware="h100",
            memory_gb_per_gpu=10.0,
            release_at=now,
            deadline_at=now + timedelta(hours=48),
            priority=0,
            interruptible=False,
            checkpoint_overhead_minutes=0,
            min_chunk_minutes=60,
            command="echo alpha-secret-command",
            env={"ALPHA_SECRET": "alpha-secret-env"},
            state=state,
            created_at=now,
            updated_at=now,
        )
        session.add(job)
        session.add(JobEvent(job_id=jid, at=now, state=state.value, message="alpha-secret-event"))
        jobs.append(jid)
    session.flush()
    for k, jid in enumerate(jobs[1:]):
        a = Assignment(
            id=ALPHA_BASE_ID + k,
            plan=plan,
            job_id=jid,
            region_id=de.id,
            hardware_type_id=h100.id,
            start_at=now + timedelta(hours=k),
            end_at=now + timedelta(hours=k + 2),
            energy_kwh=3.25,
            cost=0.77,
            currency="EUR",
            carbon_kg=1.23,
        )
        session.add(a)
        session.flush()
        if k >= 1:
            run = Run(
                id=ALPHA_BASE_ID + k,
                job_id=jid,
                assignment_id=a.id,
                cluster_id=cluster.id,
                run_key=f"alpha-secret-run-{k}",
                runtime_job_id=f"alpha-secret-rt-{k}",
                state=RunState.SUCCEEDED if k == 2 else RunState.RUNNING,
                started_at=now,
                finished_at=now + timedelta(hours=2) if k == 2 else None,
                energy_kwh=3.5,
                cost=0.8,
                carbon_kg=1.3,
                energy_source="nvml",
            )
            session.add(run)
            runs.append(run.id)
    session.add(
        UnplannedJob(
            id=ALPHA_BASE_ID,
            plan_id=plan.id,
            job_id=jobs[0],
            reason="no_capacity",
            detail="alpha-secret-detail",
        )
    )
    session.add(
        EnergyContract(
            id=ALPHA_BASE_ID,
            tenant_id=tenant_id,
            region_id=de.id,
            name="alpha-secret-ppa",
            start_at=now,
            end_at=now + timedelta(days=365),
            share=0.5,
            carbon_g_per_kwh=20,
        )
    )
    session.commit()
    token_ids = list(
        session.scalars(select(ApiToken.id).join(ApiToken.tenant).where(ApiToken.tenant_id == tenant_id))
    )
    world.alpha_ids.update(
        job=jobs,
        plan=[plan.id],
        run=runs,
        assignment=[ALPHA_BASE_ID, ALPHA_BASE_ID + 1],
        cluster=[cluster.id],
        contract=[ALPHA_BASE_ID],
        token=token_ids,
    )


@pytest.fixture
def world(session: Session, small_fleet: None, now: datetime) -> World:
    w = World(tokens=_tokens(session))
    add_alpha_data(session, w, now)
    return w


def build_small_fleet(session: Session) -> None:
    """The same two regions and three hardware types as the ``small_fleet`` fixture, for module-scoped worlds."""
    for code, model, mem, tdp, idle, thr in [
        ("h100", "H100 SXM", 80, 700, 90, 1.0),
        ("a100", "A100 SXM", 80, 400, 60, 0.4),
        ("l40s", "L40S", 48, 350, 40, 0.35),
    ]:
        fleet.upsert_hardware(
            session,
            code,
            dict(
                vendor="nvidia",
                model=model,
                memory_gb=mem,
                tdp_w=tdp,
                idle_w=idle,
                relative_throughput={"default": thr},
            ),
        )
    fleet.upsert_region(
        session,
        "de",
        dict(name="Frankfurt", zone="DE", power_budget_kw=500, pue=1.2, residency_tags=["eu", "de"]),
    )
    fleet.upsert_region(
        session, "fi", dict(name="Hamina", zone="FI", power_budget_kw=300, pue=1.1, residency_tags=["eu"])
    )
    for region, hw, n in [("de", "h100", 16), ("de", "a100", 8), ("fi", "a100", 16), ("fi", "l40s", 8)]:
        fleet.set_inventory(session, region, hw, n)
    session.commit()


def truncate_all(settings: Settings) -> None:
    """Empty every table (what the ``settings`` fixture does after each test)."""
    empty_tables(settings)
