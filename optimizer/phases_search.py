"""Phases of the planner that improve the plan: priced placements, ejections and repair for the jobs left out,
fast single-job moves, the MIP around the best plan, group moves (ruin and recreate) and local search.

Each is ``phase(run: SolveRun) -> None`` (see :mod:`optimizer.pipeline`); the order is :data:`optimizer.solve.PIPELINE`.
"""

from __future__ import annotations

import time

from optimizer.bound import Choice, evaluate
from optimizer.candidates import Candidates, improve_fast, place_fast
from optimizer.eject import eject_improve
from optimizer.heuristic import improve, place
from optimizer.parallel import fork_call
from optimizer.phases_bound import place_left_out
from optimizer.pipeline import RINS_MIN_S, RINS_RESERVE_S, RINS_WORKER_MIN_S, SHARE, SolveRun
from optimizer.rechunk import rechunk
from optimizer.recreate import ruin_recreate
from optimizer.repair import repair_left_out
from optimizer.submip import rins


def priced_placements(run: SolveRun) -> None:
    """Greedy placements at the capacity prices (objective + prices), biggest jobs first and in greedy order."""
    tb, m, big_first = run.tb, run.m, run.big_first
    tries = [(m, m.nu, big_first), (m, m.nu, run.order)] + ([(m, m.nu * 2 + 1e-3, big_first)] if run.capped else [])
    if run.lp_sol is not None and not run.lp_path:
        # the master LP's rounding starts far lower than the priced placements (10,000 jobs, seed 0: 9434
        # against 9729 before local search), whose time goes to the search instead
        tries = []
    if run.lp_path:
        # the LP is degenerate: duals of the last rounds price the same capacity differently, and which of
        # them leads to the lowest plan varies (placements take ~0.1 s at 1,000 jobs)
        tries += [(d, d.nu, big_first) for d in run.info.get("recent_duals", [])[-4:-1]]
    for k, (m_k, nu, order_k) in enumerate(tries):
        if run.left() < (1.5 if k else 1.0) * run.greedy_s + SHARE["priced_min_left"] * run.limit or (
            k and not run.lp_path and run.left() < SHARE["priced_more_min_left"] * run.limit
        ):
            break  # another placement would not finish in time
        if run.capped:
            cand = place(tb, order_k, m=m_k, nu=nu)
        else:
            found_m: list = []
            evaluate(tb, m_k, collect=found_m)
            cand_m = Candidates(tb, found_m)
            cand = place_fast(tb, order_k, cand_m, m=m_k)
            if (cand.r < 0).any():  # a job left out would hide a better plan behind its penalty
                cand = place_left_out(run, cand, cand_m, SHARE["place_left_out"] * run.left())
        run.best.offer(cand, start=True)
    run.lap("priced_greedy")


def eject_left_out(run: SolveRun) -> None:
    """Ejection moves for the jobs the best plan leaves out, over candidates at capacity prices (uncongested
    slots)."""
    if run.capped or not run.best.leaves_out:
        return
    found_m: list = []
    evaluate(run.tb, run.m, collect=found_m)
    cand = place_left_out(run, run.best.plan, Candidates(run.tb, found_m), SHARE["eject_left_out"] * run.left())
    run.best.offer(cand)
    run.lap("eject_left_out")


def repair(run: SolveRun) -> None:
    """Repair moves for the jobs still left out, over the candidates at true cost."""
    if run.capped or not run.best.leaves_out:
        return
    cand = repair_left_out(run.tb, run.best.plan, time_limit_s=SHARE["repair"] * run.left())
    run.best.offer(cand)
    run.lap("repair")


def fast_moves(run: SolveRun) -> None:
    """Fast single-job moves over the candidates. On the LP path every start (greedy, rounding, priced placements)
    without jobs left out goes through them: which one ends lowest varies (seed 1: 711 -> 689 from the best start,
    752 -> 666 from greedy)."""
    if run.capped:
        return
    best = run.best
    fast_s = max(0.05, SHARE["improve_fast"] * run.share * run.left())
    pool = [best.plan]
    if run.lp_path:
        pool += [c for c in best.starts if c is not best.plan and not (c.r < 0).any()]
    run.stalled = True
    for start in pool:
        fast_t0 = time.perf_counter()
        cand = improve_fast(run.tb, start, run.cand_ls, time_limit_s=fast_s / len(pool))
        run.stalled &= time.perf_counter() - fast_t0 < fast_s / len(pool)  # stopped on a pass without a move
        best.offer(cand, ties=True)
    run.lap("improve_fast")


def _keep_mip(run: SolveRun, got: Choice | None) -> bool:
    """Note the MIP's plan and keep it if it is better; False when there is none (none in time, or one that broke
    a capacity)."""
    if got is None:
        run.notes.append("rins: no plan (none in time, or one refused by the capacity check)")
        return False
    run.best.offer(got, label="rins", extra=f" (moves {run.best.score:.6g})")
    return True


def rins_start(run: SolveRun) -> None:
    """On the LP path, the MIP over the LP's columns around the best plan runs on the second core while the moves
    below go on, with at least ``RINS_WORKER_MIN_S`` left; its plan is collected at the end (in-process, on a share of
    the time left, with one worker and at least ``RINS_MIN_S`` left)."""
    params = run.params
    if (
        run.capped
        or not params.rins
        or not run.lp_path
        or run.lp_sol is None
        or run.use_cpsat
        or run.left() <= (RINS_WORKER_MIN_S if params.num_workers >= 2 else RINS_MIN_S)
    ):
        return
    args = (run.tb, run.cls, run.rep, run.counts, run.info["columns_table"], run.lp_sol[1], run.best.plan)
    if params.num_workers >= 2:
        budget = run.left  # read in the child, when it starts
        run.rins_child = fork_call(
            lambda: rins(*args, time_limit_s=budget() - RINS_RESERVE_S - 0.4, seed=params.random_seed)
        )
        if run.rins_child is not None:
            run.limit -= RINS_RESERVE_S  # the moves below leave the time to collect its plan and go on from it
    else:
        _keep_mip(run, rins(*args, time_limit_s=SHARE["rins_in_process"] * run.left(), seed=params.random_seed))
    run.lap("rins")


def group_moves(run: SolveRun) -> None:
    """Single-job moves stall where a cheaper option is held by several jobs at once: move groups (skipped without
    the LP where the fast moves alone fill their time). On the LP path they also run when the fast moves did not
    stall, with a share of the time, the rest going to ``improve``. A plan that leaves jobs out goes through them
    too: a group move puts a job left out back at its priced best with the jobs holding those slots around it."""
    params = run.params
    if (
        run.capped
        or run.use_cpsat
        or not (run.stalled or run.lp_sol is not None)
        or params.recreate_share <= 0
        or run.left() <= 1.0
    ):
        return
    rr_share = params.recreate_share if run.stalled else SHARE["recreate_not_stalled"]
    cand = ruin_recreate(
        run.tb,
        run.best.plan,
        run.m,
        run.cand_ls,
        time_limit_s=rr_share * run.share * run.left(),
        seed=params.random_seed,
        lp=run.lp_sol,
    )
    run.best.offer(cand, ties=True)
    run.lap("ruin_recreate")


def local_search(run: SolveRun) -> None:
    """Single-job moves (``improve``, which also retries the jobs left out); when they stop early (no move left)
    and nothing else needs the time, ejection moves over the LP's starts."""
    best = run.best
    cand = improve(
        run.tb, best.plan, nu=run.nu_ls, time_limit_s=max(0.05, run.share * run.left()), seed=run.params.random_seed
    )
    best.offer(cand, ties=True)
    if not run.capped and not run.use_cpsat and not run.bound_open and run.left() > 0.5:
        best.offer(eject_improve(run.tb, best.plan, run.cand_ls, time_limit_s=run.left() - 0.3), ties=True)
    run.lap("local_search")


def rechunk_moves(run: SolveRun) -> None:
    """Interruptible jobs to their cheapest two-chunk run over every split of the work (the model's options hold
    them to one split), costliest first."""
    if run.capped or not run.tb.intr.any() or not run.best.found:
        return
    run.best.offer(rechunk(run.tb, run.best.plan, time_limit_s=SHARE["rechunk"] * run.left()))
    run.lap("rechunk")


def group_moves_end(run: SolveRun) -> None:
    """Time no step above could use (the resumed ascent keeps a share it may not need): more group moves."""
    params = run.params
    if (
        run.capped
        or run.use_cpsat
        or params.recreate_share <= 0
        or not run.best.found
        or run.left() <= 2.0 + 2 * run.eval_s
    ):
        return
    cand = ruin_recreate(
        run.tb,
        run.best.plan,
        run.m,
        run.cand_ls,
        time_limit_s=run.left() - 0.3 - 2 * run.eval_s,
        seed=params.random_seed + 1,
        lp=run.lp_sol,
    )
    run.best.offer(cand, ties=True)
    run.lap("ruin_recreate_end")


def improve_end(run: SolveRun) -> None:
    """Time still left (beyond max_master_jobs the resumed ascent may not fit): more single-job moves, which retry
    the jobs left out first."""
    if run.rins_child is not None or not run.best.found or run.left() <= 1.0 + run.eval_s:
        return
    cand = improve(
        run.tb, run.best.plan, nu=run.nu_ls, time_limit_s=run.left() - 0.5 - run.eval_s, seed=run.params.random_seed
    )
    run.best.offer(cand, ties=True)
    run.lap("improve_end")


def rins_collect(run: SolveRun) -> None:
    """The MIP's plan from the second worker, fast moves from it, and group moves in the time its worker gave back
    (it ends ~1 s early so that its plan arrives in time)."""
    if run.rins_child is None:
        return
    run.limit += RINS_RESERVE_S
    best = run.best
    if _keep_mip(run, run.rins_child.result(timeout_s=max(0.0, run.left() - 0.3))):
        best.offer(improve_fast(run.tb, best.plan, run.cand_ls, time_limit_s=max(0.02, run.left() - 0.2)))
    if run.params.recreate_share > 0 and run.left() > 0.5:
        cand = ruin_recreate(
            run.tb,
            best.plan,
            run.m,
            run.cand_ls,
            time_limit_s=run.left() - 0.2,
            seed=run.params.random_seed + 2,
            lp=run.lp_sol,
        )
        best.offer(cand)
    run.lap("rins_collect")
