"""Capacity blocks (issue 27): on a grid finer than the prices the LP bound and the ascent price an hour's GPU and
power rows as one; the bound stays a bound of the per-slot problem and plans still fit every slot."""

from __future__ import annotations

import itertools
import math

import numpy as np

from optimizer import Problem, SolveParams, check_plan, solve
from optimizer.blocks import block_sum, hour_blocks, slot_block, spread
from optimizer.bound import evaluate, subgradient
from optimizer.lp import column_generation
from optimizer.tables import build_tables
from tests.optimizer.conftest import H100, START, job, region


def _held(hourly, per_hour=4):
    return [float(p) for p in np.repeat(np.asarray(hourly, dtype=float), per_hour)]


def test_blocks_are_the_hours_where_every_curve_is_held_and_slots_elsewhere():
    held = np.repeat(np.array([[1.0, 2.0, 3.0]]), 4, axis=1)  # 3 hours of quarter-hours
    assert hour_blocks(0, 15, [held]).tolist() == [0, 4, 8]
    # slot 0 at :30: the first hour holds two slots
    assert hour_blocks(30, 15, [held[:, 2:]]).tolist() == [0, 2, 6]
    # a price that changes at :45 of the second hour: that hour keeps a row per slot
    changed = held.copy()
    changed[0, 7] = 9.0
    assert hour_blocks(0, 15, [changed]).tolist() == [0, 4, 5, 6, 7, 8]
    # NaN held over an hour is held
    gap = held.copy()
    gap[0, 4:8] = np.nan
    assert hour_blocks(0, 15, [gap]).tolist() == [0, 4, 8]
    # 20-minute slots: three to the hour; hourly slots: nothing to aggregate
    assert hour_blocks(0, 20, [np.repeat(held[:, ::4], 3, axis=1)]).tolist() == [0, 3, 6]
    assert hour_blocks(0, 60, [held[:, ::4]]).tolist() == [0, 1, 2]


def test_block_helpers_sum_and_spread_over_each_block():
    starts = np.array([0, 2, 3])
    x = np.array([[1.0, 2.0, 3.0, 4.0, 5.0]])
    assert block_sum(x, starts).tolist() == [[3.0, 3.0, 9.0]]
    assert spread(np.array([[7.0, 8.0, 9.0]]), starts, 5).tolist() == [[7.0, 7.0, 8.0, 9.0, 9.0]]
    assert slot_block(starts, 5).tolist() == [0, 0, 1, 2, 2]


def _quarter_hour_problem(rng, n_jobs=4, hours=2, gpus=4, budget_kw=2.0, start=START):
    n = 4 * hours
    regions = [
        region(name, _held(rng.integers(5, 100, hours)), gpus=gpus, budget_kw=budget_kw) for name in ("A", "B")
    ]
    jobs = [
        job(f"j{i}", gpus=int(rng.choice([1, 2])), dur=int(rng.integers(1, 4)), n_slots=n) for i in range(n_jobs)
    ]
    return Problem(start, 15, n, tuple(regions), (H100,), tuple(jobs))


def _exact(pb: Problem) -> float:
    """Cheapest plan with every job planned as one run, by enumeration, per-slot GPU and power limits."""
    options = [
        [
            (r, s, j.duration_slots["H100"])
            for r in pb.regions
            for s in range(j.release_slot, j.deadline_slot - j.duration_slots["H100"] + 1)
        ]
        for j in pb.jobs
    ]
    best = math.inf
    for combo in itertools.product(*options):
        gpu: dict = {}
        kw: dict = {}
        cost = 0.0
        for j, (r, s, d) in zip(pb.jobs, combo, strict=True):
            p = j.gpus * H100.power_kw_per_gpu * r.pue
            for t in range(s, s + d):
                gpu[(r.name, t)] = gpu.get((r.name, t), 0) + j.gpus
                kw[(r.name, t)] = kw.get((r.name, t), 0.0) + p
                cost += p * pb.slot_hours * r.price_per_mwh[t] / 1000
        by_name = {r.name: r for r in pb.regions}
        if all(v <= by_name[n].inventory["H100"] for (n, _), v in gpu.items()) and all(
            v <= by_name[n].power_budget_kw[t] + 1e-9 for (n, t), v in kw.items()
        ):
            best = min(best, cost)
    return best


def test_the_bound_over_hour_blocks_never_exceeds_the_exact_optimum_and_plans_fit_every_quarter_hour():
    rng = np.random.default_rng(3)
    checked = 0
    for _ in range(10):
        pb = _quarter_hour_problem(rng)
        assert build_tables(pb).blocks is not None  # hourly prices held: the rows are aggregated
        exact = _exact(pb)
        plan = solve(pb, SolveParams(time_limit_s=2.0, max_cpsat_jobs=0))
        assert check_plan(pb, plan).ok  # per quarter-hour, not per hour
        if not math.isfinite(exact):
            continue
        checked += 1
        assert plan.penalised_bound is not None and plan.penalised_bound <= exact + 1e-9, (plan, exact)
        assert plan.unplanned or plan.objective >= exact - 1e-9
    assert checked >= 5


def test_column_generation_prices_an_hour_as_one_row_and_its_duals_give_its_lp_value():
    rng = np.random.default_rng(11)
    # crowded: 30 jobs on 4 GPUs and 2 kW per region over 4 hours, so capacity is priced
    pb = _quarter_hour_problem(rng, n_jobs=30, hours=4)
    tb = build_tables(pb)
    assert tb.blocks is not None and tb.blocks.tolist() == [0, 4, 8, 12]
    cls = np.arange(tb.J)
    lower, m, info = column_generation(
        tb, cls, cls, np.ones(tb.J, dtype=np.int64), [], time_limit_s=30.0, keep_master=True
    )
    assert info["converged"]
    master = info["master"]
    assert {key[2] for key in master.gpu_rows} <= {0, 1, 2, 3}  # one row per hour, not per quarter-hour
    assert m.lam.max() > 0 or m.mu.max() > 0  # capacity binds
    # the duals are held over each hour, and priced on every quarter-hour they give the LP's value: a valid
    # Lagrangian bound of the per-slot problem that meets the aggregated LP
    for x in (m.lam, m.mu):
        assert np.array_equal(x, np.repeat(x[..., ::4], 4, axis=-1))
    assert math.isclose(evaluate(tb, m)[0], info["lp_value"], rel_tol=1e-6, abs_tol=1e-9)
    assert lower <= info["lp_value"] + 1e-9
    # the per-slot LP is tighter than (or as tight as) the one over hour blocks
    tb.blocks = None
    fine_lower, _, fine = column_generation(
        tb, cls, cls, np.ones(tb.J, dtype=np.int64), [], time_limit_s=30.0
    )
    assert fine["converged"]
    assert lower <= fine_lower + 1e-6 * max(1.0, abs(fine_lower))
    # the ascent over hour blocks keeps its multipliers held over each hour
    tb.blocks = np.array([0, 4, 8, 12])
    value, m2, _ = subgradient(tb, 1e9, max_iter=20)
    assert value <= fine_lower + 1e-6 * max(1.0, abs(fine_lower))
    for x in (m2.lam, m2.mu):
        assert np.array_equal(x, np.repeat(x[..., ::4], 4, axis=-1))


def test_columns_added_in_bulk_count_their_slots_per_hour_block_once_each():
    from optimizer.bound import Choice
    from optimizer.lp import RestrictedMaster

    pb = _quarter_hour_problem(np.random.default_rng(3), n_jobs=3, hours=3)
    tb = build_tables(pb)
    assert tb.blocks is not None and tb.blocks.tolist() == [0, 4, 8]
    cls = np.arange(tb.J)
    master = RestrictedMaster(tb, cls, cls, np.ones(tb.J, dtype=np.int64))
    # row 0: slots 2-6 (two in hour 0, three in hour 1); row 1: a two-chunk relaxation whose chunks overlap
    # (slots 4-5 and 5-8: slot 5 counts twice, hour 1 holds five slot-uses, hour 2 one); row 2 left out (r = -1);
    # the first option again (a duplicate in the same call)
    opts = Choice(*(np.array(v, dtype=np.int64) for v in (
        [0, 1, -1, 0], [0, 0, 0, 0], [2, 4, 0, 2], [5, 2, 1, 5], [0, 5, 0, 0], [0, 4, 0, 0],
    )))
    rows = np.array([0, 1, 2, 0])
    assert master.add_options(opts, np.arange(4), rows) == 2
    assert master.add_options(opts, np.arange(4), rows) == 0  # every column known
    assert len(master.column_vars) == 2 and master.column_vars[0][0] == (0, 0, 0, 2, 5, 0, 0)
    model = master.model.export_model()
    coef: dict[tuple[int, int], float] = {}
    mat = model.linear_constraint_matrix
    for r_id, c_id, v in zip(mat.row_ids, mat.column_ids, mat.coefficients, strict=True):
        coef[(r_id, c_id)] = v
    (_, x0), (_, x1) = master.column_vars
    g0, g1 = float(tb.g[0]), float(tb.g[1])
    assert coef[(master.gpu_rows[(0, 0, 0)].id, x0.id)] == 2 * g0
    assert coef[(master.gpu_rows[(0, 0, 1)].id, x0.id)] == 3 * g0
    assert coef[(master.gpu_rows[(1, 0, 1)].id, x1.id)] == 5 * g1
    assert coef[(master.gpu_rows[(1, 0, 2)].id, x1.id)] == 1 * g1
    assert math.isclose(coef[(master.kw_rows[(0, 1)].id, x0.id)], 3 * tb.power_kw(0, 0, 0))
    assert coef[(master.conv[0].id, x0.id)] == 1.0 and coef[(master.conv[1].id, x1.id)] == 1.0
    # bounds and objective as the column of one job: 0 <= x <= 1 at the run's objective
    assert list(model.variables.upper_bounds)[x0.id] == 1.0 and list(model.variables.lower_bounds)[x0.id] == 0.0
    obj = dict(zip(model.objective.linear_coefficients.ids, model.objective.linear_coefficients.values, strict=True))
    w = tb.weights()
    assert math.isclose(obj[x0.id], tb.power_kw(0, 0, 0) * tb.slot_h * w[0, 2:7].sum())
    assert master.solve(5.0)
