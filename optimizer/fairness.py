"""Fair share between tenants: weighted max-min fairness of requested GPU-hours planned, then budgets.

Definition (``docs/fairness.md`` says why this one). A job's *work* is its GPU-hours on the fastest hardware type
it may use (``gpus * min duration * slot hours``), so it does not depend on where the plan puts it. A tenant's
*demand* is the work of its jobs that could run at all (planned, or left out for capacity or not reached by the
solver); the fair shares are over the pools each tenant may use (``optimizer.pools``). When a plan places
``W`` GPU-hours of work, the *fair share* of tenant ``t`` is its weighted max-min share of ``W``, each tenant drawing
only on the pools (region, hardware, time block) its jobs may use; over one pool, the water level ``lam`` with
``sum_t min(demand_t, lam * weight_t) = W``, and ``fair_t = min(demand_t, lam * weight_t)``. A tenant
asking less than its weighted share gets all it asks; the rest is shared among the others by weight. A plan is
fair when every tenant plans at least its fair share less one of its own jobs left out (jobs are indivisible).

How the planner gets there, as a stage around the pipeline (``solve_fair``, called by ``solve_gridshift``):

1. **Capacity.** A tenant-blind plan in which every GPU-hour is worth the same (``Fairness.blind_share`` of the
   time) measures how much work the fleet holds, ``C``. When that plan is already fair (every tenant within one
   job of its share), it is the plan (re-solved with the time left, the better one kept).
2. **Trim and fill.** Otherwise the blind plan loses, first, the over-share tenants' jobs whose place lets a short
   tenant's job in (``optimizer.room``), then the last jobs (by the tenant's own priority) of every tenant over its
   fair share, down to the share; the short tenants' jobs are planned alone on what is left, then every other job
   (the layered priorities below): the blind plan's packing is kept, its margin shared.
3. **Layers.** Then each tenant's jobs, in its own priority order (``priority`` never compares across tenants),
   fill the layers of a progressive filling: layer ``k`` holds each tenant's weighted max-min share of
   ``LAYERS[k] x C``. The inner problem's priorities make the pipeline's left-out penalty of a job proportional to
   its GPU-hours times ``RATIO ** (layers after its own)``, so the pipeline gives up last-layer work first (spread
   over the tenants by the layers) and among plans of the same work minimises the cost or carbon objective as
   usual. The layers up to ``C`` are planned first, the rest on what they leave (``optimizer.residual``).
4. **Repair.** Shares are measured again on the plan; a tenant still short is lifted one layer and the plan
   re-solved while time is left. The plan kept has the least loss: GPU-hours tenants lack of their fair shares plus
   GPU-hours planned less than the most any plan placed (then the lowest objective).
5. **Repair.** The best plan is changed in place, no whole solve (``optimizer.swap``): short tenants' jobs put in
   holes made by taking out over-share work and moving other jobs, pools of a region and hardware type packed again
   by a small CP-SAT model (``optimizer.repack``), every job still left out put back where it fits; in rounds, the
   shares measured again each time, the repaired plan kept only when its loss is lower.
6. **Budgets.** ``optimizer.budgets`` takes out a tenant's jobs that its remaining budgets do not cover (lowest
   priority first; reason ``budget`` with the amount short); when any were taken out and time is left, the plan is
   re-solved without them so the freed capacity goes to others.
"""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

from optimizer.budgets import budget_prefilter, fit_budgets, fit_gpu_caps, totals_plan
from optimizer.layers import layer_priorities, tenant_levels
from optimizer.plan import Plan, PlanStatus, SolveStats, Unplanned, UnplannedReason
from optimizer.pools import WANTED, block_slots, constrained_fill, job_pools, plan_pools
from optimizer.problem import Job, Problem, SolveParams
from optimizer.residual import merge_plans, residual_problem
from optimizer.room import make_room
from optimizer.swap import POOLS, repair
from optimizer.tenancy import Fairness

Inner = Callable[..., Plan]

#: Shortfall [GPU-h] below which a tenant counts as served (rounding).
EPS = 1e-6
#: Total shortfall, as a share of the work planned, below which plans compare on work and objective alone.
SHORT_TOL = 0.005
#: A GPU-hour planned less than the best candidate counts this many GPU-hours short of a fair share in the loss:
#: a plan that is fair only because it planned less (the fair shares shrink with the work placed) loses to one that
#: moved the work between tenants (a five-region run under load kept a plan of 47 % less work at a weight of 1).
LOST_WEIGHT = 2.0
#: Share of the time limit kept at the end for the budgets, the shares and the plan's figures (a few max-flows and
#: sums over the plan).
RESERVE = 0.04
#: Share of the time left that the search for room (``optimizer.room``) may take.
ROOM_SHARE = 0.15
#: Rounds of trim and fill on the best plan with the time left (each keeps its packing and adds what fits).
POLISH_ROUNDS = 3
#: Share of the time limit kept for the direct repair of the best plan (``optimizer.swap``: no solve, array sums).
REPAIR_SHARE = 0.35
#: Rounds of direct repair (each measures the shares again: they move with the work placed).
REPAIR_ROUNDS = 6
#: Shortest limit worth a solve, as a share of the time limit: a solve with less is skipped, not started.
MIN_SOLVE = 0.05


def applies(problem: Problem) -> bool:
    """Whether ``problem`` needs the tenant stage: fairness on and jobs of two tenants or more, or a budget set."""
    if any(t.budgets() or t.max_gpus or t.windows for t in problem.tenants):
        return True
    return problem.fairness.enabled and len({j.tenant for j in problem.jobs}) > 1


def job_gpu_hours(problem: Problem, job: Job) -> float:
    """Work of ``job``: GPUs times its shortest run time over the hardware it may use [GPU-h] (0 when none)."""
    durations = [
        d
        for hw, d in job.duration_slots.items()
        if d > 0 and (job.allowed_hardware is None or hw in job.allowed_hardware)
    ]
    return job.gpus * min(durations) * problem.slot_hours if durations and job.gpus > 0 else 0.0


@dataclasses.dataclass(slots=True)
class _Shares:
    """Demand, targets and planned work per tenant of one plan [GPU-h]."""

    demand: dict[str, float]
    planned: dict[str, float]
    fair: dict[str, float]
    slack: dict[str, float]  # the biggest job the tenant has left out (granularity)

    def shortfall(self, tenant: str) -> float:
        return max(0.0, self.fair[tenant] - self.slack[tenant] - self.planned[tenant])

    @property
    def total_short(self) -> float:
        """GPU-hours tenants lack of their fair shares, beyond one job each (the checker's floor)."""
        return sum(self.shortfall(t) for t in self.fair)

    @property
    def exact_short(self) -> float:
        """GPU-hours tenants lack of their fair shares, whole (what the planner minimises)."""
        return sum(max(0.0, self.fair[t] - self.planned[t]) for t in self.fair)


def measure(problem: Problem, plan: Plan, work: Mapping[str, float], tenant: Mapping[str, str]) -> _Shares:
    """Shares of ``plan``: demand counts jobs planned, left out for capacity or not reached; the fair shares are those of the
    capacity each tenant's jobs may use (``optimizer.pools``)."""
    weights = {t: problem.tenant_policy(t).weight for t in set(tenant.values())}
    demand = dict.fromkeys(weights, 0.0)
    planned = dict.fromkeys(weights, 0.0)
    slack = dict.fromkeys(weights, 0.0)
    for a in plan.assignments:
        demand[tenant[a.job_id]] += work[a.job_id]
        planned[tenant[a.job_id]] += work[a.job_id]
    for u in plan.unplanned:
        if u.reason in WANTED:
            t = tenant[u.job_id]
            demand[t] += work[u.job_id]
            slack[t] = max(slack[t], work[u.job_id])
    capacity, classes = plan_pools(problem, plan, work, tenant)
    fair = constrained_fill(weights, classes, capacity)
    return _Shares(demand, planned, fair, slack)


def _inner_problem(problem: Problem, priority: Mapping[str, int], drop: set[str]) -> Problem:
    """``problem`` with the tiered priorities, without the jobs in ``drop``, the tenant stage off."""
    jobs = tuple(dataclasses.replace(j, priority=priority[j.job_id]) for j in problem.jobs if j.job_id not in drop)
    return dataclasses.replace(problem, jobs=jobs, tenants=(), fairness=Fairness(enabled=False))


def solve_fair(problem: Problem, params: SolveParams | None, inner: Inner, *, name: str = "gridshift") -> Plan:
    """Plan ``problem`` fairly between its tenants and within their budgets with the solver ``inner``.

    Parameters
    ----------
    problem : Problem
        A problem with tenants (``Job.tenant``, ``Problem.tenants``).
    params : SolveParams or None
        The time limit covers every stage [s].
    inner : callable
        The tenant-blind planner, ``inner(problem, params, name=...) -> Plan``.
    name : str
        Solver name recorded in the plan.

    Returns
    -------
    Plan
        The fairest plan found within budgets; jobs its tenants' budgets do not cover left out with reason
        ``budget``, the fair-share figures in ``stats.notes``.
    """
    params = params or SolveParams()
    t0 = time.perf_counter()
    work = {j.job_id: job_gpu_hours(problem, j) for j in problem.jobs}
    tenant = {j.job_id: j.tenant for j in problem.jobs}
    levels = tenant_levels(problem)
    full = problem
    excluded, over_budget = budget_prefilter(problem)  # no placement fits their budgets: never planned
    if excluded:
        problem = dataclasses.replace(problem, jobs=tuple(j for j in problem.jobs if j.job_id not in excluded))
    phases: dict[str, float] = {}
    # the time limit covers every stage: the end is kept for the budgets, the shares and the plan's figures
    end = t0 + (1.0 - RESERVE - REPAIR_SHARE) * params.time_limit_s
    setup = [0.0]  # what one more solve costs whatever its limit (tables and greedy plan) [s], once measured

    memo: dict[int, tuple[Plan, _Shares]] = {}

    def shares_of(plan: Plan) -> _Shares:
        """``measure`` of ``plan``, once per plan (a few max-flows each)."""
        if id(plan) not in memo:
            memo[id(plan)] = (plan, measure(problem, plan, work, tenant))
        return memo[id(plan)][1]

    def rank(plan: Plan, most: float) -> tuple:
        return _rank(plan, shares_of(plan), most)

    def left() -> float:
        return end - time.perf_counter()

    def room(share: float, n_jobs: int | None = None) -> float | None:
        """A solve's limit: ``share`` of the time left less the set-up (in proportion to its ``n_jobs``, all when
        None); None when that leaves too little to solve."""
        scale = 1.0 if n_jobs is None else n_jobs / max(1, len(problem.jobs))
        limit = share * left() - setup[0] * scale
        return limit if limit >= MIN_SOLVE * params.time_limit_s else None

    def solve_on(pb: Problem, limit: float, label: str) -> Plan:
        t = time.perf_counter()
        plan = inner(pb, dataclasses.replace(params, time_limit_s=max(0.05, limit)), name=name)
        phases[label] = round(phases.get(label, 0.0) + time.perf_counter() - t, 4)
        return plan

    def two_pass(priority: Mapping[str, int], admitted: set[str], limit: float, blind: Plan) -> Plan | None:
        """The admitted jobs first, then every other job on what they left (None when no time is left for both)."""
        t = time.perf_counter()
        first = solve_on(_inner_problem(problem, priority, set(work) - admitted), 0.5 * limit, "fair_admitted")
        placed = {a.job_id for a in first.assignments}
        second_limit = room(0.9)
        if second_limit is None:
            return None
        rest = residual_problem(_inner_problem(problem, priority, placed), first, problem)
        second = solve_on(rest, second_limit, "fair_rest")
        return merge_plans(problem, first, second, blind, wall_s=time.perf_counter() - t)

    def trim_and_fill(blind: Plan, got: _Shares) -> Plan | None:
        """The blind plan less the jobs of tenants over their fair share (lowest priority first, down to the share),
        then every job not in it planned on what is left (the others' jobs first, by the layers); None when no time is
        left to fill (a warm start: the blind plan's packing is kept)."""
        t = time.perf_counter()
        first = _trim(problem, blind, got, work, tenant, levels, until=time.perf_counter() + ROOM_SHARE * max(0.0, left()))
        limit = room(0.6, len(problem.jobs) - len(first.assignments))
        if limit is None:
            return None  # taken out and not filled: capacity wasted, never a plan to offer
        kept = frozenset(a.job_id for a in first.assignments)
        # the layers counted from the jobs kept: a tenant's kept work covers its first layers
        priority = layer_priorities(problem, capacity, boost, plannable, work, levels, fair_at=fair_at, kept=kept)
        short = {tn for tn in got.fair if got.fair[tn] - got.planned[tn] > EPS}
        waiting = {j.job_id for j in problem.jobs if j.tenant in short and j.job_id not in kept}
        first_limit = room(0.3, len(waiting)) if waiting else None
        if first_limit is not None:
            # the short tenants' jobs alone first: the room made for them cannot go to the others' jobs
            alone = residual_problem(_inner_problem(problem, priority, set(work) - waiting), first, problem)
            first = merge_plans(problem, first, solve_on(alone, first_limit, "fill_short"), blind, wall_s=0.0)
            kept = frozenset(a.job_id for a in first.assignments)
            limit = room(0.6, len(problem.jobs) - len(kept))
            if limit is None:
                return _left_out_rest(first, set(work) - kept)
        rest = residual_problem(_inner_problem(problem, priority, set(kept)), first, problem)
        second = solve_on(rest, limit, "trim_fill")
        return merge_plans(problem, first, second, blind, wall_s=time.perf_counter() - t)

    fair_on = problem.fairness.enabled
    as_given = {j.job_id: j.priority for j in problem.jobs}
    boost: dict[str, int] = defaultdict(int)
    plannable: set[str] = set()
    capacity = 0.0
    fair_at: dict[str, float] | None = None
    if not fair_on:
        candidates = [solve_on(_inner_problem(problem, as_given, set()), 0.8 * left(), "plan")]
    else:
        # the most work the fleet can place, every GPU-hour alike; where it is fair already, it is the plan
        blind_priority = layer_priorities(problem, 0.0, {}, set(), work, levels)
        blind_pb = _inner_problem(problem, blind_priority, set())
        blind = solve_on(blind_pb, problem.fairness.blind_share * left(), "blind")
        candidates = [blind]
        setup[0] = sum(v for k, v in blind.stats.phases.items() if k in ("tables", "greedy"))
        plannable = {a.job_id for a in blind.assignments} | {
            u.job_id for u in blind.unplanned if u.reason in WANTED
        }
        got = shares_of(blind)
        capacity = sum(got.planned.values())
        fair_at = dict(got.fair)
        fair_already = blind_fair = got.exact_short <= SHORT_TOL * capacity
        if not fair_already:
            # the blind plan's packing kept, its margin shared: over-share tenants' last jobs make room for the others
            filled = trim_and_fill(blind, got)
            candidates.extend([filled] if filled is not None else [])
            got = shares_of(candidates[-1])
            fair_already = got.exact_short <= SHORT_TOL * capacity
            if not fair_already:  # a second trim of the filled plan: the fill may have given the flood back its room
                filled = trim_and_fill(candidates[-1], got)
                candidates.extend([filled] if filled is not None else [])
                fair_already = shares_of(candidates[-1]).exact_short <= SHORT_TOL * capacity
        for rnd in range(0 if fair_already else 3):
            limit = room(0.7)
            if limit is None:
                break
            admitted: set[str] = set()
            layered = layer_priorities(problem, capacity, boost, plannable, work, levels, admitted, fair_at)
            if rnd == 0:
                plan = two_pass(layered, admitted, limit, blind)
                if plan is None:
                    break
                candidates.append(plan)
            else:
                candidates.append(solve_on(_inner_problem(problem, layered, set()), limit, f"fair_{rnd}"))
            got = shares_of(candidates[-1])
            if got.exact_short <= SHORT_TOL * sum(got.planned.values()):
                break
            for t in got.fair:  # a tenant still short: its layers one step up
                if got.fair[t] - got.planned[t] > EPS:
                    boost[t] += 1
        again = room(0.8) if blind_fair else None
        if again is not None:
            candidates.append(solve_on(blind_pb, again, "blind_again"))
        for _ in range(POLISH_ROUNDS):
            # the time left goes to the best plan so far: trimmed where unfair, then filled on what it leaves
            if room(0.6, len(problem.jobs) // 4) is None:
                break
            most = max(sum(work[a.job_id] for a in p.assignments) for p in candidates)
            best = min(candidates, key=lambda p: rank(p, most))
            filled = trim_and_fill(best, shares_of(best))
            if filled is None:
                break
            candidates.append(filled)
        # the short tenants' jobs placed directly in holes made for them, what is left out put back where it fits
        stop = end + REPAIR_SHARE * params.time_limit_s
        wide, last = 0, None
        no_hole: set[str] = set()  # jobs no hole was found for: later rounds try the others first
        for _ in range(REPAIR_ROUNDS):
            most = max(sum(work[a.job_id] for a in p.assignments) for p in candidates)
            best = min(candidates, key=lambda p: rank(p, most))
            got = shares_of(best)
            if best is last:
                wide += 1  # the last repair did not beat it: more pools, more time each
            began = time.perf_counter()
            # half the time left per round (the first has the most to repair), all of it once widened
            until = began + (0.5 if wide == 0 else 1.0) * max(0.0, stop - began)
            fixed = repair(problem, best, got.fair, got.planned, work, levels, until=until,
                           seed=params.random_seed, pools=POOLS << wide, failed=no_hole)
            phases["repair"] = round(phases.get("repair", 0.0) + time.perf_counter() - began, 4)
            last = best
            if fixed is not None:
                candidates.append(fixed)
            elif got.exact_short <= SHORT_TOL * sum(got.planned.values()) or wide >= 2:
                break
            if time.perf_counter() > stop - MIN_SOLVE * params.time_limit_s:
                break
    end = t0 + (1.0 - RESERVE) * params.time_limit_s  # the budgets' re-plan may use what the repair left
    most = max(sum(work[a.job_id] for a in p.assignments) for p in candidates)
    best = min(candidates, key=lambda p: rank(p, most))
    final, budget_out = _fit(problem, best, levels)
    limit = room(0.9) if budget_out else None
    if limit is not None:
        # re-plan without the jobs the budgets do not cover: their capacity goes to the others
        dropped = {u.job_id for u in budget_out}
        priority = (
            layer_priorities(problem, capacity, boost, plannable - dropped, work, levels, fair_at=fair_at)
            if fair_on else as_given
        )
        again_plan = solve_on(_inner_problem(problem, priority, dropped), limit, "budget_replan")
        again_fit, again_out = _fit(problem, again_plan, levels, already=budget_out)
        most = max(most, sum(work[a.job_id] for a in again_fit.assignments))
        if rank(again_fit, most) <= rank(final, most):
            final, budget_out = again_fit, again_out
    shares = shares_of(final)
    return _finish(full, final, [*over_budget, *budget_out], shares, name, phases, time.perf_counter() - t0)


def _trim(problem: Problem, blind: Plan, got: _Shares, work: Mapping[str, float], tenant: Mapping[str, str],
          levels: Mapping[str, int], until: float) -> Plan:
    """``blind`` less jobs of every tenant over its fair share, down to that share: first those whose place makes
    room for a short tenant's job left out (``optimizer.room.make_room``, searched until ``until``), then those placed
    where a short tenant has jobs left out, then by the tenant's own priority, lowest first, biggest first. The jobs
    taken out are left out for capacity."""
    planned = dict(got.planned)
    short = {t for t in got.fair if got.fair[t] - planned[t] > EPS}
    # first the jobs whose place lets a short tenant's job in (``optimizer.room``), then the rest down to the share
    removed = make_room(problem, blind, got.fair, planned, work, tenant, levels, until=until)
    for a in blind.assignments:
        if a.job_id in removed:
            planned[tenant[a.job_id]] -= work[a.job_id]
    block = block_slots(problem)
    jobs = {j.job_id: j for j in problem.jobs}
    wanted: set[tuple[str, str]] = set()
    for u in blind.unplanned:
        if u.reason in WANTED and tenant.get(u.job_id) in short and u.job_id in jobs:
            wanted.update((r, hw) for r, hw, _ in job_pools(problem, jobs[u.job_id], block))
    order = sorted(
        blind.assignments, key=lambda a: ((a.region, a.hardware) not in wanted, levels[a.job_id], -work[a.job_id])
    )
    for a in order:
        tn = tenant[a.job_id]
        if a.job_id not in removed and tn not in short and planned[tn] - work[a.job_id] >= got.fair[tn] - EPS:
            planned[tn] -= work[a.job_id]
            removed.add(a.job_id)
    kept = tuple(a for a in blind.assignments if a.job_id not in removed)
    cost, carbon, energy, objective = totals_plan(problem, kept)
    out = tuple(Unplanned(j, UnplannedReason.CAPACITY, "taken out for the other tenants' fair shares") for j in sorted(removed))
    return dataclasses.replace(
        blind, assignments=kept, unplanned=(*blind.unplanned, *out), cost=cost, carbon_kg=carbon, energy_kwh=energy,
        objective=objective, status=PlanStatus.FEASIBLE, best_bound=None, gap_pct=None, penalised_bound=None,
    )


def _left_out_rest(plan: Plan, jobs: set[str]) -> Plan:
    """``plan`` with every job of ``jobs`` it does not mention left out for capacity."""
    named = {u.job_id for u in plan.unplanned} | {a.job_id for a in plan.assignments}
    more = tuple(Unplanned(j, UnplannedReason.CAPACITY, "no room left beside the other jobs") for j in sorted(jobs - named))
    return dataclasses.replace(plan, unplanned=(*plan.unplanned, *more))


def _fit(
    problem: Problem, plan: Plan, levels: Mapping[str, int], already: Sequence[Unplanned] = ()
) -> tuple[Plan, list[Unplanned]]:
    """``plan`` within the GPUs-at-once quotas, then within the budgets; the jobs taken out (``already`` first)."""
    capped, quota_out = fit_gpu_caps(problem, plan, levels)
    fitted, budget_out = fit_budgets(problem, capped, levels, already=[*already, *quota_out])
    return fitted, budget_out


def _rank(plan: Plan, shares: _Shares, most: float) -> tuple:
    """Order of plans: least loss, then lowest objective. The loss counts every GPU-hour a tenant lacks of its fair
    share (``shares``; shortfalls under 0.5 % of the work as none) and every GPU-hour planned less than ``most``, the
    most any plan places: fairness is bought by moving work between tenants, not by planning less of it."""
    if plan.status is PlanStatus.NO_SOLUTION:
        return (float("inf"),)
    planned = sum(shares.planned.values())
    short = shares.exact_short if shares.exact_short > SHORT_TOL * planned else 0.0
    return (round(short + LOST_WEIGHT * max(0.0, most - planned), 6), plan.objective)


def _finish(problem: Problem, plan: Plan, budget_out: list[Unplanned], shares: _Shares, name: str,
            phases: dict[str, float], wall_s: float) -> Plan:
    """The plan in the original problem's terms: jobs left out for capacity beside a tenant at its share say so, and
    the notes give every tenant's requested, planned and fair GPU-hours."""
    notes = [
        f"tenant {t or '-'}: requested {shares.demand[t]:.1f} GPU-h, planned {shares.planned[t]:.1f}, "
        f"fair {shares.fair[t]:.1f}"
        for t in sorted(shares.demand)
    ]
    budget_ids = {u.job_id for u in budget_out}
    unplanned: list[Unplanned] = []
    tenant = {j.job_id: j.tenant for j in problem.jobs}
    for u in plan.unplanned:
        if u.job_id in budget_ids:
            continue
        t = tenant.get(u.job_id, "")
        if u.reason is UnplannedReason.CAPACITY and problem.fairness.enabled:
            share = f"tenant {t!r} planned {shares.planned[t]:.1f} GPU-h, fair share {shares.fair[t]:.1f}"
            u = dataclasses.replace(u, detail=f"{u.detail}; {share}" if u.detail else share)
        unplanned.append(u)
    unplanned.extend(budget_out)
    cost, carbon, energy, objective = totals_plan(problem, plan.assignments)
    stats = SolveStats(
        wall_s=wall_s,
        num_jobs=len(problem.jobs),
        num_classes=plan.stats.num_classes,
        num_options=plan.stats.num_options,
        cp_status=plan.stats.cp_status,
        phases={**phases, **{f"last.{k}": v for k, v in plan.stats.phases.items()}},
        notes=tuple(notes) + plan.stats.notes,
    )
    status = plan.status if plan.status is not PlanStatus.OPTIMAL else PlanStatus.FEASIBLE
    return Plan(
        solver=name,
        status=status,
        assignments=plan.assignments,
        unplanned=tuple(unplanned),
        objective=objective,
        best_bound=plan.best_bound,
        gap_pct=plan.gap_pct,  # the last solve's gap on its own (tiered) objective; None for a plan of two passes
        cost=cost,
        carbon_kg=carbon,
        energy_kwh=energy,
        stats=stats,
        penalised_bound=None,
    )
