"""The master LP (the path beyond ``max_lp_jobs``) over hour blocks at 15-minute slots (issue 27): one GPU and one
power row per hour instead of four, its duals held over the hour's quarter-hours, its rounding still fitting every
quarter-hour; the fallback to fewer columns when even the last iterations would not fit its time."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from optimizer import Problem, SolveParams, check_plan, solve
from optimizer.bound import Choice, Multipliers, evaluate, usage
from optimizer.cpsat import build_classes
from optimizer.master import (
    BEST_PAIRS,
    MASTER_ITERATIONS_PER_NONZERO,
    MIN_TRAIL_ITERATIONS,
    best_pairs,
    column_table,
    master_guide,
    master_model,
    master_nonzeros,
    solve_master,
)
from optimizer.tables import build_tables
from tests.optimizer.conftest import H100, START, job, region


def _quarter_hours(rng, n_jobs=30, hours=4, gpus=4, budget_kw=2.0) -> Problem:
    """Two regions with hourly prices held over 15-minute slots, crowded enough that capacity is priced."""
    n = 4 * hours
    regions = [
        region(name, np.repeat(rng.integers(5, 100, hours), 4), gpus=gpus, budget_kw=budget_kw) for name in "AB"
    ]
    jobs = [
        job(f"j{i}", gpus=int(rng.choice([1, 2])), dur=int(rng.integers(1, 6)), n_slots=n) for i in range(n_jobs)
    ]
    return Problem(START, 15, n, tuple(regions), (H100,), tuple(jobs))


def _every_column(tb, cls):
    """Every contiguous start of every job in every region, as the column table of one Choice per option."""
    choices = []
    for row in range(tb.J):
        length = int(tb.dur[row, 0])
        for start in range(int(tb.rel[row]), int(tb.dl[row]) - length + 1):
            for reg in range(tb.R):
                ch = Choice.empty(tb.J)
                ch.r[row], ch.h[row], ch.s1[row], ch.l1[row] = reg, 0, start, length
                choices.append(ch)
    return column_table(tb, cls, choices)


def test_master_over_hour_blocks_has_a_row_per_hour_relaxes_the_per_slot_master_and_holds_its_duals():
    pb = _quarter_hours(np.random.default_rng(11))
    tb = build_tables(pb)
    assert tb.blocks is not None and tb.blocks.tolist() == [0, 4, 8, 12]
    cls, rep, counts = build_classes(tb)
    table = _every_column(tb, cls)
    per_slot = np.arange(tb.T)
    # rows: one per class, then GPU rows per (region, hardware, hour) and power rows per (region, hour)
    blocks = master_model(tb, rep, counts, table)
    fine = master_model(tb, rep, counts, table, per_slot)
    assert len(blocks.linear_constraints.ids) == len(rep) + tb.R * tb.H * 4 + tb.R * 4
    assert len(fine.linear_constraints.ids) == len(rep) + tb.R * tb.H * tb.T + tb.R * tb.T
    # the nonzeros the time prediction counts are the model's, but for each class's left-out variable
    assert master_nonzeros(tb, table) == len(blocks.linear_constraint_matrix.row_ids) - len(rep)
    assert master_nonzeros(tb, table, per_slot) == len(fine.linear_constraint_matrix.row_ids) - len(rep)
    got_b = solve_master(tb, cls, rep, counts, table, time_limit_s=10.0)
    got_f = solve_master(tb, cls, rep, counts, table, time_limit_s=10.0, starts=per_slot)
    assert got_b is not None and got_f is not None
    value_b, primal_b, duals_b = got_b
    value_f, _, _ = got_f
    # every column present: each LP is the full LP of its rows, and the rows over hours relax those per slot
    assert value_b <= value_f + 1e-6 * max(1.0, abs(value_f))
    assert duals_b.lam.max() > 0 or duals_b.mu.max() > 0  # capacity binds
    for x in (duals_b.lam, duals_b.mu):  # a block's dual held over its four quarter-hours
        assert x.shape[-1] == tb.T
        assert np.array_equal(x, np.repeat(x[..., ::4], 4, axis=-1))
    # priced on every quarter-hour, the held duals give the LP's value (every column present)
    assert math.isclose(evaluate(tb, duals_b)[0], value_b, rel_tol=1e-6)
    mass = np.zeros(len(rep))
    np.add.at(mass, primal_b[:, 0].astype(np.int64), primal_b[:, 7])
    assert np.all(mass <= counts + 1e-6)


def test_the_rounding_of_the_master_over_hour_blocks_fits_every_quarter_hour():
    # two 4-GPU jobs of one quarter-hour each, the cheapest hour's first quarter-hour cheapest for both; the row
    # of that hour holds 16 GPU-slots, so the LP may put both in its first quarter-hour, which holds 4 GPUs
    prices = [10.0] * 4 + [90.0] * 4
    pb = Problem(
        START,
        15,
        8,
        (region("A", prices, gpus=4, budget_kw=100.0),),
        (H100,),
        (job("a", gpus=4, dur=1, n_slots=8), job("b", gpus=4, dur=1, n_slots=8)),
    )
    tb = build_tables(pb)
    assert tb.blocks is not None and tb.blocks.tolist() == [0, 4]
    cls, rep, counts = build_classes(tb)
    m = Multipliers.zeros(tb)
    _, cheapest, _ = evaluate(tb, m)
    got = master_guide(tb, cls, rep, counts, [cheapest], m, [], time_limit_s=5.0, iteration_s=0.01)
    assert got is not None
    _, _, _, plan = got
    assert not (plan.r < 0).any()
    first = plan.s1.tolist()
    assert len(set(first)) == 2 and all(s < 4 for s in first)  # both in the cheap hour, one quarter-hour each
    plan_pb = solve(pb, SolveParams(time_limit_s=2.0, num_workers=2, max_lp_jobs=0, max_cpsat_jobs=0))
    assert check_plan(pb, plan_pb).ok
    assert any(n.startswith("master lp columns=") for n in plan_pb.stats.notes)
    assert any(" 2 blocks" in n for n in plan_pb.stats.notes)


def test_solve_beyond_max_lp_jobs_at_quarter_hours_rounds_the_master_over_hours_into_checked_plans():
    rng = np.random.default_rng(5)
    for _ in range(3):
        pb = _quarter_hours(rng, n_jobs=20, hours=3)
        plan = solve(pb, SolveParams(time_limit_s=3.0, num_workers=2, max_lp_jobs=0, max_cpsat_jobs=0))
        assert check_plan(pb, plan).ok  # per quarter-hour, not per hour
        assert any(n.startswith("master lp columns=") for n in plan.stats.notes)
        assert any(" 3 blocks" in n for n in plan.stats.notes)


def test_master_guide_takes_fewer_best_pairs_when_the_fewest_iterations_would_still_miss_its_time():
    rng = np.random.default_rng(7)
    pb = _quarter_hours(rng, n_jobs=12, hours=3, gpus=8, budget_kw=10.0)
    tb = build_tables(pb)
    assert tb.blocks is not None and tb.blocks.tolist() == [0, 4, 8]
    cls, rep, counts = build_classes(tb)
    m = Multipliers.zeros(tb)
    found: list = []
    _, cheapest, _ = evaluate(tb, m, collect=found)
    trail = [cheapest] * MIN_TRAIL_ITERATIONS  # the fewest iterations: only fewer pairs are left to drop
    pairs = best_pairs(tb, found, BEST_PAIRS)
    nz_all = master_nonzeros(tb, column_table(tb, cls, [*pairs, *trail]))
    nz_one = master_nonzeros(tb, column_table(tb, cls, [pairs[0], *trail]))
    assert nz_one < nz_all
    limit_s = 5.0
    per_block = len(tb.blocks) / tb.T  # the iteration's time scaled to the master's blocks
    # room for the trail with one best pair, not with all of them
    iteration_s = limit_s / (MASTER_ITERATIONS_PER_NONZERO * per_block * 0.5 * (nz_one + nz_all))
    notes: list[str] = []
    got = master_guide(tb, cls, rep, counts, trail, m, [], time_limit_s=limit_s, iteration_s=iteration_s, notes=notes)
    assert got is not None and not (got[3].r < 0).any()
    gpu, kw = usage(tb, got[3])  # the rounding fits every quarter-hour
    assert np.all(gpu <= tb.cap) and np.all(kw <= tb.kw_cap + 1e-9)
    said = [n for n in notes if n.startswith("master lp:")]
    assert said and f"from {MIN_TRAIL_ITERATIONS} iterations and" in said[0]
    assert " and 1 pairs" in said[0] or " and 2 pairs" in said[0]
    # with too little time even for one pair and the fewest iterations, no LP is started
    notes = []
    slow = limit_s / (MASTER_ITERATIONS_PER_NONZERO * per_block * 0.5 * nz_one)
    assert master_guide(tb, cls, rep, counts, trail, m, [], time_limit_s=limit_s, iteration_s=slow, notes=notes) is None
    assert notes and notes[0].startswith("master lp skipped:") and " and 1 pairs" in notes[0]


def test_collect_ascent_keeps_the_second_workers_multipliers_only_when_its_bound_is_higher():
    from optimizer.phases_bound import collect_ascent

    pb = _quarter_hours(np.random.default_rng(11), n_jobs=4, hours=1)
    tb = build_tables(pb)
    mine, theirs = Multipliers.zeros(tb), Multipliers.zeros(tb)
    theirs.lam[:] = 1.0

    def run_with(their_bound):
        ascent = SimpleNamespace(result=lambda timeout_s: (their_bound, theirs))
        return SimpleNamespace(ascent=ascent, left=lambda: 1.0, bound=10.0, m=mine, notes=[])

    higher = run_with(12.0)
    collect_ascent(higher)
    assert higher.bound == 12.0 and higher.m is theirs
    assert higher.notes == ["bound: the second worker's multipliers kept (12 > 10)"]
    lower = run_with(9.0)
    collect_ascent(lower)
    assert lower.bound == 10.0 and lower.m is mine
