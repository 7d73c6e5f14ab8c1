"""Independent check of a plan's tenant figures: budgets (hard) and the fair-share floor (reported).

Like ``optimizer.check`` it shares no code with the planner (``optimizer.fairness``, ``optimizer.budgets``): the
work of a job, the water-filling and the budget sums are written again here as plain loops, so that a bug there
cannot hide itself.

The floor: a job's work is its GPUs times its shortest run time over the hardware it may use [GPU-h]; the work a
plan places is split into pools (region, hardware type, time block of ``Fairness.pool_hours``), and each tenant's
demand (its jobs planned, left out for capacity or not reached by the solver) may use only the pools its jobs could
run in. Tenant ``t``'s fair share is its share in the weighted max-min fair allocation of the pools, computed here by
linear programs (the planner uses max-flows). A tenant *falls short* when it plans less than its fair share minus
the biggest of its own jobs left out.
A shortfall is not always the planner's fault (a tenant's own residency, hardware or deadlines may keep its jobs
out of the capacity the others use), so it is listed in ``CheckReport.unfair`` and becomes a violation only under
``check_plan(strict_fairness=True)``; a budget overrun is always a violation.
"""

from __future__ import annotations

from dataclasses import dataclass

from ortools.linear_solver import pywraplp

from optimizer.plan import Plan, UnplannedReason
from optimizer.problem import Job, Problem


@dataclass(frozen=True, slots=True)
class TenantShare:
    """One tenant's figures in a plan.

    Parameters
    ----------
    tenant : str
        The tenant (``""``: jobs without one).
    weight : float
        Its weight [-].
    requested_gpu_h, planned_gpu_h, fair_gpu_h : float
        Work asked for (planned, left out for capacity or not reached), planned, and its fair share of what the plan places [GPU-h].
    cost, energy_kwh, carbon_kg : float
        What its planned jobs spend [problem currency], [kWh], [kgCO2eq].
    short_gpu_h : float
        How far it falls below its fair share, beyond one of its own jobs [GPU-h] (0 when served).
    """

    tenant: str
    weight: float
    requested_gpu_h: float
    planned_gpu_h: float
    fair_gpu_h: float
    cost: float
    energy_kwh: float
    carbon_kg: float
    short_gpu_h: float


def _work(problem: Problem, job: Job) -> float:
    """GPUs times the shortest run time over the hardware the job may use [GPU-h]."""
    best = None
    for hw, d in job.duration_slots.items():
        if d > 0 and (job.allowed_hardware is None or hw in job.allowed_hardware):
            best = d if best is None else min(best, d)
    return 0.0 if best is None or job.gpus <= 0 else job.gpus * best * problem.slot_minutes / 60.0


def _usable(problem: Problem, job: Job, block: int) -> set[tuple[str, str, int]]:
    """The (region, hardware, time block) pools ``job`` may use, written again from the job's fields."""
    memory = {h.name: h.memory_gb for h in problem.hardware}
    out = set()
    for r in problem.regions:
        if job.allowed_regions is not None and r.name not in job.allowed_regions:
            continue
        for hw, d in job.duration_slots.items():
            if d <= 0 or hw not in memory or memory[hw] < job.memory_gb_per_gpu:
                continue
            if job.allowed_hardware is not None and hw not in job.allowed_hardware:
                continue
            held = r.inventory.get(hw, 0) > 0 or max(r.inventory_per_slot.get(hw, (0,)) or (0,)) > 0
            if not held:
                continue
            for k in range(max(0, job.release_slot), min(problem.n_slots, job.deadline_slot)):
                out.add((r.name, hw, k // block))
    return out


def _fair(weights: dict[str, float], demand: list[tuple[str, set, float]], capacity: dict) -> dict[str, float]:
    """Weighted max-min shares of the pools' ``capacity`` among job ``demand`` (tenant, pools it may use, work), by
    a sequence of linear programs (GLOP): the highest common level ``lam`` every unsettled tenant reaches (``lam x
    weight`` each), then a tenant is settled at it when a second program cannot give it more; repeated until all
    are settled."""
    names = sorted(weights)
    groups: dict[tuple[str, frozenset], float] = {}
    for t, pools, w in demand:
        key = (t, frozenset(p for p in pools if p in capacity))
        groups[key] = groups.get(key, 0.0) + w
    asked = {t: sum(w for (tt, pools), w in groups.items() if tt == t and pools) for t in names}
    settled = {t: 0.0 for t in names if asked[t] <= 1e-9}

    def model(open_: list[str], level: float | None) -> tuple:
        lp = pywraplp.Solver.CreateSolver("GLOP")
        by_pool: dict = {}
        got: dict = {t: [] for t in names}
        for n, ((t, pools), w) in enumerate(groups.items()):
            if not pools:
                continue
            row = [lp.NumVar(0.0, w, f"x[{n},{p}]") for p in sorted(pools)]
            for p, v in zip(sorted(pools), row, strict=True):
                by_pool.setdefault(p, []).append(v)
            lp.Add(sum(row) <= w)
            got[t].extend(row)
        for p, vs in by_pool.items():
            lp.Add(sum(vs) <= capacity[p])
        total = {t: sum(got[t]) for t in names if got[t]}
        for t, v in settled.items():
            if t in total:
                lp.Add(total[t] >= v * (1 - 1e-9) - 1e-9)
        lam = lp.NumVar(0.0, lp.infinity(), "lam")
        for t in open_:
            if level is None:
                lp.Add(total[t] >= lam * weights[t])
            else:
                lp.Add(total[t] >= level * weights[t] * (1 - 1e-9) - 1e-9)
        return lp, lam, total

    while len(settled) < len(names):
        open_ = [t for t in names if t not in settled]
        lp, lam, _ = model(open_, None)
        lp.Maximize(lam)
        lp.Solve()
        level = lam.solution_value()
        stopped = []
        for t in open_:
            if level * weights[t] >= asked[t] - 1e-9:
                stopped.append(t)
                continue
            lp2, _, total = model(open_, level)
            lp2.Maximize(total[t])
            lp2.Solve()
            if lp2.Objective().Value() <= level * weights[t] + 1e-6 * max(1.0, level * weights[t]):
                stopped.append(t)
        for t in stopped or open_:
            settled[t] = min(asked[t], level * weights[t])
    return {t: settled[t] for t in names}


def check_tenants(problem: Problem, plan: Plan, bad: list[str], tol: float) -> tuple[tuple[TenantShare, ...], tuple[str, ...]]:
    """Tenant figures of ``plan``; budget overruns appended to ``bad``; returns the shares and the shortfalls."""
    tenant_of = {j.job_id: j.tenant for j in problem.jobs}
    work = {j.job_id: _work(problem, j) for j in problem.jobs}
    names = sorted(set(tenant_of.values()))
    demand = dict.fromkeys(names, 0.0)
    planned = dict.fromkeys(names, 0.0)
    slack = dict.fromkeys(names, 0.0)
    spend = {t: {"cost": 0.0, "energy_kwh": 0.0, "carbon_kg": 0.0, "gpu_hours": 0.0} for t in names}
    gpus_of = {j.job_id: j.gpus for j in problem.jobs}
    at_once: dict[tuple[str, str, int], int] = {}
    window_use: dict[tuple[str, int, int], dict[str, float]] = {}
    for a in plan.assignments:
        t = tenant_of.get(a.job_id)
        if t is None:
            continue  # an unknown job: check_plan reports it
        for c in a.chunks:
            for k in range(c.start_slot, c.end_slot):
                key = (t, a.hardware, k)
                at_once[key] = at_once.get(key, 0) + gpus_of[a.job_id]
        spend[t]["gpu_hours"] += gpus_of[a.job_id] * sum(c.end_slot - c.start_slot for c in a.chunks) * (
            problem.slot_minutes / 60.0
        )
        w = work[a.job_id]
        demand[t] += w
        planned[t] += w
        spend[t]["cost"] += a.cost
        spend[t]["energy_kwh"] += a.energy_kwh
        spend[t]["carbon_kg"] += a.carbon_kg
    for u in plan.unplanned:
        t = tenant_of.get(u.job_id)
        if t is not None and u.reason in (UnplannedReason.CAPACITY, UnplannedReason.NOT_SOLVED):
            w = work[u.job_id]
            demand[t] += w
            slack[t] = max(slack[t], w)
    for t in names:
        policy = problem.tenant_policy(t)
        for metric, limit in (
            ("cost", policy.cost_budget),
            ("energy_kwh", policy.energy_budget_kwh),
            ("carbon_kg", policy.carbon_budget_kg),
            ("gpu_hours", policy.gpu_hours_budget),
        ):
            if limit is not None and spend[t][metric] > limit * (1 + tol) + tol:
                bad.append(f"tenant {t!r}: plan {metric} {spend[t][metric]:.4f} exceeds its remaining budget {limit}")
    # windows: GPU-hours inside the window; any other metric whole for every run that touches it
    for a in plan.assignments:
        t = tenant_of.get(a.job_id)
        if t is None:
            continue
        for win in problem.tenant_policy(t).windows:
            inside = sum(max(0, min(c.end_slot, win.end_slot) - max(c.start_slot, win.start_slot)) for c in a.chunks)
            touches = any(c.start_slot < win.end_slot and c.end_slot > win.start_slot for c in a.chunks)
            key_w = (t, win.start_slot, win.end_slot)
            acc = window_use.setdefault(key_w, {"cost": 0.0, "energy_kwh": 0.0, "carbon_kg": 0.0, "gpu_hours": 0.0})
            acc["gpu_hours"] += gpus_of[a.job_id] * inside * problem.slot_minutes / 60.0
            if touches:
                acc["cost"] += a.cost
                acc["energy_kwh"] += a.energy_kwh
                acc["carbon_kg"] += a.carbon_kg
    for t in names:
        for win in problem.tenant_policy(t).windows:
            got = window_use.get((t, win.start_slot, win.end_slot))
            for metric, limit in (("cost", win.cost), ("energy_kwh", win.energy_kwh), ("carbon_kg", win.carbon_kg),
                                  ("gpu_hours", win.gpu_hours)):
                if got is not None and limit is not None and got[metric] > limit * (1 + tol) + tol:
                    bad.append(f"tenant {t!r}: plan {metric} {got[metric]:.4f} in slots {win.start_slot}-{win.end_slot} "
                               f"exceeds its remaining budget {limit}")
    for (t, hw, k), n in sorted(at_once.items()):
        cap = problem.tenant_policy(t).max_gpus.get(hw)
        if cap is not None and n > cap:
            bad.append(f"tenant {t!r}: {n} {hw} GPUs at once in slot {k}, quota {cap}")
    weights = {t: problem.tenant_policy(t).weight for t in names}
    block = problem.n_slots
    if problem.fairness.pool_hours is not None:
        block = max(1, round(problem.fairness.pool_hours * 60.0 / problem.slot_minutes))
    block = max(1, block)
    jobs = {j.job_id: j for j in problem.jobs}
    capacity: dict[tuple[str, str, int], float] = {}
    asks: list[tuple[str, set, float]] = []
    for a in plan.assignments:
        if a.job_id not in jobs:
            continue
        n_run = sum(c.end_slot - c.start_slot for c in a.chunks)
        own = set()
        for c in a.chunks:
            for k in range(c.start_slot, c.end_slot):
                p = (a.region, a.hardware, k // block)
                capacity[p] = capacity.get(p, 0.0) + work[a.job_id] / n_run
                own.add(p)
        asks.append((tenant_of[a.job_id], _usable(problem, jobs[a.job_id], block) | own, work[a.job_id]))
    for u in plan.unplanned:
        if u.job_id in jobs and u.reason in (UnplannedReason.CAPACITY, UnplannedReason.NOT_SOLVED):
            asks.append((tenant_of[u.job_id], _usable(problem, jobs[u.job_id], block), work[u.job_id]))
    fair = _fair(weights, asks, capacity) if len(names) > 1 else dict(planned)
    shares, unfair = [], []
    for t in names:
        short = 0.0
        if problem.fairness.enabled and len(names) > 1:
            short = max(0.0, fair[t] - slack[t] - planned[t])
        if short > 1e-6 * max(1.0, fair[t]):
            unfair.append(
                f"tenant {t!r}: planned {planned[t]:.3f} GPU-h, below its fair share {fair[t]:.3f} "
                f"by {short:.3f} beyond its biggest job left out ({slack[t]:.3f})"
            )
        else:
            short = 0.0
        s = spend[t]
        shares.append(
            TenantShare(t, weights[t], demand[t], planned[t], fair[t], s["cost"], s["energy_kwh"], s["carbon_kg"], short)
        )
    return tuple(shares), tuple(unfair)
