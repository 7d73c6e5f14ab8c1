"""Tenants' fair-share weights, quotas and budgets: what the operator set, what has been used, what planning and
dispatch may still give (issue 21; ``docs/fairness.md``).

Accounting, per tenant and budget period (calendar month or quarter, UTC):

* **spent**: metered runs (``runs.energy_kwh`` set by the status sync, with their cost and location-based carbon)
  that finished in the period; GPU-hours count GPUs x run time of every finished run.
* **in flight**: runs dispatched or running, not metered yet, at their assignment's planned figures.
* **reserved**: the current plan's assignments of jobs still waiting to run (state ``planned``).
* **remaining** = budget - spent - in flight - reserved; **projected** at period end = spent + in flight + reserved +
  the period's spending rate so far times the days after the current plan's horizon.

Planning gives the optimizer ``budget - spent - in flight`` (the plan it makes replaces the reservations), the GPU-
hours left under the monthly and daily quotas, and the GPUs-at-once quota less what runs now. Dispatch checks the same
figures before it submits a run (:func:`dispatch_hold`): a run that would go past a budget or quota waits.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.enums import ACTIVE_RUN_STATES, JobState
from app.errors import FieldError, NotFound, ValidationFailed
from app.models import Assignment, HardwareType, Job, Plan, Run, Tenant, TenantPolicy
from app.services.assignments import current_plan, running_hours
from optimizer import Problem as OptProblem
from optimizer import Unplanned, UnplannedReason
from optimizer.tenancy import BudgetWindow as OptBudgetWindow
from optimizer.tenancy import TenantPolicy as OptTenantPolicy

PERIODS = ("month", "quarter")
#: policy column -> budget metric
BUDGETS = {"cost_budget": "cost", "energy_budget_kwh": "energy_kwh", "carbon_budget_kg": "carbon_kg"}
METRICS = ("cost", "energy_kwh", "carbon_kg", "gpu_hours")
QUEUE_STATES = (JobState.PENDING, JobState.PLANNED)
POLICY_FIELDS = ("weight", "max_gpus", "max_gpu_hours_per_day", "max_gpu_hours_per_month", "max_queued_jobs",
                 "budget_period", *BUDGETS)


def period_bounds(now: datetime, period: str) -> tuple[datetime, datetime]:
    """Start and end of the calendar month or quarter (UTC) that holds ``now``."""
    first_month = now.month if period == "month" else 3 * ((now.month - 1) // 3) + 1
    start = datetime(now.year, first_month, 1, tzinfo=UTC)
    months = 1 if period == "month" else 3
    year, month = divmod(first_month - 1 + months, 12)
    return start, datetime(now.year + year, month + 1, 1, tzinfo=UTC)


def _zero() -> dict[str, float]:
    return dict.fromkeys(METRICS, 0.0)


@dataclass(slots=True)
class Usage:
    """A tenant's use over one window [currency], [kWh], [kg CO2eq], [GPU-h]."""

    spent: dict[str, float] = field(default_factory=_zero)
    in_flight: dict[str, float] = field(default_factory=_zero)
    reserved: dict[str, float] = field(default_factory=_zero)


def policy_of(session: Session, tenant_id: int) -> TenantPolicy | None:
    """The tenant's policy row, or None (weight 1, no quota, no budget)."""
    return session.get(TenantPolicy, tenant_id)


def usage(session: Session, tenant_id: int, start: datetime, end: datetime) -> Usage:
    """What the tenant's runs spent in ``[start, end)``, what is in flight, and what the current plan reserves."""
    out = Usage()
    runs = session.execute(
        select(Run, Job.gpu_count, Assignment)
        .join(Job, Job.id == Run.job_id)
        .outerjoin(Assignment, Assignment.id == Run.assignment_id)
        .where(Job.tenant_id == tenant_id, (Run.finished_at.is_(None)) | (Run.finished_at >= start))
    ).all()
    for run, gpus, a in runs:
        if run.finished_at is not None and run.finished_at < end:
            hours = (run.finished_at - run.started_at).total_seconds() / 3600 if run.started_at else 0.0
            out.spent["gpu_hours"] += gpus * max(0.0, hours)
            if run.energy_kwh is not None:
                out.spent["energy_kwh"] += run.energy_kwh
                out.spent["cost"] += run.cost or 0.0
                out.spent["carbon_kg"] += run.carbon_kg or 0.0
                continue
        if run.state in ACTIVE_RUN_STATES and a is not None:
            _add(out.in_flight, a, gpus)
    plan = current_plan(session)
    if plan is not None:
        rows = session.execute(
            select(Assignment, Job.gpu_count).join(Job, Job.id == Assignment.job_id)
            .where(Assignment.plan_id == plan.id, Job.tenant_id == tenant_id, Job.state == JobState.PLANNED,
                   Assignment.start_at < end)
        ).all()
        for a, gpus in rows:
            _add(out.reserved, a, gpus)
    return out


def _add(into: dict[str, float], a: Assignment, gpus: int) -> None:
    into["cost"] += a.cost
    into["energy_kwh"] += a.energy_kwh
    into["carbon_kg"] += a.carbon_kg
    into["gpu_hours"] += gpus * running_hours(a)


def gpus_running(session: Session, tenant_id: int) -> dict[str, int]:
    """GPUs the tenant's dispatched or running work holds now, per hardware code."""
    rows = session.execute(
        select(HardwareType.code, Job.gpu_count).select_from(Run).join(Job, Job.id == Run.job_id)
        .join(HardwareType, HardwareType.id == Run.hardware_type_id)
        .where(Job.tenant_id == tenant_id, Run.state.in_(ACTIVE_RUN_STATES))
    ).all()
    out: dict[str, int] = defaultdict(int)
    for code, gpus in rows:
        out[code] += gpus
    return dict(out)


#: A budget or quota over part of the horizon, in time: (start, end, {metric: what is left}).
TimeWindow = tuple[datetime, datetime, dict[str, float]]


def _gpu_hours_left(
    session: Session, row: TenantPolicy, now: datetime, horizon_end: datetime
) -> tuple[float | None, list[TimeWindow]]:
    """GPU-hours the tenant may still be given: the monthly quota (less this month's runs) over the whole horizon when
    it ends within the month, else as a window to the month's end and the full quota for the next month; the daily
    quota as one window per day the horizon touches (today's less today's runs)."""
    whole: float | None = None
    windows: list[TimeWindow] = []
    if row.max_gpu_hours_per_month is not None:
        start, end = period_bounds(now, "month")
        u = usage(session, row.tenant_id, start, end)
        left = max(0.0, row.max_gpu_hours_per_month - u.spent["gpu_hours"] - u.in_flight["gpu_hours"])
        if horizon_end <= end:
            whole = left
        else:
            windows.append((now, end, {"gpu_hours": left}))
            while end < horizon_end:
                nxt = period_bounds(end, "month")[1]
                windows.append((end, nxt, {"gpu_hours": float(row.max_gpu_hours_per_month)}))
                end = nxt
    if row.max_gpu_hours_per_day is not None:
        day = datetime(now.year, now.month, now.day, tzinfo=UTC)
        u = usage(session, row.tenant_id, day, day + timedelta(days=1))
        today = row.max_gpu_hours_per_day - u.spent["gpu_hours"] - u.in_flight["gpu_hours"]
        windows.append((now, day + timedelta(days=1), {"gpu_hours": max(0.0, today)}))
        day += timedelta(days=1)
        while day < horizon_end:
            windows.append((day, day + timedelta(days=1), {"gpu_hours": float(row.max_gpu_hours_per_day)}))
            day += timedelta(days=1)
    return whole, windows


@dataclass(frozen=True, slots=True)
class PlanningTenants:
    """What planning needs: each job's tenant, the tenants' policies for the optimizer, the jobs held back."""

    tenant_of: dict[int, str]  # job id -> tenant slug
    policies: tuple[OptTenantPolicy, ...]
    held: dict[int, str]  # job id -> why it waits (the queue quota)
    windows: dict[str, tuple[TimeWindow, ...]] = field(default_factory=dict)  # slug -> limits over part of the horizon


def planning_tenants(session: Session, jobs: list[Job], *, now: datetime, horizon_end: datetime) -> PlanningTenants:
    """Tenants of ``jobs`` with their weights, what is left of their budgets and quotas, and the jobs over their
    queue quota (those wait, best first kept: higher priority, then older). A budget whose period ends inside the
    horizon holds what is left until the period's end and the full budget after it (windows)."""
    slugs = dict(session.execute(select(Tenant.id, Tenant.slug)).all())
    rows = {r.tenant_id: r for r in session.scalars(select(TenantPolicy))}
    tenant_of = {j.id: slugs[j.tenant_id] for j in jobs}
    held: dict[int, str] = {}
    by_tenant: dict[int, list[Job]] = defaultdict(list)
    for j in jobs:
        by_tenant[j.tenant_id].append(j)
    policies = []
    windows: dict[str, tuple[TimeWindow, ...]] = {}
    for tenant_id, mine in by_tenant.items():
        row = rows.get(tenant_id)
        if row is None:
            continue
        if row.max_queued_jobs is not None:
            for j in sorted(mine, key=lambda j: (-j.priority, j.id))[row.max_queued_jobs:]:
                held[j.id] = f"quota: {len(mine)} jobs waiting, max_queued_jobs {row.max_queued_jobs}"
        start, end = period_bounds(now, row.budget_period)
        u = usage(session, tenant_id, start, end)
        left = {m: max(0.0, getattr(row, col) - u.spent[m] - u.in_flight[m]) for col, m in BUDGETS.items()
                if getattr(row, col) is not None}
        full = {m: float(getattr(row, col)) for col, m in BUDGETS.items() if getattr(row, col) is not None}
        mine_windows: list[TimeWindow] = []
        if left and horizon_end > end:  # the period ends inside the horizon: this one's rest, then the next ones
            mine_windows.append((now, end, left))
            while end < horizon_end:
                nxt = period_bounds(end, row.budget_period)[1]
                mine_windows.append((end, nxt, full))
                end = nxt
            left = {}
        gpu_whole, gpu_windows = _gpu_hours_left(session, row, now, horizon_end)
        mine_windows.extend(gpu_windows)
        if mine_windows:
            windows[slugs[tenant_id]] = tuple(mine_windows)
        running = gpus_running(session, tenant_id)
        policies.append(OptTenantPolicy(
            slugs[tenant_id], weight=row.weight,
            cost_budget=left.get("cost"), energy_budget_kwh=left.get("energy_kwh"),
            carbon_budget_kg=left.get("carbon_kg"), gpu_hours_budget=gpu_whole,
            max_gpus={hw: max(0, int(cap) - running.get(hw, 0)) for hw, cap in (row.max_gpus or {}).items()},
        ))
    return PlanningTenants(tenant_of, tuple(policies), held, windows)


def dispatch_hold(session: Session, job: Job, assignment: Assignment, *, now: datetime) -> str | None:
    """Why ``job`` may not start its ``assignment`` now (a quota or budget it would break), or None."""
    row = policy_of(session, job.tenant_id)
    if row is None:
        return None
    hw = session.get(HardwareType, assignment.hardware_type_id)
    cap = (row.max_gpus or {}).get(hw.code) if hw is not None else None
    if cap is not None:
        busy = gpus_running(session, job.tenant_id).get(hw.code if hw else "", 0)
        if busy + job.gpu_count > int(cap):
            return f"quota: {busy} {hw.code if hw else ''} GPUs running, {job.gpu_count} more would pass max_gpus {cap}"
    u = usage(session, job.tenant_id, *period_bounds(now, row.budget_period))
    this = {"cost": assignment.cost, "energy_kwh": assignment.energy_kwh, "carbon_kg": assignment.carbon_kg,
            "gpu_hours": job.gpu_count * running_hours(assignment)}
    for col, m in BUDGETS.items():
        budget = getattr(row, col)
        if budget is not None and u.spent[m] + u.in_flight[m] + this[m] > budget * (1 + 1e-9):
            short = u.spent[m] + u.in_flight[m] + this[m] - budget
            return f"budget: {m} short {short:.3f} (spent {u.spent[m]:.3f}, in flight {u.in_flight[m]:.3f}, budget {budget})"
    whole, windows = _gpu_hours_left(session, row, now, now)
    lefts = ([] if whole is None else [whole]) + [w[2]["gpu_hours"] for w in windows if w[0] <= now < w[1]]
    gh_left = min(lefts) if lefts else None
    if gh_left is not None and this["gpu_hours"] > gh_left + 1e-9:
        return f"quota: gpu_hours short {this['gpu_hours'] - gh_left:.3f} (left {gh_left:.3f})"
    return None


def tenant_by_slug(session: Session, slug: str) -> Tenant:
    """The tenant ``slug``; NotFound otherwise."""
    tenant = session.scalar(select(Tenant).where(Tenant.slug == slug))
    if tenant is None:
        raise NotFound(f"tenant {slug!r}")
    return tenant


def tenant_slugs(session: Session) -> list[str]:
    """Every tenant's slug, in order."""
    return list(session.scalars(select(Tenant.slug).order_by(Tenant.slug)))


def set_policy(session: Session, slug: str, values: dict[str, Any]) -> TenantPolicy:
    """Create or update the policy of tenant ``slug`` with the fields given (the others kept); no commit."""
    tenant = tenant_by_slug(session, slug)
    if "budget_period" in values and values["budget_period"] not in PERIODS:
        raise ValidationFailed("bad policy", [FieldError("budget_period", f"valid: {', '.join(PERIODS)}")])
    codes = set(session.scalars(select(HardwareType.code)))
    for hw in (values.get("max_gpus") or {}):
        if hw not in codes:
            raise ValidationFailed("bad policy", [FieldError(f"max_gpus.{hw}", f"unknown hardware; valid: {sorted(codes)}")])
    row = session.get(TenantPolicy, tenant.id)
    if row is None:
        row = TenantPolicy(tenant_id=tenant.id, weight=1.0, max_gpus={}, budget_period="month")
        session.add(row)
    for name in POLICY_FIELDS:
        if name in values:
            setattr(row, name, values[name])
    session.flush()
    return row


def burn_down(session: Session, tenant: Tenant, *, now: datetime, currency: str = "EUR") -> dict[str, Any]:
    """A tenant's weight, quota use and budget burn-down (spent, reserved, remaining, projected at period end)."""
    row = policy_of(session, tenant.id)
    period = row.budget_period if row else "month"
    start, end = period_bounds(now, period)
    u = usage(session, tenant.id, start, end)
    plan: Plan | None = current_plan(session)
    horizon_end = max(now, plan.horizon_end) if plan is not None else now
    elapsed_days = max(1.0, (now - start).total_seconds() / 86400)
    after_days = max(0.0, (end - horizon_end).total_seconds() / 86400)
    budgets = {}
    for col, m in BUDGETS.items():
        budget = getattr(row, col) if row else None
        committed = u.spent[m] + u.in_flight[m] + u.reserved[m]
        budgets[m] = {
            "budget": budget, "spent": u.spent[m], "in_flight": u.in_flight[m], "reserved": u.reserved[m],
            "remaining": None if budget is None else budget - committed,
            "projected": committed + u.spent[m] / elapsed_days * after_days,
        }
    n_queued = session.scalar(
        select(func.count()).select_from(Job).where(Job.tenant_id == tenant.id, Job.state.in_(QUEUE_STATES))
    ) or 0
    day = datetime(now.year, now.month, now.day, tzinfo=UTC)
    today = usage(session, tenant.id, day, day + timedelta(days=1))
    month = usage(session, tenant.id, *period_bounds(now, "month"))
    running = gpus_running(session, tenant.id)
    caps = (row.max_gpus or {}) if row else {}
    return {
        "tenant": tenant.slug, "weight": row.weight if row else 1.0, "period": period,
        "period_start": start.isoformat(), "period_end": end.isoformat(), "currency": currency,
        "budgets": budgets,
        "quotas": {
            "max_gpus": {hw: {"cap": caps.get(hw), "in_use": running.get(hw, 0)} for hw in sorted({*caps, *running})},
            "gpu_hours_per_day": {"cap": row.max_gpu_hours_per_day if row else None,
                                  "used": today.spent["gpu_hours"] + today.in_flight["gpu_hours"]},
            "gpu_hours_per_month": {"cap": row.max_gpu_hours_per_month if row else None,
                                    "used": month.spent["gpu_hours"] + month.in_flight["gpu_hours"]},
            "queued_jobs": {"cap": row.max_queued_jobs if row else None, "queued": n_queued},
        },
    }


def with_tenants(problem: OptProblem, tenants: PlanningTenants) -> OptProblem:
    """``problem`` with each job's tenant and the tenants' weights and what is left of their budgets and quotas."""
    jobs = tuple(dataclasses.replace(j, tenant=tenants.tenant_of.get(int(j.job_id), "")) for j in problem.jobs)
    slot = timedelta(minutes=problem.slot_minutes)
    policies = []
    for p in tenants.policies:
        wins = []
        for start, end, left in tenants.windows.get(p.name, ()):
            # a slot the window boundary cuts counts in both windows (never past either)
            lo = max(0, math.floor((start - problem.start) / slot))
            hi = min(problem.n_slots, math.ceil((end - problem.start) / slot))
            if hi > lo:
                wins.append(OptBudgetWindow(lo, hi, **{k: v for k, v in left.items()}))
        policies.append(dataclasses.replace(p, windows=tuple(wins)) if wins else p)
    return dataclasses.replace(problem, jobs=jobs, tenants=tuple(policies))


def held_unplanned(tenants: PlanningTenants) -> tuple[Unplanned, ...]:
    """The jobs held back by the queue quota, as the plan's jobs left out (reason ``quota``)."""
    return tuple(Unplanned(str(job_id), UnplannedReason.QUOTA, why) for job_id, why in sorted(tenants.held.items()))


#: A tenant's budget columns in reports.
BUDGET_COLUMNS = ("budget_period", "cost_budget", "energy_budget_kwh", "carbon_budget_kg")


def budget_columns(session: Session) -> dict[str, dict[str, Any]]:
    """Per tenant slug with a policy, its budget period and budgets (None where not set)."""
    rows = session.execute(select(Tenant.slug, TenantPolicy).join(TenantPolicy, TenantPolicy.tenant_id == Tenant.id))
    return {slug: {c: getattr(row, c) for c in BUDGET_COLUMNS} for slug, row in rows}
