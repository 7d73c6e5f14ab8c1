"""A plan at fleet scale: an aggregated overview and one page of its assignments at a time.

With 10,000 assignments a plan cannot be drawn bar by bar or listed row by row. :func:`plan_overview` sums it
per region and hardware type over time buckets (GPUs in use against inventory, power against the region's budget);
:func:`assignment_page` serves the assignments filtered, sorted and paginated in the database. Both follow the plan
view's rule: a tenant sees its own jobs, operators (admin, read-only) every tenant's.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.enums import JobState
from app.errors import FieldError, ValidationFailed
from app.models import Assignment, HardwareType, Inventory, Job, Plan, Region, Tenant
from app.services.assignments import assignment_power_kw, running_intervals
from app.services.auth import Principal
from app.services.plan_history import head

MAX_BUCKETS = 168  # time buckets of the overview: a week of hours, or coarser buckets over a longer horizon
SORTS: dict[str, Any] = {
    "start_at": Assignment.start_at, "end_at": Assignment.end_at, "job_id": Assignment.job_id,
    "cost": Assignment.cost, "energy_kwh": Assignment.energy_kwh, "carbon_kg": Assignment.carbon_kg,
    "gpu_count": Job.gpu_count, "region": Region.code, "hardware": HardwareType.code, "tenant": Tenant.slug,
    "job_name": Job.name, "state": Job.state,
}


@dataclass(frozen=True, slots=True)
class AssignmentFilter:
    region: str | None = None
    hardware: str | None = None
    tenant: str | None = None
    state: str | None = None
    text: str | None = None  # part of the job's name, or its id
    start_from: datetime | None = None  # runs at some time in [start_from, start_to)
    start_to: datetime | None = None


def _scoped(q: Any, p: Principal, plan: Plan) -> Any:
    q = q.where(Assignment.plan_id == plan.id)
    return q if p.sees_fleet else q.where(Job.tenant_id == p.tenant_id)


def _buckets(plan: Plan) -> tuple[datetime, int, int]:
    """(first bucket start, bucket length [min], bucket count) over the plan's horizon."""
    span_min = max(plan.slot_minutes, int((plan.horizon_end - plan.horizon_start).total_seconds() // 60))
    size = plan.slot_minutes * max(1, math.ceil(span_min / plan.slot_minutes / MAX_BUCKETS))
    return plan.horizon_start, size, max(1, math.ceil(span_min / size))


def plan_overview(session: Session, p: Principal, plan: Plan) -> dict[str, Any]:
    """Per (region, hardware) the mean GPUs in use per bucket against inventory; per region the mean planned power
    against its budget; the filters' choices (tenants for operators, states, regions, hardware)."""
    start, size, n = _buckets(plan)
    q = _scoped(select(Assignment.start_at, Assignment.end_at, Assignment.chunks, Assignment.energy_kwh,
                       Region.code, HardwareType.code, Job.gpu_count, Job.state, Tenant.slug)
                .join(Job, Job.id == Assignment.job_id).join(Tenant, Tenant.id == Job.tenant_id)
                .join(Region, Region.id == Assignment.region_id)
                .join(HardwareType, HardwareType.id == Assignment.hardware_type_id), p, plan)
    gpus: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0] * n)
    power: dict[str, list[float]] = defaultdict(lambda: [0.0] * n)
    states: dict[str, int] = defaultdict(int)
    tenants: set[str] = set()
    count = 0
    bucket_s, t0 = size * 60.0, start.timestamp()
    for s_at, e_at, chunks, energy, region, hw, gpu_count, state, slug in session.execute(q):
        count += 1
        states[state.value if isinstance(state, JobState) else str(state)] += 1
        tenants.add(slug)
        row = _Row(s_at, e_at, chunks, energy)
        kw = assignment_power_kw(row)
        lane, watts = gpus[(region, hw)], power[region]
        for s, e in running_intervals(row):
            # in bucket units from the first bucket's start
            x0, x1 = (s.timestamp() - t0) / bucket_s, (e.timestamp() - t0) / bucket_s
            for b in range(max(0, int(x0)), min(n, math.ceil(x1))):
                share = min(x1, b + 1) - max(x0, b)
                if share > 0:
                    lane[b] += gpu_count * share
                    watts[b] += kw * share
    inventory = {(r, h): int(c) for r, h, c in session.execute(
        select(Region.code, HardwareType.code, func.sum(Inventory.gpu_count))
        .join(Region, Region.id == Inventory.region_id).join(HardwareType, HardwareType.id == Inventory.hardware_type_id)
        .group_by(Region.code, HardwareType.code))}
    budgets = dict(session.execute(select(Region.code, Region.power_budget_kw)).all())
    lanes = sorted(set(gpus) | {k for k in inventory if gpus.get(k) or p.sees_fleet})
    return {
        **head(plan, fleet=p.sees_fleet), "assignments_total": count, "bucket_start": start, "bucket_minutes": size,
        "buckets": n,
        "lanes": [{"region": r, "hardware": h, "inventory_gpus": inventory.get((r, h), 0),
                   "gpus_in_use": [round(x, 3) for x in gpus.get((r, h), [0.0] * n)]} for r, h in lanes],
        "regions": [{"region": r, "budget_kw": float(budgets.get(r) or 0.0), "power_kw": [round(x, 2) for x in power[r]]}
                    for r in sorted(power)],
        "states": dict(sorted(states.items())),
        "tenants": sorted(tenants) if p.sees_fleet else [p.tenant_slug],
    }


@dataclass(slots=True)
class _Row:
    start_at: datetime
    end_at: datetime
    chunks: Any
    energy_kwh: float


def assignment_page(session: Session, p: Principal, plan: Plan, flt: AssignmentFilter, *, sort: str = "start_at",
                    page: int = 1, per_page: int = 50) -> dict[str, Any]:
    """One page of the plan's assignments: filtered, sorted (``-key`` descending; ties by job id), and counted."""
    key = sort.removeprefix("-")
    if key not in SORTS:
        raise ValidationFailed("bad sort", [FieldError("sort", f"unknown key {key!r} (known: {', '.join(SORTS)})")])
    q = _scoped(select(Assignment, Job.name, Job.gpu_count, Job.state, Tenant.slug, Region.code, HardwareType.code)
                .join(Job, Job.id == Assignment.job_id).join(Tenant, Tenant.id == Job.tenant_id)
                .join(Region, Region.id == Assignment.region_id)
                .join(HardwareType, HardwareType.id == Assignment.hardware_type_id), p, plan)
    if flt.region:
        q = q.where(Region.code == flt.region)
    if flt.hardware:
        q = q.where(HardwareType.code == flt.hardware)
    if flt.tenant:
        q = q.where(Tenant.slug == flt.tenant)
    if flt.state:
        try:
            q = q.where(Job.state == JobState(flt.state))
        except ValueError as exc:
            known = ", ".join(s.value for s in JobState)
            raise ValidationFailed("bad state", [FieldError("state", f"unknown state (known: {known})")]) from exc
    if flt.text:
        text = flt.text.strip()
        q = q.where(Job.id == int(text)) if text.isdigit() and int(text) < 2**31 else \
            q.where(Job.name.ilike(f"%{text.replace('%', '').replace('_', '')}%"))
    if flt.start_from is not None:
        q = q.where(Assignment.end_at > flt.start_from)
    if flt.start_to is not None:
        q = q.where(Assignment.start_at < flt.start_to)
    total = session.scalar(select(func.count()).select_from(q.order_by(None).subquery())) or 0
    column = SORTS[key]
    order = [column.desc() if sort.startswith("-") else column.asc(), Assignment.job_id.asc()]
    rows = session.execute(q.order_by(*order).offset((page - 1) * per_page).limit(per_page))
    items = [
        {"job_id": a.job_id, "job_name": name, "tenant": slug, "state": state.value, "region": region,
         "hardware": hw, "gpu_count": gpus, "start_at": a.start_at, "end_at": a.end_at, "chunks": a.chunks,
         "energy_kwh": a.energy_kwh, "cost": a.cost, "currency": a.currency, "carbon_kg": a.carbon_kg,
         "run_now_cost": a.run_now_cost,
         "expected_saving_cost": None if a.run_now_cost is None else a.run_now_cost - a.cost}
        for a, name, gpus, state, slug, region, hw in rows
    ]
    return {"items": items, "total": total, "page": page, "per_page": per_page,
            "pages": max(1, math.ceil(total / per_page))}
