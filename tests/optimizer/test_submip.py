"""The MIP over the LP's columns around the best plan (``optimizer.submip``)."""

from __future__ import annotations

import math

import numpy as np

from optimizer import SolveParams, check_plan, solve
from tests.optimizer.conftest import brute_force, job, problem, region, tiny_random


def _lp(tb, seeds):
    from optimizer.cpsat import build_classes
    from optimizer.lp import column_generation

    cls, rep, counts = build_classes(tb)
    _, _, info = column_generation(tb, cls, rep, counts, seeds, time_limit_s=10.0)
    assert info["converged"]
    return cls, rep, counts, info


def _fits(tb, ch) -> bool:
    from optimizer.bound import usage

    gpu, kw = usage(tb, ch)
    return bool((gpu <= tb.cap).all() and (kw <= tb.kw_cap + 1e-9).all())


def test_rins_over_every_class_reaches_the_optimum_from_the_greedy_plan():
    from optimizer.heuristic import greedy_order, penalised_objective, place
    from optimizer.submip import rins
    from optimizer.tables import build_tables

    rng = np.random.default_rng(11)
    for _ in range(4):
        pb = tiny_random(rng)
        tb = build_tables(pb)
        greedy = place(tb, greedy_order(tb))
        cls, rep, counts, info = _lp(tb, [greedy])
        every = np.ones(len(rep), dtype=bool)
        got = rins(
            tb, cls, rep, counts, info["columns_table"], info["primal"], greedy, time_limit_s=5.0, free=every
        )
        assert got is not None and _fits(tb, got) and not (got.r < 0).any()
        best = brute_force(pb)
        # the LP's columns hold an optimal plan on these problems (converged column generation prices in
        # every option an optimal plan needs here); the MIP over them finds it
        assert math.isclose(penalised_objective(tb, got), best, rel_tol=1e-6)
        assert penalised_objective(tb, got) <= penalised_objective(tb, greedy) + 1e-9


def test_rins_keeps_the_classes_the_lp_agrees_on_and_never_returns_a_worse_plan():
    from optimizer.heuristic import greedy_order, penalised_objective, place
    from optimizer.submip import plan_columns, rins
    from optimizer.tables import build_tables

    rng = np.random.default_rng(2)
    regions = [region(n, rng.integers(5, 100, 8), gpus=4, budget_kw=3.0) for n in ("A", "B")]
    jobs = [job(f"j{i}", gpus=int(rng.choice([1, 2, 4])), dur=int(rng.integers(1, 5))) for i in range(10)]
    tb = build_tables(problem(regions, jobs))
    greedy = place(tb, greedy_order(tb))
    cls, rep, counts, info = _lp(tb, [greedy])
    got = rins(tb, cls, rep, counts, info["columns_table"], info["primal"], greedy, time_limit_s=5.0)
    assert got is not None and _fits(tb, got)
    assert penalised_objective(tb, got) <= penalised_objective(tb, greedy) + 1e-9
    # a class the greedy plan and the LP place alike keeps its options
    lp = {tuple(int(v) for v in row[:7]): row[7] for row in info["primal"]}
    table, n = plan_columns(cls, greedy)
    mine = {tuple(int(v) for v in row): k for row, k in zip(table, n, strict=True)}
    agree = [
        c
        for c in range(len(rep))
        if {k: v for k, v in lp.items() if k[0] == c} == {k: v for k, v in mine.items() if k[0] == c}
    ]
    after_table, after_n = plan_columns(cls, got)
    after = {tuple(int(v) for v in row): k for row, k in zip(after_table, after_n, strict=True)}
    for c in agree:
        assert {k: v for k, v in after.items() if k[0] == c} == {k: v for k, v in mine.items() if k[0] == c}


def test_a_solution_that_breaks_a_capacity_is_refused():
    from optimizer.submip import _to_choice
    from optimizer.tables import build_tables

    tb = build_tables(problem([region("A", [10, 20, 30], gpus=2)], [job("a", gpus=2), job("b", gpus=2)]))
    cls = np.array([0, 0])
    table = np.array([[0, 0, 0, 0, 2, 0, 0]])
    assert _to_choice(tb, cls, table, np.array([2])) is None  # both at slot 0: 4 GPUs of 2
    assert _to_choice(tb, cls, table, np.array([1])) is not None
    assert _to_choice(tb, cls, table, np.array([3])) is None  # more jobs than the class has


def _three_regions(seed: int):
    """40 jobs of 1-4 GPUs and 1-5 slots on three regions of four GPUs and 4 kW over 12 slots."""
    rng = np.random.default_rng(seed)
    regions = [region(n, rng.integers(5, 100, 12), gpus=4, budget_kw=4.0) for n in ("A", "B", "C")]
    jobs = [
        job(f"j{i}", gpus=int(rng.choice([1, 2, 4])), dur=int(rng.integers(1, 6)), n_slots=12)
        for i in range(40)
    ]
    return problem(regions, jobs)


def test_solve_collects_the_mip_plan_from_the_second_worker_or_runs_it_alone(monkeypatch):
    import sys

    phases = sys.modules["optimizer.phases_search"]  # the phase that starts the MIP reads its threshold there
    monkeypatch.setattr(phases, "RINS_MIN_S", 0.5)
    # the second worker's threshold too: on a busy machine the phases before it leave less than its 3 s of 4
    monkeypatch.setattr(phases, "RINS_WORKER_MIN_S", 0.5)
    pb = _three_regions(7)
    params = SolveParams(time_limit_s=4.0, num_workers=2, random_seed=3, max_cpsat_jobs=0)
    plan = solve(pb, params)
    assert check_plan(pb, plan).ok
    assert any(note.startswith("rins objective=") for note in plan.stats.notes)
    alone = solve(pb, SolveParams(time_limit_s=4.0, num_workers=1, random_seed=3, max_cpsat_jobs=0))
    assert check_plan(pb, alone).ok  # one worker: the MIP runs in-process
    assert any(note.startswith("rins objective=") for note in alone.stats.notes)
    off = solve(pb, SolveParams(time_limit_s=2.0, num_workers=2, random_seed=3, max_cpsat_jobs=0, rins=False))
    assert check_plan(pb, off).ok
    assert not any("rins" in note for note in off.stats.notes)


def test_a_short_solve_with_two_workers_runs_the_mip_on_the_second_worker():
    # a 6-s solve leaves the MIP less than ``RINS_MIN_S``: on the second worker it still runs (it costs the moves
    # on the first one nothing), alone it does not (it would take their time)
    from optimizer.pipeline import RINS_MIN_S, RINS_WORKER_MIN_S

    limit = 6.0
    assert RINS_WORKER_MIN_S < limit - 1.0 < RINS_MIN_S
    pb = _three_regions(11)
    two = solve(pb, SolveParams(time_limit_s=limit, num_workers=2, random_seed=3, max_cpsat_jobs=0))
    assert check_plan(pb, two).ok
    assert any(note.startswith("rins objective=") for note in two.stats.notes)
    one = solve(pb, SolveParams(time_limit_s=limit, num_workers=1, random_seed=3, max_cpsat_jobs=0))
    assert check_plan(pb, one).ok
    assert not any("rins" in note for note in one.stats.notes)


def test_a_plan_packed_to_the_last_milliwatt_still_starts_the_mip():
    """The MIP's power rows keep a margin against rounding, but never below what the plan it starts from draws."""
    from optimizer.bound import usage
    from optimizer.cpsat import build_classes
    from optimizer.dive import lp_dive
    from optimizer.heuristic import greedy_order, penalised_objective, place
    from optimizer.lp import column_generation
    from optimizer.submip import rins
    from optimizer.tables import build_tables

    rng = np.random.default_rng(1)
    # 2.8 kW is four H100s exactly: the cheap slots fill to the last mW
    regions = [region(n, rng.integers(5, 100, 16), gpus=8, budget_kw=2.8) for n in ("A", "B")]
    tb = build_tables(problem(regions, [job(f"j{i}", dur=int(rng.integers(2, 5)), n_slots=16) for i in range(30)]))
    cls, rep, counts = build_classes(tb)
    _, _, info = column_generation(tb, cls, rep, counts, [place(tb, greedy_order(tb))], time_limit_s=10.0,
                                   keep_master=True)
    packed = lp_dive(tb, info["master"], rep, counts, time_limit_s=5.0)
    _, kw = usage(tb, packed)
    assert (np.abs(kw - tb.kw_cap) < 1e-9).any()
    every = np.ones(len(rep), dtype=bool)
    # far too little time to find a plan from nothing: only the start can be given back
    got = rins(tb, cls, rep, counts, info["columns_table"], info["primal"], packed, time_limit_s=0.05, free=every)
    assert got is not None and _fits(tb, got)
    assert penalised_objective(tb, got) <= penalised_objective(tb, packed) + 1e-9


def test_rins_at_quarter_hour_slots_plans_over_a_row_per_slot():
    # hourly prices held over 15-minute slots: the LP prices capacity over hour blocks (``Tables.blocks``), the MIP
    # must still count every quarter-hour (it built block rows and failed on its per-slot power rows before)
    from optimizer import Problem
    from optimizer.heuristic import greedy_order, penalised_objective, place
    from optimizer.submip import rins
    from optimizer.tables import build_tables
    from tests.optimizer.conftest import H100, START

    rng = np.random.default_rng(5)
    hours = 4
    regions = [region(n, np.repeat(rng.integers(5, 100, hours), 4), gpus=4, budget_kw=2.0) for n in "AB"]
    jobs = [job(f"j{i}", gpus=int(rng.choice([1, 2])), dur=int(rng.integers(1, 6)), n_slots=4 * hours) for i in range(16)]
    tb = build_tables(Problem(START, 15, 4 * hours, tuple(regions), (H100,), tuple(jobs)))
    assert tb.blocks is not None
    greedy = place(tb, greedy_order(tb))
    cls, rep, counts, info = _lp(tb, [greedy])
    every = np.ones(len(rep), dtype=bool)
    got = rins(tb, cls, rep, counts, info["columns_table"], info["primal"], greedy, time_limit_s=5.0, free=every)
    assert got is not None and _fits(tb, got)
    assert penalised_objective(tb, got) <= penalised_objective(tb, greedy) + 1e-9
