"""Coarse to fine (issue 27): on quarter-hour slots the same jobs are planned on whole hours first and that plan,
read on the quarter-hours, is a start of the fine search, so the fine plan never costs more than it."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from optimizer import Problem, SolveParams, check_plan, solve
from optimizer.assemble import assemble_plan
from optimizer.bound import Multipliers, evaluate, subgradient
from optimizer.candidates import Candidates
from optimizer.coarse import coarse_problem, complete, lift, lift_prices
from optimizer.heuristic import greedy_order, penalised_objective
from optimizer.plan import PlanStatus, SolveStats
from optimizer.tables import build_tables
from tests.optimizer.conftest import H100, START, brute_force, job, region


def _quarter_hours(rng, *, hours=12, n_jobs=14, start=START, dip=True) -> Problem:
    """Quarter-hour slots from ``start`` with hourly prices held, a quarter-hour GPU dip, jobs released mid-hour,
    some interruptible (chunks of at least 5 slots, a 3-slot overhead)."""
    n = 4 * hours
    prices = np.repeat(rng.integers(5, 100, hours), 4).astype(float)
    inv = [6] * n
    if dip:
        inv[9] = 2  # one quarter-hour with fewer GPUs: the hour holding it offers 2
    regions = [
        region("A", prices, gpus=6, budget_kw=6.0, inventory_per_slot={"H100": tuple(inv)}),
        region("B", prices[::-1].copy(), gpus=6, budget_kw=6.0),
    ]
    jobs = []
    for i in range(n_jobs):
        dur = int(rng.integers(1, 14))
        rel = int(rng.integers(0, n // 2))
        dl = min(n, rel + dur + int(rng.integers(4, 20)))
        intr = bool(i % 3 == 0 and dur >= 10)
        jobs.append(
            job(
                f"j{i}",
                gpus=int(rng.choice([1, 2, 4])),
                dur=dur,
                rel=rel,
                dl=dl,
                n_slots=n,
                interruptible=intr,
                min_chunk_slots=5 if intr else 1,
                checkpoint_overhead_slots=3 if intr else 0,
            )
        )
    return Problem(start, 15, n, tuple(regions), (H100,), tuple(jobs))


def test_hourly_problem_is_a_restriction_of_the_quarter_hour_one():
    pb = _quarter_hours(np.random.default_rng(0), start=START + timedelta(minutes=30))
    coarse = coarse_problem(pb)
    assert coarse is not None
    hourly = coarse.problem
    # slot 0 at :30: the first whole hour starts at fine slot 2; 11 whole hours follow
    assert (coarse.first, coarse.per_hour, hourly.slot_minutes, hourly.n_slots) == (2, 4, 60, 11)
    assert hourly.start == START + timedelta(hours=1)
    a = hourly.regions[0]
    assert a.price_per_mwh[0] == np.mean(pb.regions[0].price_per_mwh[2:6])  # the mean of the hour's slots
    assert a.inventory_per_slot["H100"][1] == 2  # fine slot 9 lies in the second whole hour (slots 6-9)
    fine = {j.job_id: j for j in pb.jobs}
    for j in hourly.jobs:
        f = fine[j.job_id]
        # the hourly window lies inside the fine one, hourly lengths cover the fine ones
        assert 2 + 4 * j.release_slot >= f.release_slot
        assert 2 + 4 * j.deadline_slot <= f.deadline_slot
        assert 4 * j.duration_slots["H100"] >= f.duration_slots["H100"]
        assert 4 * j.min_chunk_slots >= f.min_chunk_slots
    # hourly grids and grids that do not divide the hour have no coarser grid here
    assert (
        coarse_problem(Problem(START, 60, 4, (region("A", [1.0] * 4),), (H100,), (job("x", n_slots=4),)))
        is None
    )


def test_the_hourly_plan_read_on_quarter_hours_passes_the_checker():
    for seed in range(6):
        pb = _quarter_hours(np.random.default_rng(seed), start=START + timedelta(minutes=15 * (seed % 4)))
        coarse = coarse_problem(pb)
        assert coarse is not None
        hourly = solve(coarse.problem, SolveParams(time_limit_s=2.0, num_workers=1, coarse_share=0.0))
        tb = build_tables(pb)
        lifted = lift(tb, coarse, hourly)
        # every run of the hourly plan is kept: it lies inside its window and capacity on the quarter-hours
        assert int((lifted.r >= 0).sum()) == len(hourly.assignments)
        found: list = []
        evaluate(tb, Multipliers.zeros(tb), collect=found)
        filled = complete(tb, lifted, greedy_order(tb), Candidates(tb, found))
        for ch in (lifted, filled):
            plan = assemble_plan(
                tb,
                ch,
                solver="lifted",
                status=PlanStatus.FEASIBLE,
                bound=0.0,
                penalised=penalised_objective(tb, ch),
                stats=SolveStats(),
            )
            assert check_plan(pb, plan).ok, seed
        # the lifted runs hold at most the hourly runs' slots: at positive prices held per hour they cost no more
        lifted_plan = assemble_plan(
            tb,
            lifted,
            solver="lifted",
            status=PlanStatus.FEASIBLE,
            bound=0.0,
            penalised=0.0,
            stats=SolveStats(),
        )
        assert lifted_plan.cost <= hourly.cost * (1 + 1e-9)


def test_the_quarter_hour_plan_is_never_worse_than_the_lifted_hourly_plan():
    # the path of large instances (subgradient ascent, beyond max_lp_jobs), where the hourly plan is a start
    pb = _quarter_hours(np.random.default_rng(3), hours=24, n_jobs=40)
    params = SolveParams(
        time_limit_s=6.0, num_workers=2, max_lp_jobs=0, max_cpsat_jobs=0, coarse_plan_share=0.55
    )
    plan = solve(pb, params)
    assert check_plan(pb, plan).ok
    notes = [n for n in plan.stats.notes if n.startswith("coarse plan objective=")]
    assert notes, plan.stats.notes  # the hourly plan was offered as a start
    lifted = float(notes[0].split("=")[1].split()[0])
    assert plan.objective <= lifted + 1e-6


def test_a_two_chunk_hourly_run_is_read_as_two_chunks_of_the_fine_lengths():
    # cheap hours 0-2 and 7-9 around dear ones: the 3.5-hour job runs in two chunks (min 2 h, a 1-hour resume)
    hourly_prices = [10.0] * 3 + [1000.0] * 4 + [10.0] * 3 + [1000.0] * 2
    pb = Problem(
        START,
        15,
        48,
        (region("A", np.repeat(hourly_prices, 4), gpus=4, budget_kw=10.0),),
        (H100,),
        (
            job(
                "long",
                dur=14,
                rel=0,
                dl=48,
                n_slots=48,
                interruptible=True,
                min_chunk_slots=8,
                checkpoint_overhead_slots=4,
            ),
            job("late", dur=3, rel=3, dl=48, n_slots=48),  # released at :45: its first whole hour is hour 1
        ),
    )
    coarse = coarse_problem(pb)
    assert coarse is not None
    hourly = solve(coarse.problem, SolveParams(time_limit_s=2.0, num_workers=1, coarse_share=0.0))
    by_id = {a.job_id: a for a in hourly.assignments}
    assert len(by_id["long"].chunks) == 2
    tb = build_tables(pb)
    lifted = lift(tb, coarse, hourly)
    plan = assemble_plan(
        tb, lifted, solver="lifted", status=PlanStatus.FEASIBLE, bound=0.0, penalised=0.0, stats=SolveStats()
    )
    assert check_plan(pb, plan).ok
    runs = {a.job_id: [(c.start_slot, c.end_slot) for c in a.chunks] for a in plan.assignments}
    # the first chunk as long as its hours allow while the second keeps its 8 slots: 14 + 4 = 10 + 8
    first, second = runs["long"]
    assert first[1] - first[0] + second[1] - second[0] == 18 and first[0] % 4 == 0 and second[0] % 4 == 0
    assert runs["late"][0][0] >= 4


def test_hourly_prices_spread_on_quarter_hours_give_a_bound_below_the_optimum():
    # the ascent of large instances starts from the hourly problem's prices: the value there must bound every plan
    gained = False
    for seed in range(8):
        rng = np.random.default_rng(seed)
        n = 12
        regions = [
            region(name, np.repeat(rng.integers(5, 100, 3), 4), gpus=3, budget_kw=2.0) for name in ("A", "B")
        ]
        jobs = [
            job(
                f"j{i}",
                gpus=int(rng.choice([1, 2])),
                dur=int(rng.integers(2, 7)),
                rel=int(rng.integers(0, 3)),
                n_slots=n,
            )
            for i in range(3)
        ]
        pb = Problem(START, 15, n, tuple(regions), (H100,), tuple(jobs))
        coarse = coarse_problem(pb)
        assert coarse is not None
        ctb = build_tables(coarse.problem)
        _, m, _ = subgradient(ctb, 1e3, max_iter=50, time_limit_s=2.0)
        tb = build_tables(pb)
        value = float(evaluate(tb, lift_prices(tb, coarse, m))[0])
        assert value <= brute_force(pb) + 1e-9, seed
        # an hour's price is spread over its four slots, its sum kept
        assert lift_prices(tb, coarse, m).lam.sum() == pytest.approx(m.lam.sum())
        gained |= value > float(evaluate(tb, Multipliers.zeros(tb))[0]) + 1e-9
    assert gained  # on some instance the hourly prices bound higher than zero prices: the test can tell


def test_the_planner_keeps_a_valid_bound_when_its_ascent_starts_from_hourly_prices():
    pb = _quarter_hours(np.random.default_rng(5), hours=24, n_jobs=40)
    plan = solve(pb, SolveParams(time_limit_s=4.0, num_workers=2, max_lp_jobs=0, max_cpsat_jobs=0))
    assert check_plan(pb, plan).ok
    assert any(n.startswith("coarse ascent:") for n in plan.stats.notes), plan.stats.notes
    assert plan.best_bound is not None and plan.best_bound <= plan.objective + 1e-9
