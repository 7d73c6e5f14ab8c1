"""Issue 22, the planner's remaining findings: the LP prices chunked columns (a bound valid for every split), time
limits honoured at any size (jobs that cannot be examined in time are left out, saying so)."""

from __future__ import annotations

import itertools
import math

import numpy as np

from optimizer import PlanStatus, SolveParams, check_plan, solve
from tests.optimizer.conftest import job, problem, region
from tests.optimizer.test_correctness import _enumerated_chunking, _job_runs


def test_two_chunk_pricing_over_every_split_matches_an_enumeration():
    from optimizer.splits import best_two_chunks

    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.integers(3, 10))
        dur, overhead, low = int(rng.integers(1, 5)), int(rng.integers(0, 3)), int(rng.integers(1, 3))
        values = rng.normal(1.0, 1.5, n)  # negative values too (negative prices)
        values[rng.random(n) < 0.15] = math.inf
        got, a, s1, s2 = best_two_chunks(values[None, :], np.array([dur + overhead]), np.array([low]))
        want = _enumerated_chunking(list(values), dur, overhead, low, max_chunks=2)
        single = min([values[s : s + dur].sum() for s in range(n - dur + 1)], default=math.inf)
        if dur < low:  # a single run shorter than min_chunk is only a run, not a chunking
            single = math.inf
        assert math.isclose(min(single, float(got[0])), want, abs_tol=1e-9) or math.isinf(want), (values, dur)
        if math.isfinite(got[0]):  # the chunks it names cost what it says and follow the rules
            b = dur + overhead - int(a[0])
            assert min(int(a[0]), b) >= low and int(s2[0]) >= int(s1[0]) + int(a[0]) and int(s2[0]) + b <= n
            cost = values[s1[0] : s1[0] + a[0]].sum() + values[s2[0] : s2[0] + b].sum()
            assert math.isclose(cost, float(got[0]), abs_tol=1e-9)


def _lp_of(pb):
    from optimizer.cpsat import build_classes
    from optimizer.lp import column_generation
    from optimizer.tables import build_tables

    tb = build_tables(pb)
    cls, rep, counts = build_classes(tb)
    from optimizer.bound import Choice

    return column_generation(tb, cls, rep, counts, [Choice.empty(tb.J)], time_limit_s=5.0)


def test_the_lp_prices_every_split_so_its_value_is_the_cheapest_chunking():
    # one cheap hour, then three: chunks of 1 and 3 hours (the model's own split is 2 + 2, which pays 100s)
    prices = [1, 100, 100, 1, 1, 1, 100, 100]
    pb = problem([region("A", prices)], [job("a", dur=4, n_slots=8, interruptible=True, min_chunk_slots=1)])
    exact = 4 * 0.7 / 1000  # four hours at 1 EUR/MWh, 0.7 kW
    lower, _, info = _lp_of(pb)
    assert info["converged"]
    assert lower <= exact + 1e-12 and math.isclose(info["lp_value"], exact, rel_tol=1e-9), (lower, info["lp_value"])
    # the LP's own column is that chunking
    assert [tuple(c[1:7]) for c in info["columns_table"] if c[6] > 0 and c[4] == 1] == [(0, 0, 0, 1, 3, 3)]


def test_the_lp_bound_never_exceeds_the_exact_optimum_of_tiny_instances_with_interruptible_jobs():
    rng = np.random.default_rng(11)
    for _ in range(10):
        n_slots = 8
        prices = rng.integers(1, 100, n_slots)
        specs = [dict(gpus=int(rng.choice([4, 8])), dur=int(rng.integers(2, 5)), overhead=int(rng.integers(0, 2)),
                      min_chunk=int(rng.integers(1, 3))) for _ in range(2)]
        jobs = [job(f"j{k}", gpus=s["gpus"], dur=s["dur"], n_slots=n_slots, interruptible=True,
                    min_chunk_slots=s["min_chunk"], checkpoint_overhead_slots=s["overhead"], max_chunks=2)
                for k, s in enumerate(specs)]
        pb = problem([region("A", prices, gpus=8)], jobs)
        options = [_job_runs(n_slots, 0, n_slots, s["dur"], s["overhead"], s["min_chunk"], 2) for s in specs]
        exact = math.inf  # both jobs planned, at most 8 GPUs in every slot
        for a, b in itertools.product(*options):
            if specs[0]["gpus"] + specs[1]["gpus"] > 8 and set(a) & set(b):
                continue
            cost = sum(sum(int(prices[t]) for t in run) * s["gpus"] * 0.7 / 1000
                       for run, s in zip((a, b), specs, strict=True))
            exact = min(exact, cost)
        if not math.isfinite(exact):
            continue
        lower, _, info = _lp_of(pb)
        assert lower <= exact + 1e-9, (specs, lower, exact)
        if info["converged"]:  # the LP relaxation of every plan check_plan accepts is below every such plan
            assert info["lp_value"] <= exact + 1e-9, (specs, info["lp_value"], exact)
        plan = solve(pb, SolveParams(time_limit_s=20.0))  # tiny: done long before; the margin is for a busy machine
        assert check_plan(pb, plan).ok
        assert plan.penalised_bound is not None and plan.penalised_bound <= exact + 1e-9


def _many_jobs(n):
    rng = np.random.default_rng(2)
    regions = [region(name, rng.integers(5, 100, 96), gpus=64, budget_kw=500.0) for name in "ABCD"]
    jobs = [job(f"j{i}", gpus=int(rng.choice([1, 2, 4])), dur=int(rng.integers(1, 12)), n_slots=96,
                dl=int(rng.integers(24, 97)), interruptible=bool(i % 3 == 0)) for i in range(n)]
    return problem(regions, jobs)


def test_jobs_that_cannot_be_examined_within_the_time_limit_are_left_out_as_not_solved_latest_deadlines_first():
    from optimizer.solve import jobs_in_time

    pb = _many_jobs(10000)
    # 0.5 s allowed: 10,000 jobs' tables and greedy plan take longer anywhere (3,000 fit since the first plan's work
    # is shared per job shape, issue 22). The tables alone may fit (0.09 s since start windows are range-minimum
    # queries), so jobs_in_time may keep them all; the greedy plan then stops at the first plan's deadline and leaves
    # the rest out the same way
    kept = jobs_in_time(pb, 0.0)
    assert kept is None or len(kept) < 10000
    plan = solve(pb, SolveParams(time_limit_s=0.0))
    assert check_plan(pb, plan).ok
    skipped = [u for u in plan.unplanned if u.reason == "not_solved"]
    assert skipped and all("time limit" in u.detail for u in skipped)
    assert len(plan.assignments) + len(plan.unplanned) == 10000  # every job accounted for
    assert plan.status in (PlanStatus.FEASIBLE, PlanStatus.NO_SOLUTION)
    deadline = {j.job_id: j.deadline_slot for j in pb.jobs}
    unexamined = [u for u in skipped if "earliest deadlines" in u.detail]  # (the others: the first plan's deadline)
    if plan.assignments and unexamined:  # the earliest deadlines were examined first
        assert max(deadline[a.job_id] for a in plan.assignments) <= min(deadline[u.job_id] for u in unexamined)
    # a limit that leaves time for every job examines every job
    assert jobs_in_time(_many_jobs(50), 10.0) is None


def test_at_negative_prices_a_job_may_resume_right_after_its_first_chunk():
    # check_plan accepts a second chunk starting where the first ends: at negative prices the overhead hour pays
    prices = [50, 50, -40, -60, -80, -80, -60, -40, -20, 50, 50, 50]
    pb = problem([region("A", prices)], [job("a", dur=6, n_slots=12, interruptible=True, min_chunk_slots=2,
                                               checkpoint_overhead_slots=1)])
    exact = _enumerated_chunking([p * 0.7 / 1000 for p in prices], 6, 1, 2, max_chunks=2)
    assert math.isclose(exact, -380 * 0.7 / 1000)  # seven hours from slot 2, in two chunks back to back
    plan = solve(pb, SolveParams(time_limit_s=2.0))
    assert check_plan(pb, plan).ok
    assert math.isclose(plan.objective, exact, rel_tol=1e-9), plan.assignment_of("a")  # was the 6-hour run, -252
    assert plan.status is PlanStatus.OPTIMAL


def _exact_penalised(pb) -> float:
    """Least cost plus penalties of the jobs left out (the planner's own penalties, ``Tables.penalty``) over every
    plan: an exact CP-SAT model over every start of every job (one run, H100 only, costs in milli-euro) with the GPU
    and power limits of each slot [EUR]."""
    from ortools.sat.python import cp_model

    from optimizer.tables import build_tables

    tb = build_tables(pb)
    assert len(pb.jobs) == tb.J
    penalty = {j.job_id: float(tb.penalty[k]) for k, j in enumerate(pb.jobs)}

    model = cp_model.CpModel()
    runs = []  # (job, region, start, variable)
    for j in pb.jobs:
        d = j.duration_slots["H100"]
        for r in pb.regions:
            for s in range(j.release_slot, j.deadline_slot - d + 1):
                runs.append((j, r, s, model.new_bool_var("")))
    left = []
    for j in pb.jobs:
        mine = [v for jj, _, _, v in runs if jj is j]
        out = model.new_bool_var("")
        model.add(sum(mine) + out == 1)
        left.append((j, out))
    for r in pb.regions:
        for t in range(pb.n_slots):
            here = [(j, v) for j, rr, s, v in runs if rr is r and s <= t < s + j.duration_slots["H100"]]
            if here:
                model.add(sum(j.gpus * v for j, v in here) <= r.inventory["H100"])
                model.add(sum(int(j.gpus * 700) * v for j, v in here) <= int(r.power_budget_kw[t] * 1000))
    # milli-euro: price [EUR/MWh] x kWh / 1000 x 1000; the penalties rounded up (the optimum is not raised)
    cost = [round(sum(r.price_per_mwh[t] for t in range(s, s + j.duration_slots["H100"])) * j.gpus * 0.7)
            for j, r, s, _ in runs]
    model.minimize(sum(c * v for c, (*_, v) in zip(cost, runs, strict=True))
                   + sum(math.ceil(penalty[j.job_id] * 1000) * out for j, out in left))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = 20.0
    solver.parameters.num_workers = 1
    assert solver.solve(model) == cp_model.OPTIMAL
    return solver.objective_value / 1000


def test_jobs_are_left_out_for_capacity_only_as_an_exact_model_leaves_them_out():
    # the planner minimises cost plus a penalty per job left out (larger jobs weigh more): on small tight-budget
    # instances its plan must be as good as the exact optimum of that, and its bound no higher
    rng = np.random.default_rng(7)
    for _ in range(6):
        n_slots = 10
        regions = [region(name, rng.integers(5, 100, n_slots), gpus=8, budget_kw=float(rng.choice([4.0, 6.0])))
                   for name in ("A", "B")]
        jobs = [job(f"j{i}", gpus=int(rng.choice([1, 2, 4])), dur=int(rng.integers(2, 6)), n_slots=n_slots,
                    rel=int(rng.integers(0, 3)), dl=int(rng.integers(7, n_slots + 1))) for i in range(14)]
        pb = problem(regions, jobs)
        exact = _exact_penalised(pb)
        plan = solve(pb, SolveParams(time_limit_s=3.0))
        assert check_plan(pb, plan).ok
        from optimizer.tables import build_tables

        tb = build_tables(pb)
        out = {u.job_id for u in plan.unplanned}
        penalised = plan.objective + sum(float(tb.penalty[k]) for k, j in enumerate(pb.jobs) if j.job_id in out)
        assert plan.penalised_bound is not None and plan.penalised_bound <= exact + 1e-3
        assert penalised <= exact + 1e-3 * len(pb.jobs), (penalised, exact, sorted(out))


def test_a_job_that_fits_only_in_an_uneven_split_is_planned():
    # no price in slots 1 and 5: no run of 4 slots fits, nor two chunks of 2 with a slot between; 1 + 3 does
    prices = [10, math.nan, 30, 20, 30, math.nan, 40]
    pb = problem([region("A", prices)], [job("a", dur=4, n_slots=7, interruptible=True, min_chunk_slots=1)])
    plan = solve(pb, SolveParams(time_limit_s=2.0))
    assert check_plan(pb, plan).ok and not plan.unplanned, plan.unplanned  # was invalid_prices
    assert [(c.start_slot, c.end_slot) for c in plan.assignment_of("a").chunks] == [(0, 1), (2, 5)]
    # more jobs than the LP path takes: the re-chunking phase places it
    plan = solve(pb, SolveParams(time_limit_s=2.0, max_lp_jobs=0, max_cpsat_jobs=0))
    assert check_plan(pb, plan).ok and not plan.unplanned, plan.unplanned
