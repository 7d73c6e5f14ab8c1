"""The time the search holds back for the bound (issue 27): an open bound keeps half the search's time for a resumed
ascent only where that time can hold one; else the search takes it (1,000 jobs at 15-minute slots in 10 s had ~1 s
idle at the end)."""

from __future__ import annotations

import time

import numpy as np

from optimizer import SolveParams
from optimizer.phases_bound import bound_worker
from optimizer.pipeline import SHARE
from optimizer.solve import start_run
from optimizer.tables import build_tables
from tests.optimizer.test_coarse import _quarter_hours


def _open_run(limit_s: float):
    """A run whose LP did not converge, one worker (no ascent beside), no CP-SAT, ``limit_s`` [s] from now."""
    tb = build_tables(_quarter_hours(np.random.default_rng(1)))
    params = SolveParams(time_limit_s=limit_s, num_workers=1, max_cpsat_jobs=0)
    t0 = time.perf_counter()
    run = start_run(tb, params, t0, t0, {})
    run.limit, run.t0, run.eval_s = limit_s, time.perf_counter(), 0.2
    assert not run.use_cpsat and not run.lp_converged
    return run


def test_the_search_takes_the_time_a_resumed_ascent_could_not_use():
    run = _open_run(2.0)  # 0.375 x 2 s left after the search's share: less than 4 evaluations + 0.5 s
    bound_worker(run)
    assert not run.bound_open and run.share == SHARE["local_search"]
    assert any("no time for a resumed ascent" in n for n in run.notes)


def test_an_open_bound_keeps_its_share_where_the_ascent_fits():
    run = _open_run(60.0)
    bound_worker(run)
    assert run.bound_open and run.share == SHARE["local_search_shared"]
