"""The hourly LP's columns as the first columns of the quarter-hour LP (issue 27, ``optimizer.coarse_lp``): every
lifted column is a run the fine plan could make, the bound offered with them is valid, and the fine LP seeded with
them ends at the same optimum as the fine LP from scratch."""

from __future__ import annotations

from datetime import timedelta

import numpy as np

from optimizer import SolveParams, check_plan, solve
from optimizer.coarse import inside
from optimizer.coarse_lp import coarse_columns
from optimizer.cpsat import build_classes
from optimizer.lp import column_generation
from optimizer.tables import build_tables
from tests.optimizer.conftest import START
from tests.optimizer.test_coarse import _quarter_hours


def test_hourly_columns_are_fine_runs_and_lead_the_fine_lp_to_the_same_optimum():
    pb = _quarter_hours(np.random.default_rng(3), hours=16, n_jobs=24, start=START + timedelta(minutes=30))
    tb = build_tables(pb)
    cls, rep, counts = build_classes(tb)
    got = coarse_columns(tb, cls, rep, time_limit_s=30.0)
    assert got is not None
    ch, rows, value, m, notes = got
    assert notes["hourly_converged"] and notes["lifted_columns"] > 0 and notes["priced_columns"] > 0
    # every column is a run of its job inside its window on valid slots, of the job's fine run time on its hardware
    for k, row in enumerate(rows.tolist()):
        opt = ch.get(k)
        assert inside(tb, row, opt)
        work = opt.l1 if opt.l2 == 0 else opt.l1 + opt.l2 - int(tb.ovh[row])
        assert work == int(tb.dur[row, opt.h])
    scratch_bound, _, scratch = column_generation(tb, cls, rep, counts, [], time_limit_s=30.0)
    bound, _, seeded = column_generation(
        tb, cls, rep, counts, [], time_limit_s=30.0, columns=(ch, rows), start=(value, m)
    )
    assert scratch["converged"] and seeded["converged"]
    assert abs(seeded["lp_value"] - scratch["lp_value"]) <= 1e-6 * max(1.0, abs(scratch["lp_value"]))
    # the bounds are valid: no plan of the fine problem costs less (the planner's best plan, checked)
    plan = solve(pb, SolveParams(time_limit_s=3.0, num_workers=1))
    assert check_plan(pb, plan).ok and not plan.unplanned
    assert value <= bound + 1e-9 <= plan.objective + 1e-6
    assert scratch_bound <= plan.objective + 1e-6



def test_the_planner_with_the_hourly_lp_first_gives_a_checked_plan_and_a_valid_bound():
    pb = _quarter_hours(np.random.default_rng(3), hours=16, n_jobs=24, start=START + timedelta(minutes=30))
    # CP-SAT off, so that the bound reported is the LP's (the fine column generation started from hourly columns)
    params = SolveParams(time_limit_s=3.0, num_workers=1, max_cpsat_jobs=0, coarse_lp_share=0.3)
    plan = solve(pb, params)
    assert check_plan(pb, plan).ok and not plan.unplanned
    assert plan.stats is not None and any(n.startswith("coarse lp:") for n in plan.stats.notes)
    # the bound is no higher than the exact LP optimum of the fine problem (column generation from scratch)
    tb = build_tables(pb)
    cls, rep, counts = build_classes(tb)
    _, _, exact = column_generation(tb, cls, rep, counts, [], time_limit_s=30.0)
    assert exact["converged"]
    assert plan.best_bound is not None and plan.best_bound <= exact["lp_value"] + 1e-6 <= plan.objective + 1e-6
