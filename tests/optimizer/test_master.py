"""The master LP built from arrays over the Lagrangian ascent's options (the path beyond ``max_lp_jobs``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from optimizer import SolveParams, check_plan, solve
from tests.optimizer.conftest import brute_force, job, problem, region, tiny_random


def _every_start(tb):
    """Every contiguous option of every job row as a Choice, with its job rows."""
    from optimizer.bound import Choice

    rows, opts = [], []
    for row in range(tb.J):
        length = int(tb.dur[row, 0])
        for start in range(int(tb.rel[row]), int(tb.dl[row]) - length + 1):
            for reg in range(tb.R):
                rows.append(row)
                opts.append((reg, 0, start, length, 0, 0))
    return Choice(*(np.array(col, dtype=np.int64) for col in zip(*opts, strict=True))), np.array(rows)


@pytest.mark.parametrize("solver", ["highs_ipm", "glop"])
def test_master_over_every_column_is_the_full_lp_and_its_duals_give_that_bound(solver):
    from optimizer.bound import Choice, evaluate
    from optimizer.cpsat import build_classes
    from optimizer.lp import RestrictedMaster
    from optimizer.master import column_table, solve_master
    from optimizer.tables import build_tables

    rng = np.random.default_rng(4)
    regions = [region(n, rng.integers(5, 100, 8), gpus=4, budget_kw=3.0) for n in ("A", "B")]
    jobs = [job(f"j{i}", gpus=int(rng.choice([1, 2, 4])), dur=int(rng.integers(1, 5))) for i in range(12)]
    tb = build_tables(problem(regions, jobs))
    cls, rep, counts = build_classes(tb)
    opts, rows = _every_start(tb)
    per_row = [Choice(*(np.full(tb.J, -1 if k == 0 else 0, dtype=np.int64) for k in range(6)))]
    for k in range(len(rows)):  # one Choice per option, as the ascent's trail would hold them
        ch = per_row[0].copy()
        ch.set(int(rows[k]), opts.get(k))
        per_row.append(ch)
    table = column_table(tb, cls, per_row)
    assert len(table) == len(np.unique(np.column_stack((cls[rows], opts.r, opts.s1)), axis=0))
    got = solve_master(tb, cls, rep, counts, table, time_limit_s=10.0, solver=solver)
    assert got is not None
    value, primal, duals = got
    reference = RestrictedMaster(tb, cls, rep, counts)
    reference.add_options(opts, np.arange(len(rows)), rows)
    assert reference.solve(5.0)
    assert math.isclose(value, reference.value(), rel_tol=1e-7)
    bound, _, _ = evaluate(tb, duals)  # every column present: the duals price out to the LP value
    assert math.isclose(bound, value, rel_tol=1e-6)
    mass = np.zeros(len(rep))
    np.add.at(mass, primal[:, 0].astype(np.int64), primal[:, 7])
    assert np.all(mass <= counts + 1e-6)


def test_column_table_merges_a_class_and_drops_overlapping_two_chunk_relaxations():
    from optimizer.bound import Choice
    from optimizer.master import column_table
    from optimizer.tables import build_tables

    regions = [region("A", [10, 20, 30, 40, 50, 60], gpus=4, budget_kw=3.0)]
    jobs = [job(f"j{i}", dur=2, n_slots=6) for i in range(3)]
    tb = build_tables(problem(regions, jobs))
    cls = np.zeros(tb.J, dtype=np.int64)  # identical jobs: one class
    one = Choice(
        *(np.array(v, dtype=np.int64) for v in ([0, 0, 0], [0, 0, 0], [1, 1, 3], [2, 2, 2], [0] * 3, [0] * 3))
    )
    overlap = Choice(
        *(np.array(v, dtype=np.int64) for v in ([0, -1, -1], [0] * 3, [0] * 3, [1] * 3, [1] * 3, [1] * 3))
    )
    table = column_table(tb, cls, [one, overlap])
    assert table.tolist() == [[0, 0, 0, 1, 2, 0, 0], [0, 0, 0, 3, 2, 0, 0]]


def test_solve_beyond_max_lp_jobs_rounds_the_master_and_finds_the_optimum():
    rng = np.random.default_rng(3)
    for _ in range(3):
        pb = tiny_random(rng)
        best = brute_force(pb)
        params = SolveParams(time_limit_s=3.0, num_workers=2, random_seed=1, max_lp_jobs=0, max_cpsat_jobs=0)
        plan = solve(pb, params)
        assert check_plan(pb, plan).ok
        assert any(note.startswith("master lp columns=") for note in plan.stats.notes)
        assert math.isclose(plan.objective, best, rel_tol=1e-6)
        assert plan.best_bound is not None and plan.best_bound <= best + 1e-9
        off = solve(
            pb,
            SolveParams(time_limit_s=2.0, random_seed=1, max_lp_jobs=0, max_cpsat_jobs=0, max_master_jobs=0),
        )
        assert check_plan(pb, off).ok
        assert not any("master lp" in note for note in off.stats.notes)


def test_rounding_places_the_jobs_given_first_before_the_others():
    from optimizer.bound import Multipliers
    from optimizer.cpsat import build_classes
    from optimizer.rounding import round_lp
    from optimizer.tables import build_tables

    # a flexible 2-slot job and a job that must run in slot 0, both on the whole inventory; an LP solution
    # that puts both at slot 0: biggest first leaves the fixed job out, the fixed job first fits both
    pb = problem(
        [region("A", [10, 20, 30], gpus=2, budget_kw=10.0)],
        [job("flex", gpus=2, dur=2, n_slots=3), job("fixed", gpus=2, dur=1, dl=1, n_slots=3)],
    )
    tb = build_tables(pb)
    cls, _rep, _counts = build_classes(tb)
    primal = np.array([[cls[0], 0, 0, 0, 2, 0, 0, 1.0], [cls[1], 0, 0, 0, 1, 0, 0, 1.0]])
    m = Multipliers.zeros(tb)
    plain = round_lp(tb, cls, primal, m)
    assert plain.r.tolist() == [0, -1]
    fixed_first = round_lp(tb, cls, primal, m, first=np.array([1]))
    assert fixed_first.r.tolist() == [0, 0] and fixed_first.s1.tolist() == [1, 0]


def test_best_pairs_rank_each_jobs_pairs_by_their_priced_best_option():
    from optimizer.bound import Multipliers, evaluate
    from optimizer.master import best_pairs
    from optimizer.tables import build_tables
    from tests.optimizer.conftest import H100, L40S

    rng = np.random.default_rng(5)
    regions = [region(n, rng.integers(5, 100, 8), gpus={"H100": 4, "L40S": 4}, budget_kw=5.0) for n in "AB"]
    jobs = [job(f"j{i}", dur={"H100": 2, "L40S": 4}) for i in range(3)] + [job("h", dur=3)]
    tb = build_tables(problem(regions, jobs, hardware=(H100, L40S)))
    found: list = []
    _, cheapest, _ = evaluate(tb, Multipliers.zeros(tb), collect=found)
    ranked = best_pairs(tb, found, 4)
    for row in range(tb.J):
        assert ranked[0].get(row) == cheapest.get(row)  # the first pair holds the job's best option
        pairs = [(int(ch.r[row]), int(ch.h[row])) for ch in ranked if ch.r[row] >= 0]
        assert len(pairs) == len(set(pairs)) == int(tb.elig[row].sum())  # each eligible pair once
    assert ranked[2].r[3] == -1  # the H100-only job has two pairs


def test_master_guide_does_not_start_an_lp_predicted_to_miss_its_time():
    from optimizer.bound import Multipliers, evaluate
    from optimizer.cpsat import build_classes
    from optimizer.master import master_guide
    from optimizer.tables import build_tables

    rng = np.random.default_rng(4)
    regions = [region(n, rng.integers(5, 100, 8), gpus=4, budget_kw=3.0) for n in ("A", "B")]
    tb = build_tables(problem(regions, [job(f"j{i}", gpus=2, dur=3) for i in range(6)]))
    cls, rep, counts = build_classes(tb)
    m = Multipliers.zeros(tb)
    _, cheapest, _ = evaluate(tb, m)
    got = master_guide(tb, cls, rep, counts, [cheapest], m, [], time_limit_s=5.0, iteration_s=0.01)
    assert got is not None and not (got[3].r < 0).any()
    assert master_guide(tb, cls, rep, counts, [cheapest], m, [], time_limit_s=5.0, iteration_s=1e6) is None


def test_master_guide_takes_fewer_ascent_iterations_when_all_of_them_would_miss_its_time():
    # a master LP over every trail option predicted too slow is solved over the options of the last few
    # iterations instead of being skipped (before: skipped, and the plan went without its rounding)
    from optimizer.bound import Choice, Multipliers, evaluate
    from optimizer.cpsat import build_classes
    from optimizer.master import MASTER_ITERATIONS_PER_NONZERO, master_guide
    from optimizer.tables import build_tables

    rng = np.random.default_rng(4)
    regions = [region(n, rng.integers(5, 100, 8), gpus=8, budget_kw=10.0) for n in ("A", "B")]
    tb = build_tables(problem(regions, [job(f"j{i}", gpus=2, dur=3) for i in range(6)]))
    cls, rep, counts = build_classes(tb)
    m = Multipliers.zeros(tb)
    evaluate(tb, m)
    trail = []
    for k in range(12):  # every job at region k % 2 from slot k // 2: twelve different columns
        ch = Choice.empty(tb.J)
        ch.r[:], ch.s1[:], ch.l1[:] = k % 2, k // 2, 3
        trail.append(ch)
    limit_s = 5.0
    iteration_s = limit_s / (MASTER_ITERATIONS_PER_NONZERO * 7 * 9)  # about 9 columns of 7 nonzeros fit, not 12
    notes: list[str] = []
    got = master_guide(tb, cls, rep, counts, trail, m, [], time_limit_s=limit_s, iteration_s=iteration_s, notes=notes)
    assert got is not None and not (got[3].r < 0).any()
    kept = [int(n.split(" from ")[1].split()[0]) for n in notes if " from " in n]
    assert kept and kept[0] < 12


def test_duals_and_primal_after_columns_added_since_the_last_solve():
    """A dive adds columns (and with them capacity rows) and may fail to re-solve in the time left; the duals and
    primal it then reads are the last solve's, with 0 for what was added since (an IndexError before)."""
    from optimizer.cpsat import build_classes
    from optimizer.lp import RestrictedMaster
    from optimizer.tables import build_tables

    rng = np.random.default_rng(5)
    regions = [region(n, rng.integers(5, 100, 8), gpus=4, budget_kw=3.0) for n in ("A", "B")]
    jobs = [job(f"j{i}", gpus=int(rng.choice([1, 2])), dur=int(rng.integers(1, 4))) for i in range(6)]
    tb = build_tables(problem(regions, jobs))
    cls, rep, counts = build_classes(tb)
    opts, rows = _every_start(tb)
    in_a = np.flatnonzero(opts.r == 0)
    master = RestrictedMaster(tb, cls, rep, counts)
    master.add_options(opts, in_a, rows)
    assert master.solve(5.0)
    before, pi_before = master.duals()
    n_rows = len(master.gpu_rows) + len(master.kw_rows)
    assert master.add_options(opts, np.flatnonzero(opts.r == 1), rows) > 0  # region B's columns and rows
    assert len(master.gpu_rows) + len(master.kw_rows) > n_rows
    after, pi_after = master.duals()
    assert np.array_equal(after.lam[0], before.lam[0]) and np.all(after.lam[1] == 0.0)
    assert np.array_equal(pi_after, pi_before)
    primal = master.primal()
    assert len(primal) and np.all(primal[:, 1] == 0)  # the last solution: region A's columns only
