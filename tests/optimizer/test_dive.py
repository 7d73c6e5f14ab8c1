"""The dive on the column-generation LP (``optimizer.dive``)."""

from __future__ import annotations

import numpy as np

from optimizer import SolveParams, check_plan, solve
from tests.optimizer.conftest import brute_force, job, problem, region, tiny_random


def _master(tb):
    from optimizer.cpsat import build_classes
    from optimizer.heuristic import greedy_order, place
    from optimizer.lp import column_generation

    cls, rep, counts = build_classes(tb)
    _, _, info = column_generation(tb, cls, rep, counts, [place(tb, greedy_order(tb))], time_limit_s=10.0,
                                   keep_master=True)
    assert info["converged"]
    return rep, counts, info["master"]


def _fits(tb, ch) -> bool:
    from optimizer.bound import usage

    gpu, kw = usage(tb, ch)
    return bool((gpu <= tb.cap).all() and (kw <= tb.kw_cap + 1e-9).all())


def _medium(seed: int):
    """30 jobs of 1-4 GPUs in three 16-slot regions whose power budget allows 5 of their 8 GPUs at once (about
    half their GPU-slots are asked for, more in the cheap hours)."""
    rng = np.random.default_rng(seed)
    regions = [region(n, rng.integers(5, 100, 16), gpus=8, budget_kw=3.6) for n in ("A", "B", "C")]
    jobs = [
        job(f"j{i}", gpus=int(rng.choice([1, 2, 4])), dur=int(rng.integers(1, 6)), n_slots=16,
            interruptible=bool(i % 5 == 0), min_chunk_slots=1, checkpoint_overhead_slots=1)
        for i in range(30)
    ]
    return problem(regions, jobs)


def test_the_dive_plan_fits_every_capacity_and_places_every_job():
    from optimizer.dive import lp_dive
    from optimizer.heuristic import penalised_objective
    from optimizer.tables import build_tables

    rng = np.random.default_rng(11)
    for _ in range(8):
        pb = tiny_random(rng)
        tb = build_tables(pb)
        rep, counts, master = _master(tb)
        got = lp_dive(tb, master, rep, counts, time_limit_s=5.0)
        assert _fits(tb, got) and not (got.r < 0).any()
        assert penalised_objective(tb, got) >= brute_force(pb) - 1e-9  # no plan beats the optimum
    for seed in (1, 2):
        tb = build_tables(_medium(seed))
        rep, counts, master = _master(tb)
        got = lp_dive(tb, master, rep, counts, time_limit_s=5.0)
        # here an early fixing can leave a job no room (the planner then keeps another start): never a plan that
        # breaks a capacity
        assert _fits(tb, got)
        runs = got.l2[got.r >= 0] > 0
        # a two-chunk run keeps one slot or more between its chunks (the LP may hold overlapping ones)
        assert (got.s2[got.r >= 0][runs] >= (got.s1 + got.l1)[got.r >= 0][runs] + 1).all()


def test_a_dive_out_of_time_still_returns_a_whole_plan():
    from optimizer.dive import lp_dive
    from optimizer.tables import build_tables

    rng = np.random.default_rng(5)
    regions = [region(n, rng.integers(5, 100, 16), gpus=8) for n in ("A", "B")]
    pb = problem(regions, [job(f"j{i}", gpus=int(rng.choice([1, 2, 4])), dur=3, n_slots=16) for i in range(20)])
    tb = build_tables(pb)
    rep, counts, master = _master(tb)
    got = lp_dive(tb, master, rep, counts, time_limit_s=0.0)  # no step: the LP's mass, then the duals' scan
    assert _fits(tb, got) and not (got.r < 0).any()


def test_solve_dives_on_both_workers_or_on_one_and_keeps_a_checked_plan():
    pb = _medium(4)
    two = solve(pb, SolveParams(time_limit_s=3.0, num_workers=2, random_seed=3, max_cpsat_jobs=0))
    assert check_plan(pb, two).ok and not two.unplanned
    notes = two.stats.notes
    assert any(n.startswith("lp dive 0 objective=") for n in notes)
    assert any(n.startswith("lp dive 1 objective=") for n in notes)  # the second worker's, with more per step
    one = solve(pb, SolveParams(time_limit_s=3.0, num_workers=1, random_seed=3, max_cpsat_jobs=0))
    assert check_plan(pb, one).ok and not one.unplanned
    dives = [n for n in one.stats.notes if n.startswith("lp dive") and not n.startswith("lp dive repaired")]
    assert dives == [next(n for n in one.stats.notes if n.startswith("lp dive 0"))]


def test_the_portfolio_dives_in_children_and_leaves_the_lp_as_it_was():
    from optimizer.dive import DIVE_LANES, dive_portfolio
    from optimizer.tables import build_tables

    tb = build_tables(_medium(6))
    rep, counts, master = _master(tb)
    n_columns = len(master.columns)
    plans = dive_portfolio(tb, master, rep, counts, time_limit_s=20.0, workers=2)
    # every lane's first dive ends well within 20 s here, and so does the first lane's second
    assert len(plans) == sum(len(lane) for lane in DIVE_LANES)
    assert all(_fits(tb, p) for p in plans)
    # the dives fixed and priced their own copies: this LP has no bound raised and no column added
    assert len(master.columns) == n_columns
    assert all(var.lower_bound == 0.0 for _, var in master.column_vars)
    alone = dive_portfolio(tb, master, rep, counts, time_limit_s=20.0, workers=1)
    assert len(alone) == 1 and _fits(tb, alone[0])


def _counting_solve(master, fixed_at_solve: list[int]):
    """``master.solve`` that first records the jobs fixed so far (the sum of the columns' lower bounds)."""
    solve = master.solve

    def counted(*args, **kwargs):
        fixed_at_solve.append(int(sum(var.lower_bound for _, var in master.column_vars)))
        return solve(*args, **kwargs)

    return counted


def test_the_dive_ends_without_re_solving_for_a_step_that_fixes_few_jobs():
    from optimizer.dive import TAIL_SHARE, lp_dive
    from optimizer.tables import build_tables

    batch = 8
    for seed in (1, 2, 3, 5):
        tb = build_tables(_medium(seed))
        rep, counts, master = _master(tb)
        fixed_at_solve: list[int] = []
        master.solve = _counting_solve(master, fixed_at_solve)
        got = lp_dive(tb, master, rep, counts, time_limit_s=5.0, batch=batch)
        assert _fits(tb, got)
        # every re-solve follows a step that fixed at least a quarter of the batch (the first step aside): the
        # tail of steps that cap dozens of columns for a job or two is left to the greedy completion
        steps = np.diff(np.array(fixed_at_solve))
        assert (steps >= int(TAIL_SHARE * batch)).all()
