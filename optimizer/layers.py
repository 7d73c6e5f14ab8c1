"""Layers of the fair stage's progressive filling: each tenant's jobs, in its own priority order, fill layers of its
weighted max-min share, and the pipeline's priorities are set so that its left-out penalty of a job is proportional
to the job's GPU-hours times ``RATIO`` per layer (``optimizer.fairness`` step 3 says how they are planned).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from optimizer.problem import Job, Problem

#: Progressive filling in layers: layer ``k`` admits each tenant's jobs up to its weighted max-min share of
#: ``LAYERS[k]`` times the work a greedy placement fits (the plan usually fits more); the rest is the last layer.
LAYERS = (0.6, 0.85, 1.0, 1.1, 1.25, 1.5)
#: Value of a GPU-hour of one layer against the next: the pipeline leaves out a later layer's work before an earlier
#: one's unless it places over ``RATIO`` times as much, so a shortage falls on the last layers, spread over tenants.
RATIO = 2
#: The last layer planned in the first of the two passes (``LAYERS[ADMIT_LAYER]`` is 1.0: the measured capacity).
ADMIT_LAYER = 2
LEVELS = 99
#: Smallest priority handed to the pipeline (its resolution: priorities are integers).
MIN_PRIORITY = 4
#: Shortfall [GPU-h] below which a tenant counts as served (rounding).
EPS = 1e-6


def water_fill(
    capacity: float, weights: Mapping[str, float], demands: Mapping[str, float]
) -> dict[str, float]:
    """Weighted max-min shares of ``capacity`` [GPU-h]: ``min(demand, lam * weight)`` summing to ``capacity`` (or
    every demand, when they fit)."""
    share = {t: 0.0 for t in demands}
    open_ = {t for t, d in demands.items() if d > EPS}
    left = max(0.0, capacity)
    while open_ and left > EPS:
        total_w = sum(weights[t] for t in open_)
        lam = left / total_w
        capped = {t for t in open_ if demands[t] - share[t] <= lam * weights[t] + EPS}
        if not capped:
            for t in open_:
                share[t] += lam * weights[t]
            break
        for t in capped:
            left -= demands[t] - share[t]
            share[t] = demands[t]
        open_ -= capped
    return share


def tenant_levels(problem: Problem) -> dict[str, int]:
    """Each job's level ``0..LEVELS`` within its tenant, from its priority's rank among that tenant's priorities (so
    a tenant's priority 1000 means no more than another tenant's 10)."""
    by_tenant: dict[str, set[int]] = defaultdict(set)
    for j in problem.jobs:
        by_tenant[j.tenant].add(j.priority)
    rank = {t: {p: k for k, p in enumerate(sorted(ps))} for t, ps in by_tenant.items()}
    out: dict[str, int] = {}
    for j in problem.jobs:
        n = len(by_tenant[j.tenant])
        out[j.job_id] = 0 if n == 1 else round(LEVELS * rank[j.tenant][j.priority] / (n - 1))
    return out


def _value_per_penalty(problem: Problem, job: Job, work: float) -> float:
    """Work per unit of the pipeline's left-out penalty [GPU-h / (kW slot)]: the pipeline charges a job left out its
    priority times GPUs x the largest power x run time over its hardware (``tables._penalty``), so a priority times
    this value makes the charge proportional to the job's GPU-hours."""
    energy = max(
        (
            problem.job_power_kw_per_gpu(job, hw) * (d + job.checkpoint_overhead_slots)
            for hw, d in job.duration_slots.items()
            if d > 0 and (job.allowed_hardware is None or hw in job.allowed_hardware)
        ),
        default=0.0,
    )
    return work / (job.gpus * energy) if energy > 0 and job.gpus > 0 else 0.0


def layer_priorities(
    problem: Problem,
    capacity: float,
    boost: Mapping[str, int],
    plannable: set[str],
    work: Mapping[str, float],
    levels: Mapping[str, int],
    admitted: set[str] | None = None,
    fair_at: Mapping[str, float] | None = None,
    kept: frozenset[str] = frozenset(),
) -> dict[str, int]:
    """Priorities of the inner problem: per tenant, its jobs best first fill the layers of ``LAYERS`` (a job joins
    the first layer whose share its tenant's work so far plus half of it fits in); a GPU-hour of layer ``k`` is worth
    ``RATIO`` GPU-hours of layer ``k + 1``; a tenant's ``boost`` lifts all of its layers by that many. ``admitted``,
    when given, receives the jobs of the layers up to ``LAYERS[ADMIT_LAYER]`` (the capacity measured)."""
    admitted = set() if admitted is None else admitted
    weights = {t: problem.tenant_policy(t).weight for t in set(j.tenant for j in problem.jobs)}
    demand: dict[str, float] = defaultdict(float)
    for j in problem.jobs:
        if j.job_id in plannable:
            demand[j.tenant] += work[j.job_id]
    demand_all = {t: demand.get(t, 0.0) for t in weights}
    base = dict(fair_at) if fair_at is not None else water_fill(capacity, weights, demand_all)
    above = {t: max(0.0, demand_all[t] - base.get(t, 0.0)) for t in weights}
    targets = []
    for f in LAYERS:  # up to the capacity: the fair shares measured; beyond it, the rest by weight
        if f <= 1.0:
            targets.append(water_fill(f * capacity, weights, {t: base.get(t, 0.0) for t in weights}))
        else:
            extra = water_fill((f - 1.0) * capacity, weights, above)
            targets.append({t: base.get(t, 0.0) + extra[t] for t in weights})
    value = {j.job_id: _value_per_penalty(problem, j, work[j.job_id]) for j in problem.jobs}
    known = sorted(v for v in value.values() if v > 0)
    if not known:
        return dict.fromkeys(value, 1)
    mid = known[len(known) // 2]
    covered: dict[str, float] = defaultdict(float)
    out: dict[str, int] = {}
    for j in sorted(problem.jobs, key=lambda j: (j.job_id not in kept, -levels[j.job_id], work[j.job_id])):
        t, w = j.tenant, work[j.job_id]
        layer = len(LAYERS)
        if j.job_id in plannable:
            layer = next((k for k, tg in enumerate(targets) if covered[t] + 0.5 * w <= tg[t] + EPS), layer)
            covered[t] += w
        # per GPU-hour, clamped to a 16-fold spread around the median job, so the integers stay small
        v = min(max(value[j.job_id], mid / 4), mid * 4) / (mid / 4)
        lift = RATIO ** (len(LAYERS) - layer + (boost.get(t, 0) if layer < len(LAYERS) else 0))
        out[j.job_id] = max(1, round(MIN_PRIORITY * lift * v))
        if layer <= ADMIT_LAYER:
            admitted.add(j.job_id)
    return out
