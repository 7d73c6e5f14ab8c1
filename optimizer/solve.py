"""The Gridshift planner: greedy plan, LP bound, rounding and dive, priced re-plan, local search, then CP-SAT.

Pipeline (each step bounded by the time limit):

1. ``build_tables``: validate jobs, windows, feasibility alone (reasons for the rest).
2. Greedy placement (least slack first, cheapest feasible option) gives a first plan and upper bound.
3. Up to ``max_lp_jobs`` jobs: column generation on the LP of the aggregated model (GLOP) gives the
   bound, capacity prices (duals) and an LP solution that is rounded to a plan (biggest jobs first) and
   dived on (``optimizer.dive``: a few jobs fixed a step, the LP re-solved and priced between steps; dives with
   different steps side by side on the two workers); beyond that, subgradient ascent on the Lagrangian dual
   gives the bound and prices, and (up to
   ``max_master_jobs``) the master LP over the options of its last iterations is solved once (HiGHS) and
   rounded the same way while the ascent goes on on the second worker (``optimizer.master``).
4. Priced placement (objective + capacity prices; skipped after a master LP rounding); jobs left out are
   placed by ejection moves (evict flexible jobs, re-place them); local search over the best start per
   (region, hardware) and every LP column of the job's class. On the LP path, with at least ``RINS_WORKER_MIN_S`` left,
   a MIP over the LP's columns around the best plan (``optimizer.submip``) runs on the second worker meanwhile;
   the better of its plan and the local search's is kept.
5. Up to ``max_cpsat_jobs`` jobs, if the reduced-cost-fixed option set is small enough, CP-SAT over
   aggregated job classes, warm-started from the best plan, tightens plan and bound. Otherwise the time
   left goes to ejection moves (LP converged) or to resuming the subgradient ascent from the best
   multipliers (bound still open).

Under ``carbon_cost_cap`` the planner first plans the cost objective (``SHARE["cost_start"]`` of the time) and
starts from that plan, so a cap the cheapest plan meets is met.

Each step after the greedy plan is a phase ``phase(run)`` over one :class:`optimizer.pipeline.SolveRun`
(``optimizer.phases_bound``, ``optimizer.phases_search``), listed in order in :data:`PIPELINE`; the best plan is
kept by the run's :class:`optimizer.pipeline.Incumbent`, and the share of time each phase takes is declared in
``optimizer.pipeline.SHARE``.

The gap is reported against the best valid bound: the LP, the ascent and CP-SAT bound the model's runs (one run, or
two chunks), and where interruptible jobs could do better in other chunkings (``Job.max_chunks``) the bound is
lowered to each job's best chunking at the final prices (``chunking.valid_bound``); nothing is claimed optimal
unless proven against it.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from optimizer import coarse, fairness
from optimizer import phases_bound as bound_phases
from optimizer import phases_search as search_phases
from optimizer.assemble import assemble_plan, choice_of
from optimizer.bound import Choice, Multipliers, evaluate
from optimizer.candidates import Candidates, fill_left_out, place_fast
from optimizer.chunking import valid_bound
from optimizer.cpsat import build_classes
from optimizer.grid import prefer_earliest
from optimizer.heuristic import greedy_order, penalised_objective, place, size_order
from optimizer.pipeline import CHUNK_BOUND_S_PER_PAIR, SHARE, Incumbent, Phase, SolveRun, cap_ok
from optimizer.plan import Plan, PlanStatus, SolveStats, Unplanned, UnplannedReason
from optimizer.problem import Objective, ObjectiveKind, Problem, SolveParams
from optimizer.tables import Tables, build_tables

#: The phases after the greedy plan, in order; each decides from the run's state whether it applies.
PIPELINE: tuple[Phase, ...] = (
    coarse.coarse_ascent,
    coarse.coarse_start,
    bound_phases.lp_colgen,
    bound_phases.lp_dive,
    bound_phases.lp_lagrangian,
    bound_phases.lagrangian,
    coarse.coarse_collect,
    search_phases.priced_placements,
    bound_phases.bound_worker,
    search_phases.eject_left_out,
    search_phases.repair,
    search_phases.fast_moves,
    search_phases.rins_start,
    search_phases.group_moves,
    search_phases.local_search,
    search_phases.rechunk_moves,
    bound_phases.cpsat,
    bound_phases.resume_bound,
    search_phases.group_moves_end,
    search_phases.improve_end,
    search_phases.rins_collect,
    bound_phases.collect_ascent,
)
#: Phases that run even when the time is up: they read the bound so far and collect the second worker's results.
CLOSING: frozenset[Phase] = frozenset(
    {coarse.coarse_collect, bound_phases.cpsat, search_phases.rins_collect, bound_phases.collect_ascent}
)
#: Share of the allowed time (the limit + 10 % + 0.5 s) the tables and the first plan may take; the jobs beyond
#: what fits in it (latest deadlines first) are left out as ``not_solved`` without being examined.
FIRST_PLAN_SHARE = 0.6
#: Time a job's tables and first plan take at most [s per job], to decide without measuring that an instance fits:
#: twice the slowest seen (0.75 ms a job at 1,000 bench jobs on the 16-core bench machine, 0.43 ms at 100,000)
FAST_S_PER_JOB = 2e-3
SAMPLE_JOBS = 200  # jobs whose tables are timed to size the rest
#: Share of the first plan's time the tables of the jobs kept may take: since the tables are checked once per job
#: shape (issue 22) they take less than the zero-price evaluation and candidates after them (100,000 jobs, 1 s: with
#: half, 38,854 jobs were kept and the first plan reached none of them in time)
TABLES_SHARE = 0.25


def solve_gridshift(problem: Problem, params: SolveParams | None = None, *, name: str = "gridshift") -> Plan:
    """Plan ``problem`` with the full pipeline.

    Parameters
    ----------
    problem : Problem
        The problem.
    params : SolveParams or None
        Time limit [s], workers, seed.
    name : str
        Solver name recorded in the plan.

    Returns
    -------
    Plan
        A plan that satisfies every constraint, jobs left out with their reason, bound and gap.
    """
    params = params or SolveParams()
    if fairness.applies(problem):
        # tenants share capacity by weight and stay within budgets: a stage around this pipeline
        return fairness.solve_fair(problem, params, solve_gridshift, name=name)
    t0 = time.perf_counter()
    kept = jobs_in_time(problem, params.time_limit_s)
    if kept is not None:
        return _solve_part(problem, params, kept, t0, name)
    return _solve(problem, params, t0, name)


def _solve(problem: Problem, params: SolveParams, t0: float, name: str) -> Plan:
    """The pipeline over every job of ``problem``, from ``t0`` (perf_counter [s])."""
    phases: dict[str, float] = {}
    cost_plan = None
    if problem.objective.kind is ObjectiveKind.CARBON_WITH_COST_CAP:
        # the cheapest plan first: whenever a plan within the cap exists, a near-cheapest one is one
        cost_plan = solve_gridshift(
            dataclasses.replace(problem, objective=Objective(ObjectiveKind.COST)),
            dataclasses.replace(params, time_limit_s=SHARE["cost_start"] * params.time_limit_s),
            name=name,
        )
        phases["cost_plan"] = round(time.perf_counter() - t0, 4)
    t_start = time.perf_counter()
    tb = build_tables(problem)
    if not params.capacity_blocks:
        tb.blocks = None
    t_tables = time.perf_counter()
    phases["tables"] = round(t_tables - t_start, 4)
    if tb.J == 0:
        stats = SolveStats(time.perf_counter() - t0, len(problem.jobs), 0, 0, "", phases, ("nothing plannable",))
        return assemble_plan(
            tb, Choice.empty(0), solver=name, status=PlanStatus.FEASIBLE, bound=0.0, penalised=0.0, stats=stats
        )
    run = start_run(tb, params, t0, t_tables, phases)
    if cost_plan is not None:
        run.best.offer(choice_of(tb, cost_plan), start=True, label="cost plan")
    for phase in PIPELINE:
        # the time is up: only the phases that close the run (the bound so far, the second worker's results)
        if run.left() > 0 or phase in CLOSING:
            phase(run)
    return finish_run(run, name)


def allowed_s(limit: float) -> float:
    """Wall time a solve with time limit ``limit`` [s] may take: the limit plus 10 % plus 0.5 s."""
    return 1.1 * max(0.0, limit) + 0.5


def jobs_in_time(problem: Problem, limit: float) -> list[int] | None:
    """The jobs whose tables and first plan fit in :data:`FIRST_PLAN_SHARE` of the allowed time, earliest deadline
    first (indices into ``problem.jobs``), or None when all of them do.

    When the instance is too big to be sure, the tables of the :data:`SAMPLE_JOBS` earliest jobs and of half as
    many are timed (a fixed part and a part per job) and the tables may take :data:`TABLES_SHARE` of the first plan's
    time; the greedy plan after them stops at the first plan's deadline (:func:`start_run`), the jobs it did not reach left out
    as ``not_solved`` too.
    """
    n = len(problem.jobs)
    t0 = time.perf_counter()
    budget = FIRST_PLAN_SHARE * allowed_s(limit)
    if n * FAST_S_PER_JOB <= budget:
        return None
    order = sorted(range(n), key=lambda k: (problem.jobs[k].deadline_slot, k))
    took = []
    # a first small build takes the one-off costs (caches, first numpy calls) out of the timed ones
    build_tables(dataclasses.replace(problem, jobs=tuple(problem.jobs[k] for k in order[:10])))
    for size in (min(n, SAMPLE_JOBS // 2), min(n, SAMPLE_JOBS)):
        t = time.perf_counter()
        build_tables(dataclasses.replace(problem, jobs=tuple(problem.jobs[k] for k in order[:size])))
        took.append((size, time.perf_counter() - t))
    (n1, t1), (n2, t2) = took
    per_job = max((t2 - t1) / max(1, n2 - n1), 0.2 * t2 / n2)
    fixed = max(0.0, t2 - per_job * n2)
    # the tables get a quarter of the first plan's time; the greedy plan stops at its deadline (start_run)
    room = TABLES_SHARE * budget - (time.perf_counter() - t0) - fixed
    fit = int(max(0.0, room) / per_job)
    return None if fit >= n else sorted(order[:fit])


def _solve_part(problem: Problem, params: SolveParams, kept: list[int], t0: float, name: str) -> Plan:
    """Plan only the jobs ``kept`` (in the time left), the others left out as ``not_solved``, unexamined."""
    part = dataclasses.replace(problem, jobs=tuple(problem.jobs[k] for k in kept))
    plan = _solve(part, params, t0, name)
    skipped = np.ones(len(problem.jobs), dtype=bool)
    skipped[kept] = False
    detail = "time limit: not examined (the jobs with the earliest deadlines were planned first)"
    rest = tuple(Unplanned(problem.jobs[k].job_id, UnplannedReason.NOT_SOLVED, detail) for k in np.flatnonzero(skipped))
    note = f"time limit: {len(kept)} of {len(problem.jobs)} jobs examined, earliest deadlines first"
    stats = dataclasses.replace(
        plan.stats,
        wall_s=time.perf_counter() - t0,
        num_jobs=len(problem.jobs),
        notes=(*plan.stats.notes, note),
    )
    # the bound and gap are those of the jobs examined; the others' penalties are not bounded
    status = PlanStatus.FEASIBLE if plan.status is PlanStatus.OPTIMAL else plan.status
    if not kept:
        status = PlanStatus.NO_SOLUTION
    return dataclasses.replace(
        plan, unplanned=plan.unplanned + rest, stats=stats, status=status, penalised_bound=None
    )


def start_run(tb: Tables, params: SolveParams, t0: float, t: float, phases: dict[str, float]) -> SolveRun:
    """The run's fixed state: the Lagrangian evaluation at zero prices (candidates at true cost) and the greedy plan
    (least slack first, cheapest feasible option), the cheapest plan first when the greedy one breaks the cost cap."""
    capped = tb.problem.objective.kind is ObjectiveKind.CARBON_WITH_COST_CAP
    order = greedy_order(tb)
    found0: list = []
    eval_t0 = time.perf_counter()
    # a bound whatever comes after (each job shape evaluated once, ``optimizer.shapes``: so are all later ones)
    floor, ch0, _ = evaluate(tb, Multipliers.zeros(tb), collect=found0)
    # the later phases time themselves by one evaluation (this first one also finds the shapes: a little more)
    eval_s = time.perf_counter() - eval_t0
    cand0 = Candidates(tb, found0)
    # the first plan stops at its deadline; the jobs it did not reach are not examined (left out as not_solved)
    reached: list[int] = []
    stop_at = t0 + FIRST_PLAN_SHARE * allowed_s(params.time_limit_s)
    greedy = place_fast(tb, order, cand0, stop_at=stop_at, reached=reached) if not capped else place(tb, order)
    if capped and not cap_ok(tb, greedy):
        price_only = Multipliers.zeros(tb, nu=1e6)  # cheapest plan, to satisfy the cap first
        greedy = place(tb, order, nu=price_only.nu)
    notes: list[str] = []
    best = Incumbent(tb, greedy, notes)
    now = time.perf_counter()
    greedy_s = now - t
    phases["greedy"] = round(greedy_s, 4)
    cls, rep, counts = build_classes(tb)
    # the bound over every chunking is computed at the end (finish_run): its time is kept from the start
    # (at the final prices and at zero prices: an evaluation and the two-chunk pricing of every split, ~0.5
    # evaluation, each; the DP for jobs of more chunks)
    pairs = int(tb.allowed[tb.intr & (tb.max_chunks > 2)].any(axis=1).sum())
    need = 0.05 + 3 * eval_s + 2 * CHUNK_BOUND_S_PER_PAIR * pairs
    reserve = min(0.25 * params.time_limit_s, need) if tb.intr.any() else 0.0
    return SolveRun(
        reserve=reserve,
        tb=tb,
        params=params,
        t0=t0,
        limit=params.time_limit_s - reserve,
        best=best,
        notes=notes,
        phases=phases,
        t=now,
        capped=capped,
        order=order,
        big_first=size_order(tb),
        found0=found0,
        ch0=ch0,
        cand0=cand0,
        eval_s=eval_s,
        greedy_s=greedy_s,
        upper=best.score if best.found else penalised_objective(tb, greedy),
        cls=cls,
        rep=rep,
        counts=counts,
        lp_path=not capped and params.max_lp_jobs >= tb.J,
        use_cpsat=len(rep) * 8 <= params.max_cpsat_options and params.max_cpsat_jobs >= tb.J,
        cand_ls=cand0,
        m=Multipliers.zeros(tb),
        lower=float(floor),
        unreached=order[reached[0] :] if reached else order[:0],
    )


def finish_run(run: SolveRun, name: str) -> Plan:
    """The best plan as a ``Plan``: the bound no higher than its penalised objective, and no plan at all when none
    meets the cost cap."""
    tb, best = run.tb, run.best
    # no job left out that fits beside the others (those the first plan never reached stay out)
    tried = np.ones(tb.J, dtype=bool)
    tried[run.unreached] = False
    was = int((best.plan.r >= 0).sum())
    filled = fill_left_out(tb, best.plan, np.flatnonzero(tried), stop_at=run.t0 + run.params.time_limit_s)
    if best.offer(filled):
        run.notes.append(f"filled: {int((filled.r >= 0).sum()) - was} jobs left out that fit placed at the end")
    if not best.found:
        run.notes.append("no plan found within the cost cap")
    penalised = penalised_objective(tb, best.plan)
    bound, status = run.bound, run.status
    if tb.intr.any() and run.left() + run.reserve <= 0:
        # no time left for the bound over every chunking: no bound is claimed
        run.notes.append("bound: no time left for the bound over every chunking")
        bound, status = -np.inf, PlanStatus.FEASIBLE
    elif tb.intr.any():
        # the bounds above hold for runs of at most two chunks; the Problem allows any chunking
        # the DP where its time was kept, else the cheapest-slots floor (weaker, found by a sort)
        exact = run.left() + run.reserve > 0.5 * run.reserve
        safe = valid_bound(tb, run.m, exact=exact)
        if safe < bound - 1e-9 * max(1.0, abs(bound)) and (run.m.lam.any() or run.m.mu.any()):
            # the bound so far may come from zero prices (every job at its best option), not from ``run.m``
            safe = max(safe, valid_bound(tb, Multipliers.zeros(tb), exact=exact))
        safe = max(safe, run.bound_any_chunking)
        undercut = safe < bound - 1e-9 * max(1.0, abs(bound))
        if undercut:
            run.notes.append(f"bound: {bound:.6g} for one or two chunks, {safe:.6g} for any chunking")
            bound = safe
        # optimal when the plan meets the bound that holds for every chunking (a proof against a bound the
        # chunkings undercut proves nothing)
        if penalised - bound <= 1e-6 * max(1.0, abs(penalised)):
            status = PlanStatus.OPTIMAL
        elif undercut:
            status = PlanStatus.FEASIBLE
    bound = min(bound, penalised)
    stats = SolveStats(
        wall_s=time.perf_counter() - run.t0,
        num_jobs=len(tb.problem.jobs),
        num_classes=len(run.rep),
        num_options=run.n_options,
        cp_status=run.cp_status,
        phases=run.phases,
        notes=tuple(run.notes),
    )
    # equal-cost starts (hourly prices held over quarter-hours) resolve to the earliest: cheapest now starts now
    # within the time limit, or 1 % of it past (10,000 jobs at 15 minutes: the pass may take seconds)
    until = max(run.t0 + run.params.time_limit_s, time.perf_counter() + 0.01 * run.params.time_limit_s)
    plan = prefer_earliest(tb, best.plan, until=until)
    reason = UnplannedReason.CAPACITY
    if not cap_ok(tb, plan):
        plan, status, reason = Choice.empty(tb.J), PlanStatus.NO_SOLUTION, UnplannedReason.NOT_SOLVED
    out = assemble_plan(
        tb, plan, solver=name, status=status, bound=bound, penalised=penalised, stats=stats, left_out_reason=reason
    )
    return _not_reached(tb, run.unreached[plan.r[run.unreached] < 0], out)


def _not_reached(tb: Tables, rows: np.ndarray, plan: Plan) -> Plan:
    """``plan`` with the jobs ``rows`` (left out, never tried by the first plan before its deadline) given as
    ``not_solved`` rather than ``capacity``; not optimal when there are any, ``no_solution`` when nothing is planned."""
    if not len(rows):
        return plan
    ids = {tb.problem.jobs[int(tb.rows[k])].job_id for k in rows}
    detail = "time limit: not examined (the first plan stopped at its deadline)"
    unplanned = tuple(
        Unplanned(u.job_id, UnplannedReason.NOT_SOLVED, detail) if u.job_id in ids else u for u in plan.unplanned
    )
    status = PlanStatus.FEASIBLE if plan.status is PlanStatus.OPTIMAL else plan.status
    if not plan.assignments:
        status = PlanStatus.NO_SOLUTION  # the time ran out before any job was placed
    notes = (*plan.stats.notes, f"time limit: the first plan reached {tb.J - len(rows)} of {tb.J} jobs in time")
    return dataclasses.replace(
        plan, unplanned=unplanned, status=status, stats=dataclasses.replace(plan.stats, notes=notes)
    )
