"""Per-slot rows in the LP over hour blocks (issue 27): before the dives, the LP gets a row for each quarter-hour its
solution overfills, so the dives start from an LP that packs slot by slot; the LP stays a relaxation."""

from __future__ import annotations

import copy

import numpy as np

from optimizer.bound import Choice
from optimizer.dive import dive_portfolio, refine_slots
from optimizer.lp import RestrictedMaster, column_generation
from optimizer.tables import build_tables
from tests.optimizer.test_blocks import _quarter_hour_problem


def _slot_use(tb, rep, primal):
    """GPUs per (region, hardware, slot) and kW per (region, slot) of an LP solution."""
    gpu = np.zeros(tb.cap.shape)
    kw = np.zeros(tb.kw_cap.shape)
    for c, r, h, s1, l1, s2, l2, x in primal:
        j, r, h = int(rep[int(c)]), int(r), int(h)
        for s, ln in ((int(s1), int(l1)), (int(s2), int(l2))):
            gpu[r, h, s : s + ln] += x * tb.g[j]
            kw[r, s : s + ln] += x * tb.power_kw(j, r, h)
    return gpu, kw


def _overfilled(tb, rep, primal):
    gpu, kw = _slot_use(tb, rep, primal)
    return int((gpu > tb.cap + 1e-6).sum() + (kw > tb.kw_cap + 1e-6).sum())


def _converged_block_lp(seed=5):
    pb = _quarter_hour_problem(np.random.default_rng(seed), n_jobs=40, hours=4, gpus=6, budget_kw=3.0)
    tb = build_tables(pb)
    assert tb.blocks is not None
    cls = np.arange(tb.J)
    counts = np.ones(tb.J, dtype=np.int64)
    _, _, info = column_generation(tb, cls, cls, counts, [], time_limit_s=30.0, keep_master=True)
    assert info["converged"]
    return tb, cls, counts, info["master"]


def test_refined_lp_fills_no_quarter_hour_past_its_capacity_and_stays_a_relaxation():
    tb, cls, counts, master = _converged_block_lp()
    block_value = master.value()
    # over hour blocks the LP moves capacity between an hour's quarter-hours
    assert _overfilled(tb, cls, master.primal()) > 0
    added = refine_slots(master, time_limit_s=30.0)
    assert added > 0 and master.refine() == 0
    assert _overfilled(tb, cls, master.primal()) == 0
    assert master.value() >= block_value - 1e-9
    # the same columns under a row for every slot: the refined LP has a subset of those rows, so it lies below
    per_slot_tb = copy.copy(tb)
    per_slot_tb.blocks = None
    full = RestrictedMaster(per_slot_tb, cls, cls, counts)
    keys = np.array([key for key, _ in master.column_vars], dtype=np.int64)
    full.add_options(Choice(*(keys[:, k] for k in range(1, 7))), np.arange(len(keys)), keys[:, 0])
    assert full.solve(30.0)
    assert master.value() <= full.value() + 1e-6 * max(1.0, abs(full.value()))


def test_a_slot_row_prices_its_quarter_hour_on_top_of_its_hour_and_columns_added_later_count_in_it():
    tb, cls, _, master = _converged_block_lp()
    refine_slots(master, time_limit_s=30.0)
    m, _ = master.duals()
    y = master.y
    for (r, h, b), row in master.gpu_rows.items():
        for slot in np.flatnonzero(master.block_of == b):
            own = master.slot_gpu[r, h, slot]
            expect = max(0.0, -y[row.id]) + (max(0.0, -y[own]) if own >= 0 else 0.0)
            assert np.isclose(m.lam[r, h, slot], expect)
    # a column added after the refinement gets its GPUs in the slot rows it runs through
    r, h, t = (int(v) for v in np.argwhere(master.slot_gpu >= 0)[0])
    j = next(
        j
        for j in range(tb.J)
        if tb.allowed[j].any() and tb.rel[j] <= t < tb.dl[j] and tb.g[j] <= tb.cap[r, h, t]
    )
    s, ln = next(
        (s, ln)
        for ln in range(1, 9)
        for s in range(t - ln + 1, t + 1)
        if s >= 0 and (int(cls[j]), r, h, s, ln, 0, 0) not in master.columns
    )
    opt = Choice(*(np.array([v], dtype=np.int64) for v in (r, h, s, ln, 0, 0)))
    assert master.add_options(opt, np.arange(1), np.array([j])) == 1
    var = master.column_vars[-1][1]
    mat = master.model.export_model().linear_constraint_matrix
    coef = {(a, b): v for a, b, v in zip(mat.row_ids, mat.column_ids, mat.coefficients, strict=True)}
    assert coef[(int(master.slot_gpu[r, h, t]), var.id)] == float(tb.g[j])


def test_the_dives_start_from_the_refined_lp_where_capacity_is_priced_over_blocks():
    tb, cls, counts, master = _converged_block_lp()
    plans = dive_portfolio(tb, master, cls, counts, time_limit_s=10.0, workers=2)
    assert (master.slot_gpu >= 0).any() or (master.slot_kw >= 0).any()  # refined here, before the dives fork
    assert plans
    for ch in plans:
        gpu = np.zeros(tb.cap.shape)
        for j in np.flatnonzero(ch.r >= 0):
            for s, ln in ((ch.s1[j], ch.l1[j]), (ch.s2[j], ch.l2[j])):
                gpu[ch.r[j], ch.h[j], s : s + ln] += tb.g[j]
        assert (gpu <= tb.cap).all()  # every dive's plan fits each quarter-hour
