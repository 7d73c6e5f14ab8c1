"""Plan history: summaries of past plans, one plan by id, and the retention clean-up of superseded plans.

Every plan the service stores (nightly, hourly, on new work, manual, after a failure) stays as a summary row with
its figures. What grows is its assignment rows: each plan copies an assignment for every job not yet started, so
a fleet with a few thousand waiting jobs re-planned every hour writes tens of thousands of rows a day. Once a
superseded plan is older than ``Settings.plan_retention_days``, :func:`prune` deletes the rows of it that nothing
reads any more and stamps ``plans.pruned_at``. Kept are:

* every assignment a run executed (dispatch, held capacity and the receipt read the run's own assignment);
* every job's newest assignment (the reports' figures for a job that never ran come from it);
* the current plan whole, and every plan younger than the retention period.

So reports, receipts and dispatch read the same rows before and after a clean-up.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, exists, func, select
from sqlalchemy.orm import Session, aliased, selectinload

from app.config import Settings
from app.enums import PlanStatus
from app.errors import NotFound
from app.models import Assignment, Job, Plan, Region, Run, UnplannedJob
from app.services.assignments import current_plan as marked_current_plan
from app.services.auth import Principal
from app.services.pages import decode_cursor, encode_cursor

#: Most plans one clean-up call prunes; later calls (hourly) catch up on a backlog.
PRUNE_BATCH = 200


def plan_view(session: Session, p: Principal, plan: Plan) -> dict[str, Any]:
    """The plan as the caller may see it: a tenant its own jobs' assignments and unplanned entries; an operator admin
    every assignment and the per-region totals (left out for tenants: even a count would tell one tenant about
    another's work)."""
    everyone = p.sees_fleet
    q = (
        select(Assignment, Job.name, Job.gpu_count)
        .join(Job, Job.id == Assignment.job_id)
        .where(Assignment.plan_id == plan.id)
        .options(selectinload(Assignment.region), selectinload(Assignment.hardware_type))
        .order_by(Assignment.start_at, Assignment.id)
    )
    uq = (select(UnplannedJob, Job.name).join(Job, Job.id == UnplannedJob.job_id)
          .where(UnplannedJob.plan_id == plan.id).order_by(UnplannedJob.job_id))
    if not everyone:
        q = q.where(Job.tenant_id == p.tenant_id)
        uq = uq.where(Job.tenant_id == p.tenant_id)
    assignments = [
        {"job_id": a.job_id, "job_name": name, "region": a.region.code, "hardware": a.hardware_type.code,
         "gpu_count": gpus, "start_at": a.start_at, "end_at": a.end_at, "chunks": a.chunks,
         "energy_kwh": a.energy_kwh, "cost": a.cost, "currency": a.currency, "carbon_kg": a.carbon_kg,
         "run_now_energy_kwh": a.run_now_energy_kwh, "run_now_cost": a.run_now_cost,
         "run_now_carbon_kg": a.run_now_carbon_kg}
        for a, name, gpus in session.execute(q)
    ]
    unplanned = [{"job_id": u.job_id, "job_name": name, "reason": u.reason, "detail": u.detail}
                 for u, name in session.execute(uq)]
    totals = [] if not everyone else [
        {"region": code, "jobs": n, "energy_kwh": e or 0.0, "cost": c or 0.0, "carbon_kg": k or 0.0}
        for code, n, e, c, k in session.execute(
            select(Region.code, func.count(Assignment.id), func.sum(Assignment.energy_kwh), func.sum(Assignment.cost),
                   func.sum(Assignment.carbon_kg))
            .join(Region, Region.id == Assignment.region_id)
            .where(Assignment.plan_id == plan.id).group_by(Region.code).order_by(Region.code)
        )
    ]
    own = None if everyone else own_objectives(session, p.tenant_id, [plan])[plan.id]
    return {**head(plan, fleet=everyone, own_objective=own), "assignments": assignments, "unplanned": unplanned,
            "region_totals": totals}


def current_plan(session: Session) -> Plan:
    """The current plan; NotFound before the first good one."""
    plan = marked_current_plan(session)
    if plan is None:
        raise NotFound("current plan")
    return plan


def get_plan(session: Session, plan_id: int) -> Plan:
    plan = session.get(Plan, plan_id)
    if plan is None:
        raise NotFound(f"plan {plan_id}")
    return plan


def job_counts(plan: Plan) -> tuple[int, int] | None:
    """``(assigned, left out)`` as recorded when the plan was stored, or None for plans stored before that."""
    jobs = (plan.stats or {}).get("jobs")
    if not isinstance(jobs, dict):
        return None
    return int(jobs.get("assigned", 0)), int(jobs.get("unplanned", 0))


def _counted(session: Session, plans: list[Plan]) -> dict[int, tuple[int, int]]:
    """Job counts of ``plans``: recorded ones, else counted from their rows (plans stored before the record)."""
    out = {p.id: c for p in plans if (c := job_counts(p)) is not None}
    missing = [p.id for p in plans if p.id not in out]
    if missing:
        assigned = dict(session.execute(
            select(Assignment.plan_id, func.count()).where(Assignment.plan_id.in_(missing)).group_by(Assignment.plan_id)
        ).all())
        unplanned = dict(session.execute(
            select(UnplannedJob.plan_id, func.count()).where(UnplannedJob.plan_id.in_(missing))
            .group_by(UnplannedJob.plan_id)
        ).all())
        out.update({pid: (int(assigned.get(pid, 0)), int(unplanned.get(pid, 0))) for pid in missing})
    return out


def problems(plan: Plan) -> list[str]:
    """Why a failed plan failed: the constraints it broke, else the solver's notes; nothing for any other plan."""
    if plan.status is not PlanStatus.FAILED:
        return []
    stats = plan.stats or {}
    return [str(x) for x in (stats.get("violations") or (stats.get("solve") or {}).get("notes") or [])]


def own_objectives(session: Session, tenant_id: int, plans: list[Plan]) -> dict[int, float | None]:
    """Each plan's objective over one tenant's own assignments: their cost for a cost objective, their CO2 [kg] for a
    carbon one (also under a cost cap); None for a weighted objective (and 0.0 for a plan without such jobs)."""
    sums = {pid: (cost, carbon) for pid, cost, carbon in session.execute(
        select(Assignment.plan_id, func.sum(Assignment.cost), func.sum(Assignment.carbon_kg))
        .join(Job, Job.id == Assignment.job_id)
        .where(Job.tenant_id == tenant_id, Assignment.plan_id.in_([p.id for p in plans]))
        .group_by(Assignment.plan_id)
    )}  # fmt: skip
    out: dict[int, float | None] = {}
    for plan in plans:
        cost, carbon = sums.get(plan.id, (0.0, 0.0))
        kind = str(plan.objective or "")
        out[plan.id] = float(cost or 0.0) if kind == "cost" else (
            float(carbon or 0.0) if kind in ("carbon", "carbon_cost_cap") else None)  # fmt: skip
    return out


def head(plan: Plan, *, fleet: bool, own_objective: float | None = None) -> dict[str, Any]:
    """When and why the plan was made, how well it was solved, whether it is current or pruned; why it failed only
    when ``fleet`` (the reasons name other tenants' jobs). The objective value, bound and gap are the fleet's only
    when ``fleet``; a tenant gets the objective over its own jobs (``own_objective``) and no bound or gap."""
    figures = {"objective_value": plan.objective_value, "best_bound": plan.best_bound, "gap_pct": plan.gap_pct}
    if not fleet:
        figures = {"objective_value": own_objective, "best_bound": None, "gap_pct": None}
    return {
        "id": plan.id, "created_at": plan.created_at, "horizon_start": plan.horizon_start,
        "horizon_end": plan.horizon_end, "slot_minutes": plan.slot_minutes, "objective": plan.objective,
        "solver": plan.solver, "trigger": plan.trigger, "status": plan.status.value, "is_current": plan.is_current,
        **figures, "pruned_at": plan.pruned_at, "problems": problems(plan) if fleet else [],
    }


def summary(plan: Plan, counts: tuple[int, int] | None, *, fleet: bool, currency: str,
            own_objective: float | None = None) -> dict[str, Any]:
    """The plan's head: when, why, how well solved; fleet-wide totals only when ``fleet``."""
    stats = plan.stats or {}
    solve = stats.get("solve") or {}
    run_now = stats.get("run_now") or {}
    totals = None
    if fleet:
        assigned, unplanned = counts or (0, 0)
        totals = {
            "jobs_assigned": assigned, "jobs_unplanned": unplanned,
            "energy_kwh": stats.get("energy_kwh"), "cost": stats.get("cost"), "carbon_kg": stats.get("carbon_kg"),
            "run_now_energy_kwh": run_now.get("energy_kwh"), "run_now_cost": run_now.get("cost"),
            "run_now_carbon_kg": run_now.get("carbon_kg"), "currency": stats.get("currency") or currency,
        }
    return {**head(plan, fleet=fleet, own_objective=own_objective), "solve_s": solve.get("wall_s"), "fleet": totals}


def list_plans(
    session: Session, principal: Principal, settings: Settings, *, limit: int, cursor: str | None = None,
    trigger: str | None = None,
) -> tuple[list[dict[str, Any]], str | None]:
    """Plan summaries, newest first, with a cursor to the next page."""
    q = select(Plan)
    if trigger:
        q = q.where(Plan.trigger == trigger)
    if cursor:
        q = q.where(Plan.id < decode_cursor(cursor, kind="p"))
    plans = list(session.scalars(q.order_by(Plan.id.desc()).limit(limit + 1)))
    nxt = encode_cursor(plans[limit - 1].id, kind="p") if len(plans) > limit else None
    plans = plans[:limit]
    fleet = principal.sees_fleet  # fleet-wide figures name every tenant's work
    counts = _counted(session, plans) if fleet else {}
    own = {} if fleet else own_objectives(session, principal.tenant_id, plans)
    return [summary(p, counts.get(p.id), fleet=fleet, currency=settings.reporting_currency,
                    own_objective=own.get(p.id)) for p in plans], nxt


def prune(session: Session, settings: Settings, *, now: datetime, batch: int = PRUNE_BATCH) -> dict[str, int]:
    """Delete the rows of superseded plans older than the retention period that nothing reads; no commit.

    Returns the number of plans pruned and of assignment and left-out rows deleted. ``plan_retention_days <= 0``
    keeps everything.
    """
    done = {"plans": 0, "assignments": 0, "unplanned": 0}
    if settings.plan_retention_days <= 0:
        return done
    cutoff = now - timedelta(days=settings.plan_retention_days)
    plans = list(session.scalars(
        select(Plan).where(Plan.is_current.is_(False), Plan.pruned_at.is_(None), Plan.created_at < cutoff)
        .order_by(Plan.id).limit(batch)
    ))
    if not plans:
        return done
    counts = _counted(session, plans)  # recorded on the plan before its rows go
    newer = aliased(Assignment)
    for plan in plans:
        gone = session.execute(
            delete(Assignment)
            .where(
                Assignment.plan_id == plan.id,
                ~exists().where(Run.assignment_id == Assignment.id),
                exists().where(newer.job_id == Assignment.job_id, newer.id > Assignment.id),
            )
            .execution_options(synchronize_session=False)
        )
        left = session.execute(
            delete(UnplannedJob).where(UnplannedJob.plan_id == plan.id).execution_options(synchronize_session=False)
        )
        assigned, unplanned = counts[plan.id]
        plan.stats = {**(plan.stats or {}), "jobs": {"assigned": assigned, "unplanned": unplanned}}
        plan.pruned_at = now
        done["plans"] += 1
        done["assignments"] += int(gone.rowcount or 0)  # type: ignore[attr-defined]
        done["unplanned"] += int(left.rowcount or 0)  # type: ignore[attr-defined]
    session.flush()
    return done
