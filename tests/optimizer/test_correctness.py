"""Planner correctness at the edges (issue 22): what the checker rejects, bounds that are numbers or None, every
objective, missing curves."""

from __future__ import annotations

import dataclasses
import json
import math

from optimizer import Assignment, Chunk, Plan, PlanStatus, SolveParams, check_plan, solve
from tests.optimizer.conftest import job, problem, region


def _with_region(pb, **changes):
    return dataclasses.replace(pb, regions=(dataclasses.replace(pb.regions[0], **changes),))


def test_checker_rejects_a_job_placed_where_the_power_budget_or_the_base_load_is_unknown():
    pb = problem([region("A", [50, 10, 40, 60], budget_kw=10.0)], [job("a", dur=1, n_slots=4)])
    plan = solve(pb, SolveParams(time_limit_s=2.0))
    assert check_plan(pb, plan).ok
    slot = plan.assignment_of("a").start_slot
    assert slot == 1  # the cheapest slot
    nan_at = [10.0] * 4
    nan_at[slot] = math.nan
    for changes in ({"power_budget_kw": tuple(nan_at)}, {"base_load_kw": tuple(0.0 if math.isfinite(x) else x
                                                                             for x in nan_at)}):
        report = check_plan(_with_region(pb, **changes), plan)
        assert not report.ok
        assert any(f"slot {slot}: runs jobs where the power budget or base load is unknown" in v
                   for v in report.violations), report.violations
    # a NaN elsewhere does not matter
    elsewhere = [10.0, 10.0, 10.0, math.nan]
    assert check_plan(_with_region(pb, power_budget_kw=tuple(elsewhere)), plan).ok


def test_checker_rejects_a_planned_job_with_no_gpus():
    pb = problem([region("A", [50, 10, 40, 60])], [job("a", gpus=0, dur=1, n_slots=4)])
    # every figure of a 0-GPU run is 0, so only the GPU count can give it away
    plan = Plan("hand", PlanStatus.FEASIBLE, (Assignment("a", "A", "H100", (Chunk(1, 2),), 0.0, 0.0, 0.0),), (),
                0.0, None, None, 0.0, 0.0, 0.0)
    report = check_plan(pb, plan)
    assert any("planned with 0 GPUs" in v for v in report.violations), report.violations


def _crowded(n_jobs: int = 300):
    import numpy as np

    rng = np.random.default_rng(1)
    regions = [region(n, rng.integers(5, 100, 24), gpus=8, budget_kw=20.0) for n in ("A", "B")]
    jobs = [job(f"j{i}", gpus=int(rng.choice([1, 2, 4])), dur=int(rng.integers(1, 6)), n_slots=24)
            for i in range(n_jobs)]
    return problem(regions, jobs)


def test_bound_and_gap_are_numbers_or_none_even_when_the_time_limit_leaves_no_time_for_the_lp():
    pb = _crowded()
    for limit in (0.0, 0.01):
        plan = solve(pb, SolveParams(time_limit_s=limit, max_cpsat_jobs=0))
        assert check_plan(pb, plan).ok
        for value in (plan.best_bound, plan.gap_pct):
            assert value is None or math.isfinite(value), (plan.best_bound, plan.gap_pct)
        json.dumps({"best_bound": plan.best_bound, "gap_pct": plan.gap_pct}, allow_nan=False)  # valid JSON
        assert plan.best_bound is not None  # every job alone at its best option is a bound known at once
