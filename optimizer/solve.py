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

The gap is reported against the best valid bound; nothing is claimed optimal unless proven.
"""

from __future__ import annotations

import time
from collections import deque

import numpy as np
from ortools.sat.python import cp_model

from optimizer.assemble import assemble_plan
from optimizer.bound import Choice, Multipliers, choice_cost, evaluate, subgradient
from optimizer.candidates import Candidates, improve_fast, place_fast, repair_left_out
from optimizer.cpsat import build_classes, build_model, build_options, read_solution, solve_model
from optimizer.dive import dive_portfolio
from optimizer.eject import eject_improve
from optimizer.heuristic import greedy_order, improve, penalised_objective, place, size_order
from optimizer.lp import column_generation
from optimizer.master import TRAIL_ITERATIONS, master_guide
from optimizer.parallel import Child, fork_call, start_ascent
from optimizer.plan import Plan, PlanStatus, SolveStats, UnplannedReason
from optimizer.problem import ObjectiveKind, Problem, SolveParams
from optimizer.recreate import ruin_recreate
from optimizer.rounding import lp_candidates, round_lp
from optimizer.submip import rins
from optimizer.tables import Tables, build_tables

# share of the time left after the LP that the dive may take (it completes its plan greedily when time runs out)
DIVE_SHARE = 0.7
# time left [s] below which the MIP around the best plan is not started: at 1,000 jobs in 10 s it gets ~5 s and
# found nothing better in 3 of 3 seeds, in 30 s it gets ~25 s (seed 1: 650.5 against 663.0 without it)
RINS_MIN_S = 8.0
# time [s] the moves leave at the end to collect the MIP's plan and go on from it; the MIP gets the rest (ending it
# at 0.7 or 0.5 of the time left, for more group moves from its plan after, did no better: 1,000 jobs in 30 s,
# seeds 0/1/2, 1.86/1.53/0.68 % against 1.87/1.73/0.67 % and 1.85/1.72/0.67 %)
RINS_RESERVE_S = 0.8


def _cap_ok(tb: Tables, ch: Choice) -> bool:
    obj = tb.problem.objective
    if obj.kind is not ObjectiveKind.CARBON_WITH_COST_CAP or obj.cost_cap is None:
        return True
    return choice_cost(tb, ch) <= obj.cost_cap * (1 + 1e-9)


def _score(tb: Tables, ch: Choice) -> float:
    """Penalised objective, +inf when the cost cap is broken."""
    return penalised_objective(tb, ch) if _cap_ok(tb, ch) else float("inf")


def _place_left_out(tb: Tables, ch: Choice, priced: Candidates, time_limit_s: float) -> Choice:
    """Ejection moves for the jobs left out, over candidates at capacity prices (uncongested slots)."""
    return eject_improve(tb, ch, priced, time_limit_s=time_limit_s, max_evict=30, left_out_only=True)


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
    limit = params.time_limit_s
    phases: dict[str, float] = {}
    notes: list[str] = []

    def lap(key: str, since: float) -> float:
        now = time.perf_counter()
        phases[key] = round(now - since, 4)
        return now

    def left() -> float:
        return limit - (time.perf_counter() - t0)

    tb = build_tables(problem)
    t = lap("tables", t0)
    if tb.J == 0:
        stats = SolveStats(
            time.perf_counter() - t0, len(problem.jobs), 0, 0, "", phases, ("nothing plannable",)
        )
        return assemble_plan(
            tb,
            Choice.empty(0),
            solver=name,
            status=PlanStatus.FEASIBLE,
            bound=0.0,
            penalised=0.0,
            stats=stats,
        )
    capped = problem.objective.kind is ObjectiveKind.CARBON_WITH_COST_CAP
    order = greedy_order(tb)
    found0: list = []
    eval_t0 = time.perf_counter()
    _, ch0, _ = evaluate(tb, Multipliers.zeros(tb), collect=found0)
    eval_s = time.perf_counter() - eval_t0  # one Lagrangian evaluation [s], to keep resumed ascent in time
    cand0 = Candidates(tb, found0)  # per-pair best starts at true cost
    best = place_fast(tb, order, cand0) if not capped else place(tb, order)
    if capped and not _cap_ok(tb, best):
        price_only = Multipliers.zeros(tb, nu=1e6)  # cheapest plan, to satisfy the cap first
        best = place(tb, order, nu=price_only.nu)
    best_score = _score(tb, best)
    greedy_s = time.perf_counter() - t
    t = lap("greedy", t)
    upper = best_score if np.isfinite(best_score) else penalised_objective(tb, best)

    def keep_mip(got: Choice | None) -> bool:
        """Note the MIP's plan and keep it if it is better; False when there is none (none in time, or one that
        broke a capacity)."""
        nonlocal best, best_score
        if got is None:
            notes.append("rins: no plan (none in time, or one refused by the capacity check)")
            return False
        notes.append(f"rins objective={_score(tb, got):.6g} (moves {best_score:.6g})")
        if _score(tb, got) < best_score:
            best, best_score = got, _score(tb, got)
        return True

    def incumbent() -> float:
        """The ascent's Polyak target: the best plan's score, or the greedy plan's objective while none meets
        the cost cap."""
        return best_score if np.isfinite(best_score) else upper

    def offer(cand: Choice, label: str, extra: str = "") -> None:
        """A plan from the LP: a start for the fast moves, and the best plan if it is better."""
        nonlocal best, best_score
        starts.append(cand)
        score = _score(tb, cand)
        notes.append(f"{label} objective={score:.6g}{extra}")
        if score < best_score:
            best, best_score = cand, score

    cls, rep, counts = build_classes(tb)
    lp_converged = False
    cand_ls = cand0
    # plans the fast moves start from on the LP path (the best one first is not always best after)
    starts = [best]
    lp_path = not capped and params.max_lp_jobs >= tb.J
    lp_sol: tuple[np.ndarray, np.ndarray] | None = None  # (class per row, LP solution) for the targeted moves
    ascent: Child | None = None
    rins_child: Child | None = None
    use_cpsat = len(rep) * 8 <= params.max_cpsat_options and params.max_cpsat_jobs >= tb.J
    if lp_path:
        lower, m, info = column_generation(
            tb, cls, rep, counts, [best, ch0], time_limit_s=0.7 * left(), keep_master=True
        )
        t = lap("lp_colgen", t)
        notes.append(
            f"lp rounds={info['rounds']} columns={info['columns']} converged={info['converged']} "
            f"lp_value={info['lp_value']}"
        )
        lp_converged = bool(info["converged"])
        cand_ls = lp_candidates(tb, cls, info["columns_table"], found0)  # more starts for local search
        if info["primal"] is not None:
            lp_sol = (cls, info["primal"])
            offer(round_lp(tb, cls, info["primal"], m), "lp rounding", f" (greedy {best_score:.6g})")
            t = lap("lp_rounding", t)
            if left() > 0.3 * limit:
                # the LP stays in the loop while jobs are fixed a few at a time (1,000 jobs, seeds 0/1/2:
                # 783.7, 648.7, 830.2 in 2-5 s, against 799.1, 780.7, 840.4 from the rounding above); dives with
                # different steps run side by side (which one ends lowest varies) and every plan is a start
                dives = dive_portfolio(
                    tb, info.pop("master"), rep, counts, time_limit_s=DIVE_SHARE * left(), workers=params.num_workers
                )
                for k, dived in enumerate(dives):
                    offer(dived, f"lp dive {k}")
                t = lap("lp_dive", t)
        info.pop("master", None)  # the LP's solver state: not needed further
        if not info["converged"] and left() > 0.5 * limit:
            lower2, m2, history = subgradient(tb, upper, start=m, time_limit_s=0.15 * left())
            if lower2 > lower:
                lower, m = lower2, m2
            t = lap("lagrangian", t)
    else:
        use_master = not capped and params.max_master_jobs >= tb.J
        trail: deque[Choice] = deque(maxlen=TRAIL_ITERATIONS)
        lower, m, history = subgradient(
            tb, upper, max_iter=300, time_limit_s=max(0.05, 0.3 * left()), trail=trail if use_master else None
        )
        t = lap("lagrangian", t)
        notes.append(f"lagrangian iterations={len(history)}")
        if use_master:
            if not use_cpsat:  # the ascent goes on on the second core while the master LP is solved here
                ascent = start_ascent(tb, params.num_workers, incumbent(), m, eval_s, left())
            # LP and rounding: 12-28 s at 10,000 jobs on a loaded 2-core machine; if not, priced placements
            seeds, limit_s = [best, ch0], 0.7 * left()
            guide = master_guide(
                tb, cls, rep, counts, list(trail), m, seeds, time_limit_s=limit_s, eval_s=eval_s, notes=notes,
                score=_score,
            )
            t = lap("master_lp", t)
            if guide is not None:
                lp_value, primal, table, cand = guide
                lp_sol = (cls, primal)
                cand_ls = lp_candidates(tb, cls, table, found0)
                starts.append(cand)
                score = _score(tb, cand)
                notes.append(f"master lp columns={len(table)} value={lp_value:.6g} rounding={score:.6g}")
                if score < best_score:
                    best, best_score = cand, score
    big_first = size_order(tb)
    tries = [(m, m.nu, big_first), (m, m.nu, order)] + ([(m, m.nu * 2 + 1e-3, big_first)] if capped else [])
    if lp_sol is not None and not lp_path:
        # the master LP's rounding starts far lower than the priced placements (10,000 jobs, seed 0: 9434
        # against 9729 before local search), whose time goes to the search instead
        tries = []
    if lp_path:
        # the LP is degenerate: duals of the last rounds price the same capacity differently, and which of
        # them leads to the lowest plan varies (placements take ~0.1 s at 1,000 jobs)
        tries += [(d, d.nu, big_first) for d in info.get("recent_duals", [])[-4:-1]]
    for k, (m_k, nu, order_k) in enumerate(tries):
        if left() < (1.5 if k else 1.0) * greedy_s + 0.05 * limit or (
            k and not lp_path and left() < 0.6 * limit
        ):
            break  # another placement would not finish in time
        if capped:
            cand = place(tb, order_k, m=m_k, nu=nu)
        else:
            found_m: list = []
            evaluate(tb, m_k, collect=found_m)
            cand_m = Candidates(tb, found_m)
            cand = place_fast(tb, order_k, cand_m, m=m_k)
            if (cand.r < 0).any():  # a job left out would hide a better plan behind its penalty
                cand = _place_left_out(tb, cand, cand_m, 0.1 * left())
        starts.append(cand)
        score = _score(tb, cand)
        if score < best_score:
            best, best_score = cand, score
    t = lap("priced_greedy", t)
    bound_open = not lp_converged  # the bound still gains from more subgradient steps at the end
    if ascent is None and bound_open and not use_cpsat:
        ascent = start_ascent(tb, params.num_workers, incumbent(), m, eval_s, left())
    if ascent is not None:
        bound_open = False
        notes.append("bound: subgradient ascent on a second worker")
    share = 0.5 if use_cpsat or bound_open else 0.95
    nu_ls = m.nu if capped else 0.0
    if not capped and (best.r < 0).any():
        found_m = []
        evaluate(tb, m, collect=found_m)  # candidates at capacity prices point to uncongested slots
        cand = _place_left_out(tb, best, Candidates(tb, found_m), 0.1 * left())
        if _score(tb, cand) < best_score:
            best, best_score = cand, _score(tb, cand)
        t = lap("eject_left_out", t)
    if not capped and (best.r < 0).any():
        cand = repair_left_out(tb, best, cand0, time_limit_s=0.2 * left())
        if _score(tb, cand) < best_score:
            best, best_score = cand, _score(tb, cand)
        t = lap("repair", t)
    if not capped:
        fast_s = max(0.05, 0.5 * share * left())
        # on the LP path every start (greedy, rounding, priced placements) without jobs left out goes through the
        # fast moves: which one ends lowest varies (seed 1: 711 -> 689 from the best start, 752 -> 666 from greedy)
        pool = [best]
        if lp_path:
            pool += [c for c in starts if c is not best and not (c.r < 0).any()]
        stalled = True
        for start in pool:
            fast_t0 = time.perf_counter()
            cand = improve_fast(tb, start, cand_ls, time_limit_s=fast_s / len(pool))
            stalled &= time.perf_counter() - fast_t0 < fast_s / len(pool)  # stopped on a pass without a move
            if _score(tb, cand) <= best_score:
                best, best_score = cand, _score(tb, cand)
        t = lap("improve_fast", t)
        if params.rins and lp_path and lp_sol is not None and not use_cpsat and left() > RINS_MIN_S:
            # the MIP over the LP's columns around the best plan runs on the second core while the moves below
            # go on; its plan is collected at the end (in-process, on half the time left, with one worker)
            rins_args = (tb, cls, rep, counts, info["columns_table"], lp_sol[1], best)
            if params.num_workers >= 2:
                rins_child = fork_call(
                    lambda: rins(
                        *rins_args, time_limit_s=left() - RINS_RESERVE_S - 0.4, seed=params.random_seed
                    )
                )
                if rins_child is not None:
                    limit -= RINS_RESERVE_S  # the moves below leave the time to collect its plan and go on from it
            else:
                keep_mip(rins(*rins_args, time_limit_s=0.5 * left(), seed=params.random_seed))
            t = lap("rins", t)
        if (
            not use_cpsat
            and (stalled or lp_sol is not None)
            and params.recreate_share > 0
            and not (best.r < 0).any()
            and left() > 1.0
        ):
            # single-job moves stall where a cheaper option is held by several jobs at once: move groups
            # (skipped without the LP where the fast moves alone fill their time, and while jobs are left out:
            # only ``improve`` retries those, and their penalty outweighs any saving here). On the LP path they
            # also run when the fast moves did not stall, with half the time, the other half going to
            # ``improve`` (1,000 jobs, 10 s, seeds 0/1/2: 793.61/663.80/836.25; none: 793.54/663.84/837.48;
            # 85 %: 793.62/663.80 for seeds 0/1)
            rr_share = params.recreate_share if stalled else 0.5
            cand = ruin_recreate(
                tb,
                best,
                m,
                cand_ls,
                time_limit_s=rr_share * share * left(),
                seed=params.random_seed,
                lp=lp_sol,
            )
            if _score(tb, cand) <= best_score:
                best, best_score = cand, _score(tb, cand)
            t = lap("ruin_recreate", t)
    cand = improve(tb, best, nu=nu_ls, time_limit_s=max(0.05, share * left()), seed=params.random_seed)
    if _score(tb, cand) <= best_score:
        best, best_score = cand, _score(tb, cand)
    if not capped and not use_cpsat and not bound_open and left() > 0.5:
        # local search stopped early (no move left): ejection moves over the LP's starts with the time left
        cand = eject_improve(tb, best, cand_ls, time_limit_s=left() - 0.3)
        if _score(tb, cand) <= best_score:
            best, best_score = cand, _score(tb, cand)
    t = lap("local_search", t)
    bound = lower
    status = PlanStatus.FEASIBLE
    cp_status, n_options = "", 0
    gap_abs = best_score - lower
    n_classes = len(rep)
    ub_fix = best_score
    closed = np.isfinite(best_score) and gap_abs <= 1e-6 * max(1.0, abs(best_score))
    if closed:
        status = PlanStatus.OPTIMAL
    elif not use_cpsat:
        notes.append(
            f"cpsat skipped: {n_classes} job classes / {tb.J} jobs is beyond max_cpsat_options="
            f"{params.max_cpsat_options} (8 per class) or max_cpsat_jobs={params.max_cpsat_jobs}"
        )
    elif np.isfinite(best_score) and left() > 0.5:
        _, _, priced = evaluate(tb, m)
        opts = build_options(tb, cls, rep, m, priced, gap_abs, [best], params.max_cpsat_options)
        n_options = len(opts.cls)
        t = lap("options", t)
        if left() > 0.5:
            scale = float(problem.cost_scale)
            built, rows = build_model(tb, opts, cls, rep, counts, best, scale)
            t = lap("cpsat_build", t)
            solver, st = solve_model(built, params, left() - 0.2)
            cp_status = solver.status_name(st)
            t = lap("cpsat_solve", t)
            notes.append(
                f"cpsat options={n_options} classes={n_classes} rows={rows} exact_pruning={opts.exact}"
            )
            if st in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                cand = read_solution(solver, built, opts, cls, tb.J)
                score = _score(tb, cand)
                if score <= best_score + 1e-9 * max(1.0, abs(best_score)):
                    best, best_score = cand, score
                if opts.exact:
                    slack = 0.5 * tb.J / scale
                    bound = max(bound, min(solver.best_objective_bound / scale, ub_fix) - slack)
                    if st == cp_model.OPTIMAL and score <= solver.objective_value / scale + slack:
                        status = PlanStatus.OPTIMAL
            elif st == cp_model.MODEL_INVALID:
                notes.append("cpsat model invalid: " + built.model.validate())
            else:
                notes.append(f"cpsat returned {cp_status}; keeping the heuristic plan")
    if not use_cpsat and bound_open and not closed and np.isfinite(best_score) and left() > 4 * eval_s + 0.5:
        # time left after local search goes to the bound: resume the subgradient ascent from its best point
        # (an iteration costs about two evaluations; the limit is checked after each)
        # without an LP, a share is kept for one more priced placement at the improved multipliers
        replace_s = 0.0 if lp_converged or params.max_lp_jobs >= tb.J else 2.0 * greedy_s + eval_s
        budget = left() - 2.5 * eval_s - 0.3 - replace_s
        if budget > 0:
            lower2, m2, history = subgradient(tb, best_score, start=m, max_iter=10_000, time_limit_s=budget)
            notes.append(f"bound resumed: {len(history)} more subgradient iterations")
            bound = max(bound, lower2)
            t = lap("lagrangian_resumed", t)
            if replace_s and not capped and left() > 1.5 * greedy_s:
                found_m2: list = []
                evaluate(tb, m2, collect=found_m2)
                cand_m2 = Candidates(tb, found_m2)
                cand = place_fast(tb, big_first, cand_m2, m=m2)
                if (cand.r < 0).any():
                    cand = _place_left_out(tb, cand, cand_m2, 0.1 * left())
                cand = improve_fast(tb, cand, cand_ls, time_limit_s=max(0.05, left() - 0.2))
                if _score(tb, cand) < best_score:
                    best, best_score = cand, _score(tb, cand)
                    notes.append("priced placement at the resumed multipliers improved the plan")
                t = lap("priced_greedy_resumed", t)
    if (
        not capped
        and not use_cpsat
        and params.recreate_share > 0
        and np.isfinite(best_score)
        and not (best.r < 0).any()
        and left() > 2.0 + 2 * eval_s
    ):
        # time no step above could use (the resumed ascent keeps a share it may not need): more group moves
        cand = ruin_recreate(
            tb,
            best,
            m,
            cand_ls,
            time_limit_s=left() - 0.3 - 2 * eval_s,
            seed=params.random_seed + 1,
            lp=lp_sol,
        )
        if _score(tb, cand) <= best_score:
            best, best_score = cand, _score(tb, cand)
        t = lap("ruin_recreate_end", t)
    if rins_child is None and np.isfinite(best_score) and left() > 1.0 + eval_s:
        # time still left (beyond max_master_jobs the resumed ascent may not fit, and group moves wait for jobs left
        # out): more single-job moves, which retry the jobs left out first
        cand = improve(tb, best, nu=nu_ls, time_limit_s=left() - 0.5 - eval_s, seed=params.random_seed)
        if _score(tb, cand) <= best_score:
            best, best_score = cand, _score(tb, cand)
        t = lap("improve_end", t)
    if rins_child is not None:
        limit += RINS_RESERVE_S
        if keep_mip(rins_child.result(timeout_s=max(0.0, left() - 0.3))):
            cand = improve_fast(tb, best, cand_ls, time_limit_s=max(0.02, left() - 0.2))
            if _score(tb, cand) < best_score:
                best, best_score = cand, _score(tb, cand)
        if params.recreate_share > 0 and not (best.r < 0).any() and left() > 0.5:
            # the time the MIP's worker gave back (it ends ~1 s early so that its plan arrives in time)
            cand = ruin_recreate(
                tb, best, m, cand_ls, time_limit_s=left() - 0.2, seed=params.random_seed + 2, lp=lp_sol
            )
            if _score(tb, cand) < best_score:
                best, best_score = cand, _score(tb, cand)
        t = lap("rins_collect", t)
    if ascent is not None:
        got = ascent.result(timeout_s=max(0.0, left() - 0.1))
        if got is not None:
            bound = max(bound, float(got[0]))
        else:
            notes.append("bound: the second worker's ascent gave no result in time")
    if not np.isfinite(best_score):
        notes.append("no plan found within the cost cap")
    penalised = penalised_objective(tb, best)
    bound = min(bound, penalised)
    stats = SolveStats(
        wall_s=time.perf_counter() - t0,
        num_jobs=len(problem.jobs),
        num_classes=n_classes,
        num_options=n_options,
        cp_status=cp_status,
        phases=phases,
        notes=tuple(notes),
    )
    reason = UnplannedReason.CAPACITY
    if not _cap_ok(tb, best):
        best, status, reason = Choice.empty(tb.J), PlanStatus.NO_SOLUTION, UnplannedReason.NOT_SOLVED
    return assemble_plan(
        tb,
        best,
        solver=name,
        status=status,
        bound=bound,
        penalised=penalised,
        stats=stats,
        left_out_reason=reason,
    )
