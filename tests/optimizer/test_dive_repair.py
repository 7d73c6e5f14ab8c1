"""Issue 22, one-day horizons: a dive that ends a job short is repaired (its jobs left out placed by ejection moves)
and becomes a start of the moves, instead of being dropped behind the left-out job's penalty."""

from __future__ import annotations

import time

import numpy as np
import pytest

from optimizer import SolveParams
from optimizer.bound import Choice
from optimizer.heuristic import penalised_objective
from tests.optimizer.conftest import job, problem, region


@pytest.mark.parametrize("left_after_dives_s", [None, 0.25], ids=["time-to-spare", "little-time-left"])
def test_a_dive_that_leaves_a_job_out_is_repaired_into_a_full_plan_among_the_starts(monkeypatch, left_after_dives_s):
    import sys

    from optimizer import phases_bound
    from optimizer.phases_bound import lp_colgen, lp_dive
    from optimizer.tables import build_tables

    # two 8-GPU jobs of 3 hours on 8 GPUs: one in the cheap hours, the other beside it; the dive places only one
    prices = [10, 10, 10, 50, 60, 70, 80, 90]
    pb = problem([region("A", prices, gpus=8)], [job("a", gpus=8, dur=3), job("b", gpus=8, dur=3)])
    tb = build_tables(pb)
    run = sys.modules["optimizer.solve"].start_run(
        tb, SolveParams(time_limit_s=30.0), time.perf_counter(), time.perf_counter(), {}
    )
    lp_colgen(run)
    short = Choice.empty(tb.J)
    short.r[0], short.h[0], short.s1[0], short.l1[0] = 0, 0, 0, 3  # job a in hours 0-2, job b left out

    def dives(*a, **k):
        if left_after_dives_s is not None:  # the dives of a 10-s solve took the time but this much (a loaded machine)
            run.limit = 10.0
            run.t0 = time.perf_counter() - run.limit + left_after_dives_s
        return [short]

    monkeypatch.setattr(phases_bound, "dive_portfolio", dives)
    lp_dive(run)
    full = [c for c in run.best.starts if not (c.r < 0).any() and c.r[0] == 0 and c.s1[0] == 0]
    assert any(n.startswith("lp dive repaired 0") for n in run.notes), run.notes
    assert full, "the repaired dive is a start of the moves"
    # job b goes to the cheapest 3 hours left (3-5); the plan is cheaper than the dive with b's penalty
    assert int(full[-1].s1[1]) == 3
    assert penalised_objective(tb, full[-1]) < penalised_objective(tb, short)
    assert np.isclose(penalised_objective(tb, full[-1]), 8 * 0.7 * (30 + 180) / 1000)
