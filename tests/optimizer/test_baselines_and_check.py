"""Baselines, the registry, the independent checker and Problem validation."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from optimizer import SOLVERS, Chunk, SolveParams, check_plan, get_solver
from tests.optimizer.conftest import job, problem, region


def test_registry_lists_valid_names_on_a_typo():
    assert set(SOLVERS) == {"run_now", "best_window", "greedy", "gridshift", "oracle"}
    with pytest.raises(KeyError, match="valid: best_window, greedy, gridshift, oracle, run_now"):
        get_solver("gridshfit")


def test_registered_solver_is_found_by_name_and_a_name_is_registered_once(monkeypatch):
    from optimizer import registry

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # leave the real registry as it was

    def solve_nothing(problem, params=None):
        return SOLVERS["run_now"](problem, params)

    registry.register("nothing", solve_nothing)
    assert registry.get_solver("nothing") is solve_nothing
    registry.register("nothing", solve_nothing)  # the same solver again is harmless (module reloads)
    with pytest.raises(ValueError, match="solver 'gridshift' is already registered"):
        registry.register("gridshift", solve_nothing)
    with pytest.raises(ValueError, match="identifier"):
        registry.register("no name", solve_nothing)


def test_run_now_starts_at_release_in_home_region_and_queues_when_full():
    prices = [90, 80, 10, 20, 70, 60, 50, 40]
    pb = problem(
        [region("DE", prices, gpus=4), region("FR", [1] * 8, gpus=4)],
        [job("a", gpus=4, rel=1, home_region="DE"), job("b", gpus=4, rel=1, dl=4, home_region="DE")],
    )
    plan = SOLVERS["run_now"](pb, None)
    report = check_plan(pb, plan, allow_late=True)
    assert report.ok, report.violations
    assert (plan.assignment_of("a").region, plan.assignment_of("a").start_slot) == ("DE", 1)
    assert plan.assignment_of("b").start_slot == 3  # queued behind a, ends at 5 > deadline 4
    assert report.late_jobs == ("b",)
    assert not check_plan(pb, plan).ok  # late runs are violations unless allowed


def test_best_window_shifts_in_time_only_and_repairs_conflicts():
    prices = [90, 80, 10, 10, 70, 20, 20, 95]
    pb = problem(
        [region("DE", prices, gpus=4), region("FR", [1] * 8, gpus=4)],
        [job("a", gpus=4, home_region="DE"), job("b", gpus=4, home_region="DE")],
    )
    plan = SOLVERS["best_window"](pb, None)
    assert check_plan(pb, plan, allow_late=True).ok
    assert {plan.assignment_of(j).region for j in "ab"} == {"DE"}
    assert sorted(plan.assignment_of(j).start_slot for j in "ab") == [2, 5]


def random_problem(seed: int, n_jobs: int = 40):
    rng = np.random.default_rng(seed)
    T = 24
    regions = [
        region(name, 40 + 30 * np.sin(np.arange(T) / 4 + k) + rng.normal(0, 3, T), gpus=16, budget_kw=8.0)
        for k, name in enumerate(("DE", "FR", "ES"))
    ]
    jobs = []
    for i in range(n_jobs):
        rel = int(rng.integers(0, 12))
        dur = int(rng.integers(1, 6))
        jobs.append(
            job(
                f"j{i}",
                gpus=int(rng.choice([1, 2, 4])),
                dur=dur,
                rel=rel,
                dl=min(T, rel + dur + int(rng.integers(0, 10))),
                home_region="DE",
                interruptible=bool(rng.random() < 0.3),
                min_chunk_slots=1,
            )
        )
    return problem(regions, jobs)


@pytest.mark.parametrize("seed", [0, 1])
def test_every_solver_returns_a_checked_plan_and_gridshift_beats_greedy(seed):
    pb = random_problem(seed)
    params = SolveParams(time_limit_s=15.0, random_seed=seed)  # ends in ~0.5 s; the margin is for a busy machine
    plans = {name: fn(pb, params) for name, fn in SOLVERS.items()}
    for name, plan in plans.items():
        report = check_plan(pb, plan, allow_late=name in ("run_now", "best_window"))
        assert report.ok, (name, report.violations[:3])
        assert len(plan.assignments) + len(plan.unplanned) == len(pb.jobs)
    ours, greedy = plans["gridshift"], plans["greedy"]
    assert len(ours.unplanned) <= len(greedy.unplanned)
    if len(ours.unplanned) == len(greedy.unplanned):
        assert ours.objective <= greedy.objective + 1e-9
    assert ours.best_bound is not None
    if not ours.unplanned:  # the bound covers penalties of jobs left out, so compare only full plans
        assert ours.best_bound <= ours.objective + 1e-6 * max(1.0, ours.objective)


def test_checker_catches_overbooking_wrong_figures_and_missing_jobs():
    pb = problem([region("DE", [50] * 8, gpus=4)], [job("a", gpus=4), job("b", gpus=4)])
    plan = SOLVERS["gridshift"](pb, SolveParams(time_limit_s=2.0))
    assert check_plan(pb, plan).ok
    a, b = plan.assignments
    clash = dataclasses.replace(plan, assignments=(a, dataclasses.replace(b, chunks=a.chunks)))
    assert any("GPUs used" in v for v in check_plan(pb, clash).violations)
    wrong_cost = dataclasses.replace(plan, assignments=(a, dataclasses.replace(b, cost=b.cost * 2)))
    assert any("cost" in v for v in check_plan(pb, wrong_cost).violations)
    dropped = dataclasses.replace(plan, assignments=(a,))
    assert any("appears 0 times" in v for v in check_plan(pb, dropped).violations)
    short = dataclasses.replace(plan, assignments=(a, dataclasses.replace(b, chunks=(Chunk(0, 1),))))
    assert any("needs one run of 2 slots" in v for v in check_plan(pb, short).violations)


def test_problem_rejects_curves_of_the_wrong_length_naming_the_field():
    with pytest.raises(ValueError, match=r"Region 'DE': carbon_g_per_kwh has 7 values, expected n_slots=8"):
        problem([region("DE", [50] * 8, carbon=[300] * 7)], [])


def test_empty_problem_gives_empty_plan():
    pb = problem([region("DE", [50] * 8)], [])
    plan = SOLVERS["gridshift"](pb, None)
    assert plan.status == "empty" and not plan.assignments and math.isclose(plan.objective, 0.0)
