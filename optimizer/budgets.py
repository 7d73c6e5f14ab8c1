"""Tenant budgets on a plan: take out the jobs a tenant's remaining cost, energy or carbon budget does not cover.

A plan's footprint per tenant is the sum of its assignments' ``cost`` [problem currency], ``energy_kwh`` [kWh],
``carbon_kg`` [kgCO2eq] (location-based) and GPU-hours (GPUs x running hours; the GPU-hours quota). For a tenant over any of its budgets, its planned jobs are taken out lowest
priority first (within the tenant; ties: the job that weighs most on the budgets it breaks) until every budget
holds; then the jobs taken out are put back, best first, wherever they still fit (a small job may fit where a big
one did not). Each job left out gets reason ``budget`` (``quota`` when only the GPU-hours quota is short) and, in its
detail, the amount it is short.

``fit_gpu_caps`` does the same for a tenant's GPUs-at-once quota per hardware type: while some slot holds more of
the tenant's GPUs of a type than its cap, the lowest-priority job running in the most such slots is taken out
(reason ``quota``).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from optimizer.plan import Assignment, Plan, Unplanned, UnplannedReason
from optimizer.problem import ObjectiveKind, Problem

METRICS = ("cost", "energy_kwh", "carbon_kg", "gpu_hours")
UNITS = {"cost": "", "energy_kwh": " kWh", "carbon_kg": " kg CO2e", "gpu_hours": " GPU-h"}


def gpu_hours(problem: Problem, a: Assignment, gpus: int) -> float:
    """GPUs times the hours assignment ``a`` runs [GPU-h]."""
    return gpus * sum(c.length_slots for c in a.chunks) * problem.slot_hours


def _footprints(problem: Problem, assignments: Iterable[Assignment]) -> dict[str, dict[str, float]]:
    gpus = {j.job_id: j.gpus for j in problem.jobs}
    return {
        a.job_id: {
            "cost": a.cost,
            "energy_kwh": a.energy_kwh,
            "carbon_kg": a.carbon_kg,
            "gpu_hours": gpu_hours(problem, a, gpus[a.job_id]),
        }
        for a in assignments
    }


def totals_plan(problem: Problem, assignments: Iterable[Assignment]) -> tuple[float, float, float, float]:
    """Cost [currency], carbon [kg], energy [kWh] and objective of ``assignments``."""
    items = list(assignments)
    cost = sum(a.cost for a in items)
    carbon = sum(a.carbon_kg for a in items)
    energy = sum(a.energy_kwh for a in items)
    kind = problem.objective.kind
    if kind is ObjectiveKind.COST:
        objective = cost
    elif kind is ObjectiveKind.WEIGHTED:
        objective = cost + problem.objective.carbon_price_per_tonne * carbon / 1000.0
    else:
        objective = carbon
    return cost, carbon, energy, objective


#: One limit of a tenant: (what it says, metric, what is left, first slot, end slot).
Limit = tuple[str, str, float, int, int]


def limits(problem: Problem, tenant: str) -> list[Limit]:
    """Every budget and quota of ``tenant``: the whole-horizon ones, then those of its windows."""
    policy = problem.tenant_policy(tenant)
    out: list[Limit] = [("", m, b, 0, problem.n_slots) for m, b in policy.budgets().items()]
    for w in policy.windows:
        where = f" in slots {w.start_slot}-{w.end_slot}"
        out.extend((where, m, b, w.start_slot, w.end_slot) for m, b in w.budgets().items())
    return out


def _charge(problem: Problem, a: Assignment, gpus: int, fp: Mapping[str, float], limit: Limit) -> float:
    """What assignment ``a`` (footprint ``fp``) counts against ``limit``: GPU-hours inside its window; any other
    metric whole in every window the run touches."""
    _, metric, _, lo, hi = limit
    if lo <= 0 and hi >= problem.n_slots:
        return fp[metric]
    if metric == "gpu_hours":
        inside = sum(max(0, min(c.end_slot, hi) - max(c.start_slot, lo)) for c in a.chunks)
        return gpus * inside * problem.slot_hours
    return fp[metric] if any(c.start_slot < hi and c.end_slot > lo for c in a.chunks) else 0.0


def _holds(used: Sequence[float], lims: Sequence[Limit]) -> bool:
    return all(u <= lim[2] * (1 + 1e-9) + 1e-9 for u, lim in zip(used, lims, strict=True))


def _short(used: Sequence[float], extra: Sequence[float], lims: Sequence[Limit], currency: str) -> str:
    """What the job lacks: per limit it breaks, how far used + the job goes past what is left."""
    parts = []
    for u, e, (where, m, b, _, _) in zip(used, extra, lims, strict=True):
        over = u + e - b
        if over > 1e-9 and e > 0:
            unit = f" {currency}" if m == "cost" else UNITS[m]
            parts.append(f"{m}{where} short {over:.3f}{unit} (remaining {max(0.0, b - u):.3f}{unit})")
    return "; ".join(parts) or "budget"


def fit_budgets(
    problem: Problem, plan: Plan, levels: Mapping[str, int], *, already: Sequence[Unplanned] = ()
) -> tuple[Plan, list[Unplanned]]:
    """``plan`` within every tenant's budgets and GPU-hour quotas (whole horizon and windows), and the jobs taken
    out for it (``already`` ones first).

    Returns ``plan`` itself when every budget already holds.
    """
    tenant = {j.job_id: j.tenant for j in problem.jobs}
    gpus = {j.job_id: j.gpus for j in problem.jobs}
    fp = _footprints(problem, plan.assignments)
    by_tenant: dict[str, list[Assignment]] = defaultdict(list)
    for a in plan.assignments:
        by_tenant[tenant[a.job_id]].append(a)
    out: list[Unplanned] = list(already)
    keep: list[Assignment] = []
    changed = False
    for t, items in by_tenant.items():
        lims = limits(problem, t)
        charge = {a.job_id: [_charge(problem, a, gpus[a.job_id], fp[a.job_id], lim) for lim in lims] for a in items}
        used = [sum(charge[a.job_id][i] for a in items) for i in range(len(lims))]
        if _holds(used, lims):
            keep.extend(items)
            continue
        changed = True
        broken = [i for i, lim in enumerate(lims) if used[i] > lim[2]]

        def weight(
            a: Assignment, broken: list[int] = broken, charge: dict[str, list[float]] = charge, lims: list[Limit] = lims
        ) -> float:
            return sum(charge[a.job_id][i] / max(lims[i][2], 1e-9) for i in broken)

        # take out, lowest priority first (heaviest on the broken limits among equals), until the limits hold
        order = sorted(items, key=lambda a: (levels[a.job_id], -weight(a)))
        kept, taken = list(items), []
        for a in order:
            if _holds(used, lims):
                break
            kept.remove(a)
            taken.append(a)
            used = [u - c for u, c in zip(used, charge[a.job_id], strict=True)]
        # put back, best first, what still fits
        for a in sorted(taken, key=lambda a: (-levels[a.job_id], weight(a))):
            extra = charge[a.job_id]
            if _holds([u + e for u, e in zip(used, extra, strict=True)], lims):
                kept.append(a)
                used = [u + e for u, e in zip(used, extra, strict=True)]
            else:
                detail = _short(used, extra, lims, problem.currency)
                short = {lim[1] for u, e, lim in zip(used, extra, lims, strict=True)
                         if u + e > lim[2] * (1 + 1e-9) + 1e-9}
                why = UnplannedReason.QUOTA if short == {"gpu_hours"} else UnplannedReason.BUDGET
                out.append(Unplanned(a.job_id, why, f"tenant {t!r}: {detail}"))
        keep.extend(kept)
    if not changed:
        return plan, out
    return _trimmed(problem, plan, keep), out


def _trimmed(problem: Problem, plan: Plan, keep: list[Assignment]) -> Plan:
    """``plan`` with only the assignments ``keep``, its totals recomputed and no bound (it plans other jobs)."""
    order_of = {a.job_id: k for k, a in enumerate(plan.assignments)}
    keep.sort(key=lambda a: order_of[a.job_id])
    cost, carbon, energy, objective = totals_plan(problem, keep)
    return dataclasses.replace(
        plan,
        assignments=tuple(keep),
        objective=objective,
        cost=cost,
        carbon_kg=carbon,
        energy_kwh=energy,
        best_bound=None,
        gap_pct=None,
        penalised_bound=None,
    )


def fit_gpu_caps(problem: Problem, plan: Plan, levels: Mapping[str, int]) -> tuple[Plan, list[Unplanned]]:
    """``plan`` within every tenant's GPUs-at-once quota per hardware type, and the jobs taken out for it."""
    caps = {t.name: t.max_gpus for t in problem.tenants if t.max_gpus}
    if not caps:
        return plan, []
    job = {j.job_id: j for j in problem.jobs}
    keep = list(plan.assignments)
    out: list[Unplanned] = []
    for t, per_hw in caps.items():
        for hw, cap in per_hw.items():
            mine = [a for a in keep if job[a.job_id].tenant == t and a.hardware == hw]
            while True:
                use: dict[int, int] = defaultdict(int)
                for a in mine:
                    for c in a.chunks:
                        for k in range(c.start_slot, c.end_slot):
                            use[k] += job[a.job_id].gpus
                over = {k for k, n in use.items() if n > cap}
                if not over:
                    break

                def hits(a: Assignment, over: set[int] = over) -> int:
                    return sum(1 for c in a.chunks for k in range(c.start_slot, c.end_slot) if k in over)

                worst = min((a for a in mine if hits(a)), key=lambda a: (levels[a.job_id], -hits(a)))
                mine.remove(worst)
                keep.remove(worst)
                peak = max(use.values())
                out.append(Unplanned(worst.job_id, UnplannedReason.QUOTA,
                                     f"tenant {t!r}: {peak} {hw} GPUs at once planned, quota {cap}"))
    if not out:
        return plan, []
    return _trimmed(problem, plan, keep), out




def budget_prefilter(problem: Problem) -> tuple[set[str], list[Unplanned]]:
    """Jobs that no placement fits in their tenant's remaining budgets, with reason ``budget``: each one's least
    possible energy (GPUs x the least power x run time over its hardware, at the lowest PUE) already exceeds the
    energy budget, or its least cost or carbon (that energy at the horizon's lowest non-negative price or carbon
    intensity) the cost or carbon budget. Planning them would only have them taken out afterwards."""
    pue = min((r.pue for r in problem.regions), default=1.0)
    prices = [p * problem.fx(r.currency) for r in problem.regions for p in r.price_per_mwh if p == p]
    carbon = [c for r in problem.regions for c in r.carbon_g_per_kwh if c == c and c >= 0]
    low_price = min(prices, default=0.0)
    low_ci = min(carbon, default=0.0)
    out: list[Unplanned] = []
    for job in problem.jobs:
        budgets = problem.tenant_policy(job.tenant).budgets()
        if not budgets:
            continue
        runs = [problem.job_power_kw_per_gpu(job, hw) * d for hw, d in job.duration_slots.items()
                if d > 0 and (job.allowed_hardware is None or hw in job.allowed_hardware)]
        if not runs or job.gpus <= 0:
            continue
        energy = job.gpus * min(runs) * pue * problem.slot_hours
        least = {"energy_kwh": energy, "cost": energy * max(0.0, low_price) / 1000.0,
                 "carbon_kg": energy * low_ci / 1000.0}
        short = [f"{m} needs at least {least[m]:.3f}, remaining {b:.3f}" for m, b in budgets.items()
                 if m in least and least[m] > b * (1 + 1e-9) + 1e-9]
        if short:
            out.append(Unplanned(job.job_id, UnplannedReason.BUDGET, f"tenant {job.tenant!r}: " + "; ".join(short)))
    return {u.job_id for u in out}, out
