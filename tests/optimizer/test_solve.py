"""The Gridshift planner on problems whose optimum is known."""

from __future__ import annotations

import itertools
import math

import numpy as np

from optimizer import (
    Objective,
    ObjectiveKind,
    PlanStatus,
    SolveParams,
    UnplannedReason,
    check_plan,
    solve,
)
from tests.optimizer.conftest import H100, L40S, brute_force, job, problem, region, tiny_random

FLAT = [50.0] * 8


def solved(pb, params):
    plan = solve(pb, params)
    report = check_plan(pb, plan)
    assert report.ok, report.violations
    return plan


def test_job_takes_cheapest_window_and_cost_is_exact(params):
    prices = [90, 80, 10, 20, 70, 60, 50, 40]
    pb = problem([region("DE", prices)], [job("a", gpus=2, dur=2)])
    plan = solved(pb, params)
    a = plan.assignment_of("a")
    assert (a.start_slot, a.end_slot) == (2, 4)
    # 2 GPUs x 0.7 kW x 1 h per slot = 1.4 kWh per slot at 10 and 20 EUR/MWh
    assert math.isclose(plan.cost, 1.4 * (10 + 20) / 1000)
    assert math.isclose(plan.energy_kwh, 2.8)
    assert plan.status is PlanStatus.OPTIMAL
    assert plan.gap_pct is not None and plan.gap_pct < 1e-6


def test_gpu_inventory_pushes_second_job_to_next_best_window(params):
    prices = [90, 80, 10, 10, 70, 20, 20, 95]
    pb = problem([region("DE", prices, gpus=4)], [job("a", gpus=4), job("b", gpus=4)])
    plan = solved(pb, params)
    starts = sorted(plan.assignment_of(j).start_slot for j in "ab")
    assert starts == [2, 5]
    assert math.isclose(plan.cost, 2.8 * (10 + 10 + 20 + 20) / 1000)


def test_power_budget_limits_concurrent_jobs_and_budget_dips_are_avoided(params):
    prices = [10, 10, 10, 10, 50, 50, 50, 50]
    # 1 GPU x 0.7 kW x PUE 1.0: only one job fits under 1 kW; slots 0-1 dip to 0.5 kW (demand response)
    budget = [0.5, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    pb = problem([region("DE", prices, budget_kw=budget)], [job("a"), job("b")])
    plan = solved(pb, params)
    runs = sorted((plan.assignment_of(j).start_slot, plan.assignment_of(j).end_slot) for j in "ab")
    assert runs[0] == (2, 4)
    assert runs[1][0] >= 4


def test_region_choice_follows_price_and_residency(params):
    pb = problem(
        [region("DE", [80] * 8), region("FR", [20] * 8)],
        [job("free"), job("resident", allowed_regions=("DE",))],
    )
    plan = solved(pb, params)
    assert plan.assignment_of("free").region == "FR"
    assert plan.assignment_of("resident").region == "DE"


def test_carbon_objective_prefers_clean_region_and_weighted_trades_off(params):
    cheap_dirty = region("PL", [20] * 8, [800] * 8)
    dear_clean = region("FR", [60] * 8, [50] * 8)
    jobs = [job("a")]
    by_cost = solved(problem([cheap_dirty, dear_clean], jobs), params)
    by_carbon = solved(
        problem([cheap_dirty, dear_clean], jobs, objective=Objective(ObjectiveKind.CARBON)), params
    )
    assert by_cost.assignment_of("a").region == "PL"
    assert by_carbon.assignment_of("a").region == "FR"
    assert math.isclose(by_carbon.objective, by_carbon.carbon_kg)
    # 1.4 kWh: +0.056 EUR for -1.05 kg in FR; clean wins above ~53 EUR/t
    low = Objective(ObjectiveKind.WEIGHTED, carbon_price_per_tonne=30.0)
    high = Objective(ObjectiveKind.WEIGHTED, carbon_price_per_tonne=100.0)
    assert (
        solved(problem([cheap_dirty, dear_clean], jobs, objective=low), params).assignment_of("a").region
        == "PL"
    )
    assert (
        solved(problem([cheap_dirty, dear_clean], jobs, objective=high), params).assignment_of("a").region
        == "FR"
    )


def test_min_carbon_under_cost_cap_keeps_the_cap(params):
    cheap_dirty = region("PL", [20] * 8, [800] * 8)
    dear_clean = region("FR", [60] * 8, [50] * 8)
    jobs = [job("a"), job("b")]
    # each job costs 0.028 EUR in PL, 0.084 EUR in FR; a cap of 0.12 allows only one job in FR
    capped = Objective(ObjectiveKind.CARBON_WITH_COST_CAP, cost_cap=0.12)
    plan = solved(problem([cheap_dirty, dear_clean], jobs, objective=capped), params)
    regions = sorted(plan.assignment_of(j).region for j in "ab")
    assert regions == ["FR", "PL"]
    assert plan.cost <= 0.12


def test_interruptible_job_splits_around_a_price_spike_with_overhead(params):
    prices = [10, 10, 10, 999, 999, 10, 10, 10]
    pb = problem(
        [region("DE", prices)],
        [job("ckpt", dur=4, interruptible=True, min_chunk_slots=2, checkpoint_overhead_slots=1)],
    )
    plan = solved(pb, params)
    chunks = [(c.start_slot, c.end_slot) for c in plan.assignment_of("ckpt").chunks]
    assert len(chunks) == 2
    assert sum(e - s for s, e in chunks) == 5  # 4 slots of work + 1 slot to resume
    assert all(e <= 3 or s >= 5 for s, e in chunks)


def test_bound_prices_two_chunk_runs_exactly_so_a_lone_interruptible_job_is_proved_optimal(params):
    from optimizer.bound import Multipliers, evaluate
    from optimizer.tables import build_tables

    # one cheap 3-slot valley: chunks of 2 and 3 slots (1 slot of resume overhead) would both sit in it
    # only if they overlapped; the planner's runs keep a slot between the chunks
    prices = [90, 80, 90, 1, 1, 1, 70, 60, 95, 50]
    pb = problem(
        [region("DE", prices)],
        [job("ckpt", dur=4, n_slots=10, interruptible=True, min_chunk_slots=2, checkpoint_overhead_slots=1)],
    )
    kw_per_slot = 0.7 / 1000  # one H100 at PUE 1 [MWh per slot of 1 h]
    runs = [sum(prices[s : s + 4]) for s in range(7)]
    runs += [sum(prices[a : a + 2]) + sum(prices[b : b + 3]) for a in range(10) for b in range(a + 3, 8)]
    cheapest = min(runs) * kw_per_slot
    value, _, _ = evaluate(build_tables(pb), Multipliers.zeros(build_tables(pb)))
    assert math.isclose(value, cheapest, rel_tol=1e-9)
    plan = solved(pb, params)
    assert math.isclose(plan.objective, cheapest, rel_tol=1e-9)
    assert plan.status is PlanStatus.OPTIMAL and plan.gap_pct is not None and plan.gap_pct <= 1e-6


def test_bad_input_is_named_per_job_and_the_rest_is_planned(params):
    prices = [50.0, math.nan, 50, 50, 50, 50, 50, 50]
    pb = problem(
        [region("DE", prices, gpus={"H100": 8, "L40S": 8}, budget_kw=3.0)],
        [
            job("ok", rel=2),
            job("backwards", rel=5, dl=3),
            job("too_big_memory", dur={"L40S": 2}, memory_gb_per_gpu=64),
            job("too_short", dur=4, rel=5, dl=8),
            job("power_hog", gpus=8, dur=2),
            job("nan_only", dur=2, rel=0, dl=2),
        ],
        hardware=(H100, L40S),
    )
    plan = solved(pb, params)
    reasons = plan.unplanned_reasons()
    assert reasons == {
        "backwards": UnplannedReason.DEADLINE_BEFORE_RELEASE,
        "too_big_memory": UnplannedReason.NO_ELIGIBLE_HARDWARE,
        "too_short": UnplannedReason.WINDOW_TOO_SHORT,
        "power_hog": UnplannedReason.POWER_BUDGET_TOO_LOW,
        "nan_only": UnplannedReason.INVALID_PRICES,
    }
    assert plan.assignment_of("ok") is not None


def test_jobs_beyond_capacity_are_left_out_with_reason(params):
    pb = problem([region("DE", FLAT, gpus=4)], [job(f"j{i}", gpus=4, dur=4) for i in range(3)])
    plan = solved(pb, params)
    assert len(plan.assignments) == 2
    assert [u.reason for u in plan.unplanned] == [UnplannedReason.CAPACITY]


def test_identical_jobs_are_aggregated_into_one_class(params):
    prices = [90, 10, 10, 20, 20, 30, 30, 90]
    pb = problem([region("DE", prices, gpus=2)], [job(f"j{i}", gpus=2, dur=2) for i in range(3)])
    plan = solved(pb, SolveParams(time_limit_s=5.0, random_seed=1))
    assert math.isclose(plan.cost, 1.4 * (10 + 10 + 20 + 20 + 30 + 30) / 1000)


def test_matches_brute_force_on_random_tiny_problems(params):
    rng = np.random.default_rng(3)
    for _ in range(4):
        pb = tiny_random(rng)
        plan = solved(pb, params)
        assert not plan.unplanned
        assert math.isclose(plan.cost, brute_force(pb), rel_tol=1e-6)
        assert plan.best_bound is not None and plan.best_bound <= plan.objective + 1e-9


def planner_options(j, pb):
    """Every run the planner's option model allows: contiguous, or two chunks of ceil(d/2) and the rest
    plus the resume overhead with at least one slot between them (interruptible jobs)."""
    out = []
    for r in pb.regions:
        for _hw, d in j.duration_slots.items():
            runs: list[tuple[tuple[int, int], ...]] = [((s, d),) for s in range(j.release_slot, j.deadline_slot - d + 1)]
            a = math.ceil(d / 2)
            b = d - a + j.checkpoint_overhead_slots
            if j.interruptible and d - a > 0 and min(a, b) >= j.min_chunk_slots:
                runs += [
                    ((s1, a), (s2, b))
                    for s1 in range(j.release_slot, j.deadline_slot)
                    for s2 in range(s1 + a + 1, j.deadline_slot - b + 1)
                ]
            out += [(r, run) for run in runs]
    return out


def test_bound_is_valid_and_tight_with_interruptible_jobs_on_tiny_problems(params):
    rng = np.random.default_rng(5)
    for _ in range(3):
        regions = [region(n, rng.integers(5, 100, 7), gpus=2, budget_kw=1.5) for n in ("A", "B")]
        jobs = [
            job(
                f"j{i}",
                dur=int(rng.integers(3, 5)),
                n_slots=7,
                interruptible=bool(i % 2 == 0),
                min_chunk_slots=1,
                checkpoint_overhead_slots=1,
            )
            for i in range(3)
        ]
        pb = problem(regions, jobs)
        best = math.inf
        for combo in itertools.product(*(planner_options(j, pb) for j in pb.jobs)):
            use: dict = {}
            cost = 0.0
            for r, run in combo:
                for s, ln in run:
                    for t in range(s, s + ln):
                        use[(r.name, t)] = use.get((r.name, t), 0) + 1
                        cost += 0.7 * r.price_per_mwh[t] / 1000
            if all(v <= 2 for v in use.values()):
                best = min(best, cost)
        plan = solved(pb, params)
        assert plan.best_bound is not None and plan.best_bound <= best + 1e-9  # valid
        assert math.isclose(plan.objective, best, rel_tol=1e-9)
        assert plan.gap_pct is not None and plan.gap_pct <= 1e-6  # and tight: the LP is integral here


def test_lp_bound_by_column_generation_is_valid_and_converges(params):
    from optimizer.bound import Multipliers, evaluate
    from optimizer.cpsat import build_classes
    from optimizer.heuristic import greedy_order, place
    from optimizer.lp import column_generation
    from optimizer.tables import build_tables

    pb = tiny_random(np.random.default_rng(11))
    tb = build_tables(pb)
    cls, rep, counts = build_classes(tb)
    _, unconstrained, _ = evaluate(tb, Multipliers.zeros(tb))
    bound, _, info = column_generation(
        tb, cls, rep, counts, [place(tb, greedy_order(tb)), unconstrained], time_limit_s=5
    )
    assert info["converged"]
    assert math.isclose(bound, info["lp_value"], rel_tol=1e-6)  # Lagrangian at the LP duals = LP optimum
    assert bound <= brute_force(pb) + 1e-9


def test_lp_rounding_gives_a_checked_plan_at_the_lp_optimum_when_the_lp_is_integral(params):
    from optimizer.assemble import assemble_plan
    from optimizer.bound import Multipliers, evaluate
    from optimizer.cpsat import build_classes
    from optimizer.heuristic import greedy_order, penalised_objective, place
    from optimizer.lp import column_generation
    from optimizer.plan import PlanStatus as Status
    from optimizer.plan import SolveStats
    from optimizer.rounding import round_lp
    from optimizer.tables import build_tables

    # six identical 2-GPU jobs, 4 GPUs per slot: the LP optimum fills the cheapest slots two jobs at a time
    prices = [90, 10, 10, 20, 20, 30, 30, 90]
    pb = problem([region("DE", prices, gpus=4)], [job(f"j{i}", gpus=2, dur=2) for i in range(6)])
    tb = build_tables(pb)
    cls, rep, counts = build_classes(tb)
    _, unconstrained, _ = evaluate(tb, Multipliers.zeros(tb))
    _, m, info = column_generation(
        tb, cls, rep, counts, [place(tb, greedy_order(tb)), unconstrained], time_limit_s=5
    )
    ch = round_lp(tb, cls, info["primal"], m)
    assert (ch.r >= 0).all()
    assert math.isclose(penalised_objective(tb, ch), info["lp_value"], rel_tol=1e-6)
    stats = SolveStats(0.0, len(pb.jobs), len(rep), 0, "", {}, ())
    plan = assemble_plan(tb, ch, solver="t", status=Status.FEASIBLE, bound=0.0, penalised=0.0, stats=stats)
    assert check_plan(pb, plan).ok


def test_ejection_places_a_left_out_job_by_moving_a_flexible_one_to_other_hardware(params):
    from optimizer.bound import Multipliers, evaluate
    from optimizer.candidates import Candidates
    from optimizer.eject import eject_improve
    from optimizer.heuristic import penalised_objective, place
    from optimizer.tables import build_tables

    # one H100 and one L40S; "rigid" can only use the H100 for the whole horizon, "flexible" either type
    reg = region("DE", [50.0] * 4, gpus={"H100": 1, "L40S": 1})
    flexible = job("flexible", dur={"H100": 1, "L40S": 4}, n_slots=4)
    rigid = job("rigid", dur=4, n_slots=4)
    pb = problem([reg], [flexible, rigid], hardware=(H100, L40S))
    tb = build_tables(pb)
    first_come = place(tb, np.array([0, 1]))  # flexible takes the (cheaper) H100 slot: rigid fits nowhere
    assert first_come.r[1] < 0
    found: list = []
    evaluate(tb, Multipliers.zeros(tb), collect=found)
    ch = eject_improve(tb, first_come, Candidates(tb, found), time_limit_s=5, left_out_only=True)
    assert (ch.r >= 0).all()
    assert ch.h[0] == 1 and ch.h[1] == 0  # flexible moved to the L40S
    assert penalised_objective(tb, ch) < penalised_objective(tb, first_come)


def test_ruin_and_recreate_moves_a_group_where_single_job_moves_are_stuck(params):
    from optimizer.assemble import assemble_plan
    from optimizer.bound import Choice, Multipliers
    from optimizer.heuristic import improve, penalised_objective
    from optimizer.plan import PlanStatus as Status
    from optimizer.plan import SolveStats
    from optimizer.recreate import ruin_recreate
    from optimizer.tables import build_tables

    # 2 GPUs; slots 0-3 cheap, 4-7 dearer, 8-11 dearest. Two low-power 1-GPU jobs hold the cheap slots and the
    # 2-GPU high-power job runs at 4-8: moving any one job alone only costs more, moving the three pays
    prices = [10.0] * 4 + [50.0] * 4 + [90.0] * 4
    low = {"H100": 0.1}
    jobs = [
        job("long", gpus=2, dur=4, dl=8, n_slots=12),
        job("a", dur=4, n_slots=12, power_kw_per_gpu=low),
        job("b", dur=4, n_slots=12, power_kw_per_gpu=low),
    ]
    pb = problem([region("DE", prices, gpus=2)], jobs)
    tb = build_tables(pb)
    z = np.zeros(3, dtype=np.int64)
    stuck = Choice(z.copy(), z.copy(), np.array([4, 0, 0]), np.array([4, 4, 4]), z.copy(), z.copy())
    assert penalised_objective(tb, improve(tb, stuck, time_limit_s=1)) == penalised_objective(tb, stuck)
    ch = ruin_recreate(tb, stuck, Multipliers.zeros(tb), time_limit_s=0.5, seed=params.random_seed)
    assert (ch.s1 == [0, 4, 4]).all()
    # 2 x 0.7 kW x 4 h at 10 EUR/MWh + 2 x 0.1 kW x 4 h at 50 EUR/MWh
    assert math.isclose(penalised_objective(tb, ch), (5.6 * 10 + 0.8 * 50) / 1000)
    stats = SolveStats(0.0, 3, 3, 0, "", {}, ())
    plan = assemble_plan(tb, ch, solver="t", status=Status.FEASIBLE, bound=0.0, penalised=0.0, stats=stats)
    assert check_plan(pb, plan).ok


def test_group_moves_put_back_a_job_left_out_that_no_single_move_can_place(params):
    from optimizer.assemble import assemble_plan
    from optimizer.bound import Choice, Multipliers
    from optimizer.heuristic import improve, penalised_objective
    from optimizer.plan import PlanStatus as Status
    from optimizer.plan import SolveStats
    from optimizer.recreate import ruin_recreate
    from optimizer.tables import build_tables

    # 8 GPUs; slots 0-3 cheap, 4-7 dearer, 8-11 dearest. Three 4-GPU jobs fill slots 0-3 and half of 4-7, so the
    # 8-GPU job due at slot 8 fits nowhere and no single job has a cheaper place: single-job moves leave it out (its
    # penalty paid) until a group move puts it at 0-3 with the two jobs that held those slots moved around it
    prices = [10.0] * 4 + [50.0] * 4 + [90.0] * 4
    jobs = [job("big", gpus=8, dur=4, dl=8, n_slots=12)] + [job(n, gpus=4, dur=4, n_slots=12) for n in "abc"]
    pb = problem([region("DE", prices, gpus=8)], jobs)
    tb = build_tables(pb)
    z = np.zeros(4, dtype=np.int64)
    short = Choice(np.array([-1, 0, 0, 0]), z.copy(), np.array([0, 0, 0, 4]), np.array([0, 4, 4, 4]), z.copy(), z)
    assert penalised_objective(tb, improve(tb, short, time_limit_s=1)) == penalised_objective(tb, short)
    ch = ruin_recreate(tb, short, Multipliers.zeros(tb), time_limit_s=0.5, seed=params.random_seed)
    assert (ch.r >= 0).all()
    # 8 x 0.7 kW x 4 h at 10 (or 50) EUR/MWh, two 4-GPU jobs at the other of 10 and 50, one at 90; no penalty left
    assert math.isclose(penalised_objective(tb, ch), (22.4 * 10 + 2 * 11.2 * 50 + 11.2 * 90) / 1000)
    stats = SolveStats(0.0, 4, 4, 0, "", {}, ())
    plan = assemble_plan(tb, ch, solver="t", status=Status.FEASIBLE, bound=0.0, penalised=0.0, stats=stats)
    assert check_plan(pb, plan).ok
