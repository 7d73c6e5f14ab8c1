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
   (region, hardware) and every LP column of the job's class. On the LP path, with at least ``RINS_MIN_S`` left,
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
lowered to each job's best chunking at the final prices (``bound.valid_bound``); nothing is claimed optimal
unless proven against it.
"""

from __future__ import annotations

import dataclasses
import time

from optimizer import phases_bound as bound_phases
from optimizer import phases_search as search_phases
from optimizer.assemble import assemble_plan, choice_of
from optimizer.bound import Choice, Multipliers, evaluate, valid_bound
from optimizer.candidates import Candidates, place_fast
from optimizer.cpsat import build_classes
from optimizer.grid import prefer_earliest
from optimizer.heuristic import greedy_order, penalised_objective, place, size_order
from optimizer.pipeline import CHUNK_BOUND_S_PER_PAIR, SHARE, Incumbent, Phase, SolveRun, cap_ok
from optimizer.plan import Plan, PlanStatus, SolveStats, UnplannedReason
from optimizer.problem import Objective, ObjectiveKind, Problem, SolveParams
from optimizer.tables import Tables, build_tables

#: The phases after the greedy plan, in order; each decides from the run's state whether it applies.
PIPELINE: tuple[Phase, ...] = (
    bound_phases.lp_colgen,
    bound_phases.lp_dive,
    bound_phases.lp_lagrangian,
    bound_phases.lagrangian,
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
    t0 = time.perf_counter()
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
        phase(run)
    return finish_run(run, name)


def start_run(tb: Tables, params: SolveParams, t0: float, t: float, phases: dict[str, float]) -> SolveRun:
    """The run's fixed state: the Lagrangian evaluation at zero prices (candidates at true cost) and the greedy plan
    (least slack first, cheapest feasible option), the cheapest plan first when the greedy one breaks the cost cap."""
    capped = tb.problem.objective.kind is ObjectiveKind.CARBON_WITH_COST_CAP
    order = greedy_order(tb)
    found0: list = []
    eval_t0 = time.perf_counter()
    floor, ch0, _ = evaluate(tb, Multipliers.zeros(tb), collect=found0)  # a bound whatever comes after
    eval_s = time.perf_counter() - eval_t0
    cand0 = Candidates(tb, found0)
    greedy = place_fast(tb, order, cand0) if not capped else place(tb, order)
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
    pairs = int(tb.allowed[tb.intr].any(axis=1).sum())
    reserve = min(0.25 * params.time_limit_s, 0.05 + eval_s + CHUNK_BOUND_S_PER_PAIR * pairs) if pairs else 0.0
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
    )


def finish_run(run: SolveRun, name: str) -> Plan:
    """The best plan as a ``Plan``: the bound no higher than its penalised objective, and no plan at all when none
    meets the cost cap."""
    tb, best = run.tb, run.best
    if not best.found:
        run.notes.append("no plan found within the cost cap")
    penalised = penalised_objective(tb, best.plan)
    bound, status = run.bound, run.status
    if tb.intr.any():
        # the bounds above hold for runs of at most two chunks; the Problem allows any chunking
        # the DP where its time was kept, else the cheapest-slots floor (weaker, found by a sort)
        safe = valid_bound(tb, run.m, exact=run.left() + run.reserve > 0.5 * run.reserve)
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
    return assemble_plan(
        tb, plan, solver=name, status=status, bound=bound, penalised=penalised, stats=stats, left_out_reason=reason
    )
