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


def _exact_chunked(prices, dur, min_chunk, overhead, power_kw):
    """Cheapest cost of one job on one region over every chunking of the Problem (enumeration of slot sets)."""
    import itertools

    n = len(prices)
    best = math.inf
    for k in range(dur, n + 1):
        for slots in itertools.combinations(range(n), k):
            runs = [list(g) for _, g in itertools.groupby(enumerate(slots), key=lambda x: x[1] - x[0])]
            if len(runs) > 1 and min(len(r) for r in runs) < min_chunk:
                continue
            if k != dur + overhead * (len(runs) - 1):
                continue
            best = min(best, sum(prices[t] for t in slots) * power_kw / 1000.0)
    return best


def test_bound_is_a_bound_for_any_chunking_and_the_plan_is_not_called_optimal_above_it():
    # four isolated cheap hours: four chunks cost 4 x 10, the planner's one or two chunks pay for expensive hours
    prices = [10, 200, 200, 10, 200, 200, 10, 200, 200, 10, 200, 200]
    pb = problem([region("A", prices, gpus=8)],
                 [job("a", gpus=8, dur=4, n_slots=12, interruptible=True, min_chunk_slots=1, max_chunks=4)])
    exact = _exact_chunked(prices, dur=4, min_chunk=1, overhead=0, power_kw=8 * 0.7)
    plan = solve(pb, SolveParams(time_limit_s=3.0))
    assert check_plan(pb, plan).ok
    assert plan.best_bound is not None and plan.best_bound <= exact + 1e-9, (plan.best_bound, exact)
    assert plan.penalised_bound is not None and plan.penalised_bound <= exact + 1e-9
    if plan.objective > exact + 1e-9:
        assert plan.status is not PlanStatus.OPTIMAL


def test_bound_is_reported_for_the_planned_jobs_and_for_the_penalised_objective_when_jobs_are_left_out():
    # two jobs that each need the whole fleet for the whole horizon: one is left out
    pb = problem([region("A", [10, 20, 30, 40], gpus=8)],
                 [job("a", gpus=8, dur=4, n_slots=4), job("b", gpus=8, dur=4, n_slots=4)])
    plan = solve(pb, SolveParams(time_limit_s=2.0))
    assert check_plan(pb, plan).ok and len(plan.unplanned) == 1
    assert plan.best_bound is not None and plan.best_bound <= plan.objective + 1e-9  # a bound of its own jobs
    assert plan.penalised_bound is not None and plan.penalised_bound > plan.objective  # includes the penalty
    assert plan.gap_pct is not None and plan.gap_pct <= 1e-6  # no better plan exists: the solver's gap is closed


def _enumerated_chunking(values, dur, overhead, min_chunk, max_chunks=None):
    """Least total over every set of at most ``max_chunks`` chunks (split anywhere, adjacent allowed) of at least
    ``min_chunk`` slots each that covers ``dur + overhead * (chunks - 1)`` usable slots: plain enumeration."""
    import itertools

    n, best = len(values), math.inf
    for k in range(dur, n + 1):
        for slots in itertools.combinations(range(n), k):
            if not all(math.isfinite(values[t]) for t in slots):
                continue
            runs = [len(list(g)) for _, g in itertools.groupby(enumerate(slots), key=lambda x: x[1] - x[0])]
            # a run of L slots is 1..L chunks; the fewest chunks of at least min_chunk and the most both bound it
            for pieces in itertools.product(*[range(1, length // min_chunk + 1) for length in runs]):
                if (max_chunks is None or sum(pieces) <= max_chunks) and k == dur + overhead * (sum(pieces) - 1):
                    best = min(best, sum(values[t] for t in slots))
    return best


def test_best_chunking_matches_an_enumeration_of_every_chunking_on_tiny_windows():
    import numpy as np

    from optimizer.bound import best_chunking

    rng = np.random.default_rng(0)
    for _ in range(150):
        width, dur = int(rng.integers(3, 10)), int(rng.integers(1, 5))
        overhead, min_chunk = int(rng.integers(0, 3)), int(rng.integers(1, 4))
        most = None if rng.random() < 0.3 else int(rng.integers(1, 4))
        values = rng.integers(-5, 20, width).astype(float)  # negative values: resumes may pay for themselves
        values[rng.random(width) < 0.15] = math.inf  # slots the job cannot use
        got = float(best_chunking(values[None, :], dur, overhead, min_chunk, most)[0])
        want = _enumerated_chunking(list(values), dur, overhead, min_chunk, most)
        assert got == want, (values, dur, overhead, min_chunk, most)


def test_a_missing_curve_the_objective_does_not_use_never_keeps_a_job_out_and_its_figure_is_marked_an_estimate():
    from optimizer import Objective, ObjectiveKind

    nan4 = [math.nan] * 4
    cases = [
        # no carbon intensity at all (as in the shared data for ES, FI, PL, BE, CH after 2022): a cost plan
        (ObjectiveKind.COST, region("A", [50, 10, 40, 60], carbon=nan4), "carbon_kg", "cost"),
        # no prices: a carbon plan
        (ObjectiveKind.CARBON, region("A", nan4, carbon=[300, 100, 50, 400]), "cost", "carbon_kg"),
    ]
    for kind, reg, estimated, exact in cases:
        pb = problem([reg], [job("a", dur=2, n_slots=4)], objective=Objective(kind))
        plan = solve(pb, SolveParams(time_limit_s=2.0))
        report = check_plan(pb, plan)
        assert report.ok, report.violations
        assert not plan.unplanned, plan.unplanned  # was invalid_prices
        assert plan.assignment_of("a").start_slot == 1  # slots 1-2 are the cheapest run in both cases
        assert getattr(plan, estimated) == 0.0 and getattr(plan, exact) > 0
        assert report.estimates == (f"{estimated} counts 0 for 2 job-slot(s) without "
                                    f"{'a carbon intensity' if estimated == 'carbon_kg' else 'a price'}",)
        assert any(n.startswith(f"estimate: {estimated} counts 0 for 2 job-slot(s)") for n in plan.stats.notes)
    # the curve the objective needs is still required: no carbon intensity under the carbon objective
    pb = problem([region("A", [50, 10, 40, 60], carbon=nan4)], [job("a", dur=2, n_slots=4)],
                 objective=Objective(ObjectiveKind.CARBON))
    assert solve(pb, SolveParams(time_limit_s=1.0)).unplanned_reasons() == {"a": "invalid_prices"}


def _capped_instance(seed: int):
    import numpy as np

    rng = np.random.default_rng(seed)
    regions = [region(n, rng.integers(5, 100, 12), carbon=rng.integers(50, 600, 12), gpus=4, budget_kw=6.0)
               for n in ("A", "B")]
    jobs = [job(f"j{i}", gpus=int(rng.choice([1, 2])), dur=int(rng.integers(1, 4)), n_slots=12) for i in range(16)]
    return problem(regions, jobs)


def test_cost_cap_objective_finds_a_plan_whenever_the_cheapest_plan_meets_the_cap():
    from optimizer import Objective, ObjectiveKind

    for seed in (0, 3):  # the greedy start broke these caps and the planner answered no_solution
        pb = _capped_instance(seed)
        cheapest = solve(pb, SolveParams(time_limit_s=10.0))  # both end in ~0.5 s; margins for a busy machine
        assert cheapest.status is PlanStatus.OPTIMAL and not cheapest.unplanned
        for factor in (1.0001, 1.02):
            cap = cheapest.cost * factor
            capped = dataclasses.replace(pb, objective=Objective(ObjectiveKind.CARBON_WITH_COST_CAP, cost_cap=cap))
            plan = solve(capped, SolveParams(time_limit_s=20.0))  # its cost plan gets the time the cheapest one had
            assert plan.status is not PlanStatus.NO_SOLUTION, (seed, factor, plan.stats.notes)
            assert check_plan(capped, plan).ok and not plan.unplanned and plan.cost <= cap * (1 + 1e-9)


def test_baselines_meet_the_cost_cap_or_say_they_cannot():
    from optimizer import Objective, ObjectiveKind

    def under(pb, cap):
        return dataclasses.replace(pb, objective=Objective(ObjectiveKind.CARBON_WITH_COST_CAP, cost_cap=cap))

    pb = _capped_instance(0)
    for name in ("run_now", "best_window", "greedy"):
        free = solve(under(pb, 1e9), SolveParams(time_limit_s=1.0), solver=name)  # its plan, whatever it costs
        for cap, meets in ((free.cost * 1.01, True), (free.cost * 0.5, False)):
            capped = under(pb, cap)
            plan = solve(capped, SolveParams(time_limit_s=1.0), solver=name)
            assert check_plan(capped, plan, allow_late=True).ok
            if meets:
                assert plan.status is PlanStatus.FEASIBLE and len(plan.assignments) == len(free.assignments)
            else:
                assert plan.status is PlanStatus.NO_SOLUTION and not plan.assignments
                assert all(u.reason == "not_solved" and "cannot meet the cap" in u.detail for u in plan.unplanned)


def _job_runs(n_slots, rel, dl, dur, overhead, min_chunk, max_chunks):
    """Every slot set an interruptible job may run on, by plain enumeration (a single run of ``dur`` slots, or
    2..max_chunks chunks of at least ``min_chunk`` slots covering ``dur + overhead * (chunks - 1)``)."""
    import itertools

    out = [tuple(range(s, s + dur)) for s in range(rel, dl - dur + 1)]
    for k in range(dur, dl - rel + 1):
        for slots in itertools.combinations(range(rel, dl), k):
            runs = [len(list(g)) for _, g in itertools.groupby(enumerate(slots), key=lambda x: x[1] - x[0])]
            for pieces in itertools.product(*[range(1, length // min_chunk + 1) for length in runs]):
                chunks = sum(pieces)
                if 2 <= chunks <= max_chunks and k == dur + overhead * (chunks - 1):
                    out.append(slots)
                    break
    return out


def test_bound_never_exceeds_the_exact_optimum_of_tiny_instances_with_interruptible_jobs():
    import itertools

    import numpy as np

    rng = np.random.default_rng(5)
    for _ in range(8):
        n_slots = 8
        prices = rng.integers(1, 100, n_slots)
        specs = [dict(gpus=int(rng.choice([4, 8])), dur=int(rng.integers(2, 4)), overhead=int(rng.integers(0, 2)),
                      min_chunk=int(rng.integers(1, 3)), max_chunks=int(rng.integers(2, 4))) for _ in range(2)]
        jobs = [job(f"j{k}", gpus=s["gpus"], dur=s["dur"], n_slots=n_slots, interruptible=True,
                    min_chunk_slots=s["min_chunk"], checkpoint_overhead_slots=s["overhead"],
                    max_chunks=s["max_chunks"]) for k, s in enumerate(specs)]
        pb = problem([region("A", prices, gpus=8)], jobs)
        options = [_job_runs(n_slots, 0, n_slots, s["dur"], s["overhead"], s["min_chunk"], s["max_chunks"])
                   for s in specs]
        exact = math.inf  # both jobs planned, at most 8 GPUs in every slot
        for a, b in itertools.product(*options):
            if specs[0]["gpus"] + specs[1]["gpus"] > 8 and set(a) & set(b):
                continue
            cost = sum(sum(int(prices[t]) for t in run) * s["gpus"] * 0.7 / 1000 for run, s in zip((a, b), specs, strict=True))
            exact = min(exact, cost)
        plan = solve(pb, SolveParams(time_limit_s=2.0))
        assert check_plan(pb, plan).ok
        if math.isfinite(exact):
            assert plan.penalised_bound is not None and plan.penalised_bound <= exact + 1e-9, (specs, exact)
            assert plan.unplanned or plan.objective >= exact - 1e-9
            if plan.status is PlanStatus.OPTIMAL:
                assert math.isclose(plan.objective, exact, rel_tol=1e-6), (specs, plan.objective, exact)


def test_a_job_that_fits_only_in_two_chunks_is_planned_around_a_gap():
    # no price in slot 3: no run of 4 slots fits in the window, two chunks of 2 do
    prices = [40, 30, 20, math.nan, 20, 30, 40]
    pb = problem([region("A", prices)], [job("a", dur=4, n_slots=7, interruptible=True, min_chunk_slots=2)])
    plan = solve(pb, SolveParams(time_limit_s=2.0))
    assert check_plan(pb, plan).ok and not plan.unplanned, plan.unplanned  # was invalid_prices
    chunks = [(c.start_slot, c.end_slot) for c in plan.assignment_of("a").chunks]
    assert chunks == [(1, 3), (4, 6)]  # the cheapest two chunks on either side of the gap
    # not interruptible: still left out, with the reason
    rigid = problem([region("A", prices)], [job("a", dur=4, n_slots=7)])
    assert solve(rigid, SolveParams(time_limit_s=1.0)).unplanned_reasons() == {"a": "invalid_prices"}


def test_plans_use_any_split_of_an_interruptible_job_into_two_chunks():
    # one cheap hour, then three: chunks of 1 and 3 hours (the model's own split is 2 + 2)
    prices = [1, 100, 100, 1, 1, 1, 100, 100]
    pb = problem([region("A", prices)], [job("a", dur=4, n_slots=8, interruptible=True, min_chunk_slots=1)])
    exact = _exact_chunked(prices[:], dur=4, min_chunk=1, overhead=0, power_kw=0.7)  # at most 4 chunks here
    plan = solve(pb, SolveParams(time_limit_s=2.0))
    assert check_plan(pb, plan).ok
    assert [(c.start_slot, c.end_slot) for c in plan.assignment_of("a").chunks] == [(0, 1), (3, 6)]
    assert math.isclose(plan.objective, exact, rel_tol=1e-9)
    assert plan.status is PlanStatus.OPTIMAL  # proved by the bound over every chunking
