"""Phases of the planner that give the bound and the capacity prices: the LP (column generation, rounding, dive),
the Lagrangian ascent and its master LP, CP-SAT at the end, and the resumed or second-worker ascent.

Each is ``phase(run: SolveRun) -> None`` (see :mod:`optimizer.pipeline`); the order is :data:`optimizer.solve.PIPELINE`.
"""

from __future__ import annotations

import time
from collections import deque

from ortools.sat.python import cp_model

from optimizer.bound import Choice, evaluate, subgradient
from optimizer.candidates import Candidates, improve_fast, place_fast
from optimizer.coarse_lp import coarse_columns
from optimizer.cpsat import build_model, build_options, options_of, read_solution, solve_model
from optimizer.dive import dive_portfolio
from optimizer.eject import eject_improve
from optimizer.fixing import enumerate_options
from optimizer.lp import column_generation
from optimizer.master import TRAIL_ITERATIONS, master_guide
from optimizer.parallel import start_ascent
from optimizer.pipeline import SHARE, SolveRun, score_plan
from optimizer.plan import PlanStatus
from optimizer.repair import repair_left_out
from optimizer.rounding import lp_candidates, round_lp


def place_left_out(run: SolveRun, ch: Choice, priced: Candidates, time_limit_s: float) -> Choice:
    """Ejection moves for the jobs ``ch`` leaves out, over candidates at capacity prices (uncongested slots)."""
    return eject_improve(run.tb, ch, priced, time_limit_s=time_limit_s, max_evict=30, left_out_only=True)


def lp_colgen(run: SolveRun) -> None:
    """Column generation on the LP of the aggregated model: the bound, the duals and a rounded plan."""
    if not run.lp_path:
        return
    best = run.best
    budget = SHARE["lp_colgen"] * run.left()
    t = time.perf_counter()
    seeded = None
    if run.params.coarse_lp_share > 0:
        # the hourly LP first: its columns and duals on the fine slots start the fine LP (``optimizer.coarse_lp``)
        seeded = coarse_columns(run.tb, run.cls, run.rep, time_limit_s=run.params.coarse_lp_share * budget)
    if seeded is not None:
        run.notes.append(f"coarse lp: {seeded[4]}, fine bound at its duals {seeded[2]:.6g}")
    lower, run.m, run.info = column_generation(
        run.tb,
        run.cls,
        run.rep,
        run.counts,
        [best.plan, run.ch0],
        time_limit_s=budget - (time.perf_counter() - t),
        keep_master=True,
        columns=None if seeded is None else (seeded[0], seeded[1]),
        start=None if seeded is None else (seeded[2], seeded[3]),
    )
    run.lower = max(run.lower, lower)  # -inf when no round finished in time
    info = run.info
    run.lap("lp_colgen")
    blocks = run.tb.T if run.tb.blocks is None else len(run.tb.blocks)
    run.notes.append(
        f"lp rounds={info['rounds']} columns={info['columns']} converged={info['converged']} "
        f"lp_value={info['lp_value']} capacity_blocks={blocks}"
    )
    run.lp_converged = bool(info["converged"])
    run.cand_ls = lp_candidates(run.tb, run.cls, info["columns_table"], run.found0)  # more starts for local search
    if info["primal"] is not None:
        run.lp_sol = (run.cls, info["primal"])
        rounded = round_lp(run.tb, run.cls, info["primal"], run.m)
        best.offer(rounded, start=True, label="lp rounding", extra=f" (greedy {best.score:.6g})")
        run.lap("lp_rounding")


def lp_dive(run: SolveRun) -> None:
    """Dives on the LP: a few jobs fixed a step, the LP re-solved and priced between steps."""
    if not run.lp_path:
        return
    master = run.info.pop("master", None)  # the LP's solver state: not needed after the dive
    if run.info["primal"] is None or run.left() <= SHARE["lp_dive_min_left"] * run.limit:
        return
    # dives with different steps run side by side (which one ends lowest varies) and every plan is a start
    dives = dive_portfolio(
        run.tb,
        master,
        run.rep,
        run.counts,
        time_limit_s=SHARE["lp_dive"] * run.left(),
        workers=run.params.num_workers,
    )
    for k, dived in enumerate(dives):
        run.best.offer(dived, start=True, label=f"lp dive {k}")
    run.lap("lp_dive")
    # a dive that leaves a job or two out is otherwise often the closest plan to the LP (1,000 jobs over one day,
    # seed 3: 761.7 + one job's penalty of 157.3 against 814.9 for the best plan after the moves): its jobs left out
    # are placed by ejection moves and repair, and the plan joins the starts of the fast moves
    short = [d for d in dives if (d.r < 0).any()]
    # the repair takes milliseconds a job and a plan a few jobs short is often the closest to the LP: it runs on
    # whatever time is left (1,000 jobs over four days at 15-minute slots, both cores busy, seed 5: the refined
    # dive's plan was dropped with 1.2 s left and the plan came from the greedy start, 11 % above the bound)
    if short and not run.capped and run.left() > 0.05:
        found_m: list = []
        evaluate(run.tb, run.m, collect=found_m)
        priced = Candidates(run.tb, found_m)
        each = SHARE["dive_repair"] * run.left() / len(short)
        for k, dived in enumerate(short):
            cand = place_left_out(run, dived, priced, 0.5 * each)
            if (cand.r < 0).any():
                cand = repair_left_out(run.tb, cand, time_limit_s=0.5 * each)
            # a plan still short is offered too (its jobs left out may cost less than the others' moves), but only a
            # whole plan is a start for the fast moves
            run.best.offer(cand, start=not (cand.r < 0).any(), label=f"lp dive repaired {k}")
        run.lap("lp_dive_repair")


def lp_lagrangian(run: SolveRun) -> None:
    """Subgradient steps from the LP's duals when the LP did not converge."""
    if not run.lp_path or run.info["converged"] or run.left() <= SHARE["lp_lagrangian_min_left"] * run.limit:
        return
    lower2, m2, _ = subgradient(run.tb, run.upper, start=run.m, time_limit_s=SHARE["lp_lagrangian"] * run.left())
    if lower2 > run.lower:
        run.lower, run.m = lower2, m2
    run.lap("lagrangian")


def lagrangian(run: SolveRun) -> None:
    """Off the LP path: subgradient ascent on the Lagrangian dual (bound and prices), then, up to
    ``max_master_jobs``, the master LP over the options of its last iterations, rounded to a plan, while the
    ascent goes on on the second worker."""
    if run.lp_path:
        return
    tb, params = run.tb, run.params
    use_master = not run.capped and params.max_master_jobs >= tb.J
    trail: deque[Choice] = deque(maxlen=TRAIL_ITERATIONS)
    lower, run.m, history = subgradient(
        tb,
        run.upper,
        max_iter=300,
        time_limit_s=max(0.05, SHARE["lagrangian"] * run.left()),
        start=run.m,  # zero, or the hourly ascent's prices (optimizer.coarse)
        trail=trail if use_master else None,
    )
    run.lower = max(run.lower, lower)
    run.lap("lagrangian")
    run.notes.append(f"lagrangian iterations={len(history)}")
    # the later phases keep time for an evaluation by ``run.eval_s``: the first one's time (shapes and cached starts
    # built: 2.8 CPU s at 100,000 jobs against 0.4-0.6 s for each after it) until an ascent iteration, an evaluation
    # and more, is measured (the master LP's prediction below is calibrated on the first one)
    warm_s = min(run.eval_s, run.phases["lagrangian"] / max(1, len(history)))
    if not use_master:
        run.eval_s = warm_s
        return
    if not run.use_cpsat:  # the ascent goes on on the second core while the master LP is solved here
        run.ascent = start_ascent(tb, params.num_workers, run.polyak_target(), run.m, run.eval_s, run.left())
    # if the master LP does not fit in its time, the priced placements follow
    guide = master_guide(
        tb,
        run.cls,
        run.rep,
        run.counts,
        list(trail),
        run.m,
        [run.best.plan, run.ch0],
        time_limit_s=SHARE["master_lp"] * run.left(),
        iteration_s=warm_s,
        notes=run.notes,
        score=score_plan,
    )
    run.lap("master_lp")
    run.eval_s = warm_s
    if guide is not None:
        lp_value, primal, table, cand = guide
        run.lp_sol = (run.cls, primal)
        run.cand_ls = lp_candidates(tb, run.cls, table, run.found0)
        run.notes.append(
            f"master lp columns={len(table)} value={lp_value:.6g} rounding={score_plan(tb, cand):.6g}"
        )
        run.best.offer(cand, start=True)


def bound_worker(run: SolveRun) -> None:
    """While the bound is still open and CP-SAT will not run, the subgradient ascent goes on on the second
    worker; the local search's share of the time follows from what else still needs it."""
    run.bound_open = not run.lp_converged
    if run.ascent is None and run.bound_open and not run.use_cpsat:
        run.ascent = start_ascent(
            run.tb, run.params.num_workers, run.polyak_target(), run.m, run.eval_s, run.left()
        )
    if run.ascent is not None:
        run.bound_open = False
        run.notes.append("bound: subgradient ascent on a second worker")
    elif run.bound_open and not run.use_cpsat:
        # the search keeps half its time back for the resumed ascent (``resume_bound``) only where that time could
        # hold one; else the time was lost (1,000 jobs at 15-minute slots in 10 s: ~1 s idle at the end)
        kept = (1 - SHARE["improve_fast"] * SHARE["local_search_shared"]) * (1 - SHARE["local_search_shared"])
        if kept * run.left() <= 4 * run.eval_s + 0.5:
            run.bound_open = False
            run.notes.append(f"bound: no time for a resumed ascent ({run.left():.2f} s left); the search takes it")
    run.share = SHARE["local_search_shared"] if run.use_cpsat or run.bound_open else SHARE["local_search"]
    run.nu_ls = run.m.nu if run.capped else 0.0


def cpsat(run: SolveRun) -> None:
    """The bound so far, closed if the plan meets it; else, up to ``max_cpsat_jobs``, CP-SAT over aggregated job
    classes, warm-started from the best plan, tightens plan and bound."""
    tb, params, best = run.tb, run.params, run.best
    run.bound = run.lower
    gap_abs = best.score - run.lower
    ub_fix = best.score
    run.closed = best.found and gap_abs <= 1e-6 * max(1.0, abs(best.score))
    if run.closed:
        run.status = PlanStatus.OPTIMAL
        return
    if not run.use_cpsat:
        run.notes.append(
            f"cpsat skipped: {len(run.rep)} job classes / {tb.J} jobs is beyond max_cpsat_options="
            f"{params.max_cpsat_options} (8 per class) or max_cpsat_jobs={params.max_cpsat_jobs}"
        )
        return
    if not best.found or run.left() <= 0.5:
        return
    # every option within the reduced-cost gap, every chunking of interruptible jobs of at most two chunks
    # included (``optimizer.fixing``): the CP-SAT bound then holds for the Problem; else the pruned options
    listed = enumerate_options(tb, run.cls, run.rep, run.m, best.score, params.max_cpsat_options)
    if listed is not None and listed[2]:
        opts = options_of(tb, run.cls, run.rep, listed[0], [best.plan], exact=True)
    else:
        _, _, priced = evaluate(tb, run.m)
        opts = build_options(tb, run.cls, run.rep, run.m, priced, gap_abs, [best.plan], params.max_cpsat_options)
    run.n_options = len(opts.cls)
    run.lap("options")
    if run.left() <= 0.5:
        return
    scale = float(tb.problem.cost_scale)
    built, rows = build_model(tb, opts, run.cls, run.rep, run.counts, best.plan, scale)
    run.lap("cpsat_build")
    solver, st = solve_model(built, params, run.left() - 0.2)
    run.cp_status = solver.status_name(st)
    run.lap("cpsat_solve")
    run.notes.append(f"cpsat options={run.n_options} classes={len(run.rep)} rows={rows} exact_pruning={opts.exact}")
    if st in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        cand = read_solution(solver, built, opts, run.cls, tb.J)
        score = score_plan(tb, cand)
        best.offer(cand, ties=True, rel_tol=1e-9)
        if opts.exact:
            slack = 0.5 * tb.J / scale
            cp_bound = min(solver.best_objective_bound / scale, ub_fix) - slack
            run.bound = max(run.bound, cp_bound)
            if listed is not None and listed[2]:
                # the options hold every chunking a plan may use (the bound so far may hold for the model's only)
                run.bound_any_chunking = cp_bound
            if st == cp_model.OPTIMAL and score <= solver.objective_value / scale + slack:
                run.status = PlanStatus.OPTIMAL
    elif st == cp_model.MODEL_INVALID:
        run.notes.append("cpsat model invalid: " + built.model.validate())
    else:
        run.notes.append(f"cpsat returned {run.cp_status}; keeping the heuristic plan")


def resume_bound(run: SolveRun) -> None:
    """Time left after local search goes to the bound: resume the subgradient ascent from its best point (an
    iteration costs about two evaluations; the limit is checked after each). Without an LP, a share is kept for
    one more priced placement at the improved multipliers."""
    tb, params, best = run.tb, run.params, run.best
    if run.use_cpsat or not run.bound_open or run.closed or not best.found or run.left() <= 4 * run.eval_s + 0.5:
        return
    replace_s = 0.0 if run.lp_converged or params.max_lp_jobs >= tb.J else 2.0 * run.greedy_s + run.eval_s
    budget = run.left() - 2.5 * run.eval_s - 0.3 - replace_s
    if budget <= 0:
        return
    lower2, m2, history = subgradient(tb, best.score, start=run.m, max_iter=10_000, time_limit_s=budget)
    run.notes.append(f"bound resumed: {len(history)} more subgradient iterations")
    run.bound = max(run.bound, lower2)
    run.lap("lagrangian_resumed")
    if not replace_s or run.capped or run.left() <= 1.5 * run.greedy_s:
        return
    found_m2: list = []
    evaluate(tb, m2, collect=found_m2)
    cand_m2 = Candidates(tb, found_m2)
    cand = place_fast(tb, run.big_first, cand_m2, m=m2)
    if (cand.r < 0).any():
        cand = place_left_out(run, cand, cand_m2, SHARE["place_left_out"] * run.left())
    cand = improve_fast(tb, cand, run.cand_ls, time_limit_s=max(0.05, run.left() - 0.2))
    if best.offer(cand):
        run.notes.append("priced placement at the resumed multipliers improved the plan")
    run.lap("priced_greedy_resumed")


def collect_ascent(run: SolveRun) -> None:
    """The second worker's bound, if it arrives in time, and its multipliers when that bound is higher: the bound
    over every chunking (``chunking.valid_bound``) is taken at ``run.m`` after this phase, and at the first
    worker's older multipliers it could undercut the bound the second worker reached."""
    if run.ascent is None:
        return
    got = run.ascent.result(timeout_s=max(0.0, run.left() - 0.1))
    if got is not None:
        if float(got[0]) > run.bound:
            run.m = got[1]
            run.notes.append(f"bound: the second worker's multipliers kept ({float(got[0]):.6g} > {run.bound:.6g})")
        run.bound = max(run.bound, float(got[0]))
    else:
        run.notes.append("bound: the second worker's ascent gave no result in time")

