"""The warm-started LP master, the ascent on a second worker and the LP-targeted group moves."""

from __future__ import annotations

import itertools
import math
import time

import numpy as np

from optimizer import SolveParams, check_plan, solve
from tests.optimizer.conftest import brute_force, job, problem, region, tiny_random


def test_warm_started_master_matches_a_master_solved_from_scratch():
    from optimizer.bound import Choice, Multipliers, evaluate
    from optimizer.cpsat import build_classes
    from optimizer.lp import RestrictedMaster

    # 12 jobs on 2 regions x 8 slots: columns added in three rounds, each solve from the last basis
    rng = np.random.default_rng(4)
    regions = [region(n, rng.integers(5, 100, 8), gpus=4, budget_kw=3.0) for n in ("A", "B")]
    jobs = [job(f"j{i}", gpus=int(rng.choice([1, 2, 4])), dur=int(rng.integers(1, 5))) for i in range(12)]
    from optimizer.tables import build_tables

    tb = build_tables(problem(regions, jobs))
    cls, rep, counts = build_classes(tb)
    found: list = []
    evaluate(tb, Multipliers.zeros(tb), collect=found)
    rows, r, h, s1, l1, s2, l2, _ = (np.concatenate(x) for x in zip(*found, strict=True))
    every = Choice(r, h, s1, l1, s2, l2)
    # every start of every job as a column: add them in three rounds to one master, all at once to another
    all_rows, all_opts = [], []
    for row in range(tb.J):
        for start in range(int(tb.rel[row]), int(tb.dl[row] - tb.dur[row, 0]) + 1):
            for reg in range(tb.R):
                all_rows.append(row)
                all_opts.append((reg, 0, start, int(tb.dur[row, 0]), 0, 0))
    opts = Choice(*(np.array(col, dtype=np.int64) for col in zip(*all_opts, strict=True)))
    job_rows = np.array(all_rows, dtype=np.int64)
    warm = RestrictedMaster(tb, cls, rep, counts)
    warm.add_options(every, np.arange(len(rows)), rows)
    assert warm.solve(5.0)
    values = []
    for part in np.array_split(np.arange(len(job_rows)), 3):
        warm.add_options(opts, part, job_rows)
        assert warm.solve(5.0)
        values.append(warm.value())
        assert warm.var_status is not None  # the next solve starts from this basis
    cold = RestrictedMaster(tb, cls, rep, counts)
    cold.add_options(every, np.arange(len(rows)), rows)
    cold.add_options(opts, np.arange(len(job_rows)), job_rows)
    assert cold.solve(5.0)
    assert all(b <= a + 1e-9 for a, b in itertools.pairwise(values))  # more columns never raise it
    assert math.isclose(values[-1], cold.value(), rel_tol=1e-9)
    m_warm, _pi_warm = warm.duals()
    bound_warm, _, _ = evaluate(tb, m_warm)
    assert math.isclose(bound_warm, cold.value(), rel_tol=1e-6)  # every column there: duals give the LP bound


def _sleep_then_one() -> int:
    time.sleep(30)
    return 1


def test_fork_call_returns_the_value_none_on_error_and_none_past_its_time():
    from optimizer.parallel import fork_call

    child = fork_call(lambda: {"bound": 3.5, "lam": np.arange(4.0)})
    assert child is not None
    got = child.result(timeout_s=10.0)
    assert got["bound"] == 3.5 and got["lam"].tolist() == [0.0, 1.0, 2.0, 3.0]

    def broken():
        raise ValueError("no")

    failing = fork_call(broken)
    assert failing is not None and failing.result(timeout_s=10.0) is None
    slow = fork_call(_sleep_then_one)
    assert slow is not None
    t0 = time.perf_counter()
    assert slow.result(timeout_s=0.3) is None
    assert time.perf_counter() - t0 < 5.0  # the late child is killed, not waited for


def test_a_result_larger_than_a_pipe_is_read_whole_when_asked_for_at_its_deadline():
    # the second worker's multipliers at 15-minute slots (R x H x T floats) and its plans at 10,000 jobs are far
    # larger than the 64 KiB a pipe holds: the child writes them in pieces as the parent reads, so a parent that
    # asks at the end of its time (timeout 0) must still read the whole answer once the child has started it
    from optimizer.parallel import fork_call

    big = np.arange(1 << 20, dtype=np.float64)  # 8 MiB
    for _ in range(3):
        child = fork_call(lambda: big * 2.0)
        assert child is not None
        time.sleep(0.5)  # the child has computed its answer and is blocked writing it
        got = child.result(timeout_s=0.0)
        assert got is not None and got.shape == big.shape and got[-1] == 2.0 * big[-1]


def test_a_child_whose_result_is_never_asked_for_is_killed_and_reaped():
    import gc
    import os

    from optimizer.parallel import fork_call

    child = fork_call(_sleep_then_one)
    assert child is not None
    pid = child.pid
    del child  # as when the solve that started it raised
    gc.collect()
    try:
        os.waitpid(pid, os.WNOHANG)
        reaped = False
    except ChildProcessError:
        reaped = True
    assert reaped


def test_ascent_on_a_second_worker_gives_a_valid_bound_without_the_lp():
    for seed in (3, 8):
        pb = tiny_random(np.random.default_rng(seed))
        best = brute_force(pb)
        two = SolveParams(time_limit_s=3.0, num_workers=2, random_seed=1, max_lp_jobs=0, max_cpsat_jobs=0)
        plan = solve(pb, two)
        assert check_plan(pb, plan).ok
        assert any("second worker" in note for note in plan.stats.notes)
        assert plan.best_bound is not None and plan.best_bound <= best + 1e-9
        one = SolveParams(time_limit_s=2.0, num_workers=1, random_seed=1, max_lp_jobs=0, max_cpsat_jobs=0)
        alone = solve(pb, one)
        assert not any("second worker" in note for note in alone.stats.notes)
        assert alone.best_bound is not None and alone.best_bound <= best + 1e-9


def test_lp_targeted_group_moves_keep_a_fitting_plan_and_never_raise_the_objective():
    from optimizer.bound import Multipliers, evaluate
    from optimizer.candidates import Candidates
    from optimizer.cpsat import build_classes
    from optimizer.heuristic import greedy_order, penalised_objective, place
    from optimizer.lp import column_generation
    from optimizer.recreate import _lp_targets, ruin_recreate
    from optimizer.tables import build_tables

    rng = np.random.default_rng(2)
    regions = [region(n, rng.integers(5, 100, 8), gpus=4, budget_kw=3.0) for n in ("A", "B")]
    jobs = [job(f"j{i}", gpus=int(rng.choice([1, 2, 4])), dur=int(rng.integers(1, 5))) for i in range(10)]
    pb = problem(regions, jobs)
    tb = build_tables(pb)
    cls, rep, counts = build_classes(tb)
    found: list = []
    _, unconstrained, _ = evaluate(tb, Multipliers.zeros(tb), collect=found)
    start = place(tb, greedy_order(tb))
    _, m, info = column_generation(tb, cls, rep, counts, [start, unconstrained], time_limit_s=5)
    _table, mass, offsets, low = _lp_targets(tb, cls, info["primal"])
    assert len(offsets) == len(rep) + 1 and np.all(np.diff(offsets) >= 0)
    assert np.all(mass > 0) and np.all(np.isfinite(low) | (np.diff(offsets)[cls] == 0))
    out = ruin_recreate(
        tb, start, m, Candidates(tb, found), time_limit_s=0.5, seed=3, lp=(cls, info["primal"])
    )
    assert penalised_objective(tb, out) <= penalised_objective(tb, start) + 1e-9
    assert penalised_objective(tb, out) >= info["lp_value"] - 1e-6  # no plan below the LP bound
    from optimizer.bound import usage

    gpu, kw = usage(tb, out)
    assert (gpu <= tb.cap + 1e-9).all() and (kw <= tb.kw_cap + 1e-6).all()


def test_a_child_the_parent_waits_for_keeps_its_priority_and_one_beside_a_busy_parent_yields(monkeypatch):
    import os
    from typing import Any, cast

    from optimizer import dive
    from optimizer.bound import Choice
    from optimizer.parallel import fork_call
    from optimizer.tables import build_tables

    base = os.nice(0)
    waited = fork_call(lambda: os.nice(0), yield_to_parent=False)
    beside = fork_call(lambda: os.nice(0))
    assert waited is not None and beside is not None, "fork is available on the test machines"
    assert waited.result(timeout_s=10.0) == base
    assert beside.result(timeout_s=10.0) == min(base + 5, 19)

    # the dives are children the parent waits for: each runs at the parent's priority, or another process on a
    # busy machine takes their cores and no dive ends in time (issue 22, plans under load)
    def niceness_as_plan(tb, master, rep, counts, **kw):
        ch = Choice.empty(tb.J)
        ch.r[:] = os.nice(0)
        return ch

    monkeypatch.setattr(dive, "lp_dive", niceness_as_plan)
    tb = build_tables(problem([region("A", [10] * 8)], [job("a"), job("b")]))
    no_lp = cast(Any, None)  # the stand-in dive never reads the LP, and hourly slots need no per-slot refinement
    plans = dive.dive_portfolio(tb, no_lp, np.arange(2), np.ones(2, dtype=np.int64), time_limit_s=10.0, workers=2)
    assert len(plans) == sum(len(lane) for lane in dive.DIVE_LANES)
    assert all((p.r == base).all() for p in plans)
