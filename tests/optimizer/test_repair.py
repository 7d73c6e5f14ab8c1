"""Issue 22 (plans under load): the jobs a plan leaves out are placed by clearing the run whose way is cheapest to
clear, not only their cheapest starts, and an evicted job may itself move another job (one level of cascade)."""

from __future__ import annotations

import numpy as np

from optimizer.bound import Choice, Option
from optimizer.candidates import residual_of
from optimizer.heuristic import penalised_objective
from optimizer.repair import repair_left_out
from optimizer.tables import build_tables
from tests.optimizer.conftest import H100, L40S, job, problem, region


def _plan(tb, placed: dict[int, Option]) -> Choice:
    ch = Choice.empty(tb.J)
    for row, opt in placed.items():
        ch.set(row, opt)
    res = residual_of(tb, ch)
    assert (res.gpu >= 0).all() and (res.kw >= 0).all(), "the test's starting plan fits"
    return ch


def _fits(tb, ch: Choice) -> bool:
    res = residual_of(tb, ch)
    return bool((res.gpu >= 0).all() and (res.kw >= 0).all())


def _row(tb, pb, job_id: str) -> int:
    return int(np.flatnonzero(tb.rows == [j.job_id for j in pb.jobs].index(job_id))[0])


def test_a_job_blocked_at_its_cheapest_start_is_placed_where_the_job_in_its_way_can_move():
    # H100 full in every slot: T (tight, hours 0-1) and F (hours 2-3, may run on L40S instead). X (H100 only) is left
    # out; its cheapest start (0-1) is held by T, which has nowhere else to go, so only the start 2-3 clears
    pb = problem(
        [region("A", [10, 10, 50, 50], gpus={"H100": 8, "L40S": 8}, budget_kw=100.0)],
        [
            job("T", gpus=8, dur=2, dl=2, n_slots=4),
            job("F", gpus=8, dur={"H100": 2, "L40S": 2}, n_slots=4),
            job("X", gpus=4, dur=2, n_slots=4),
        ],
        hardware=(H100, L40S),
    )
    tb = build_tables(pb)
    t, f, x = (_row(tb, pb, k) for k in ("T", "F", "X"))
    ch = _plan(tb, {t: Option(0, 0, 0, 2, 0, 0), f: Option(0, 0, 2, 2, 0, 0)})
    got = repair_left_out(tb, ch, time_limit_s=5.0)
    assert (got.r >= 0).all(), "every job planned"
    assert _fits(tb, got)
    assert (int(got.h[x]), int(got.s1[x])) == (0, 2)
    assert int(got.h[f]) == 1, "F moved to the L40S"
    assert (int(got.s1[t]), int(got.h[t])) == (0, 0), "T kept its only run"
    assert penalised_objective(tb, got) < penalised_objective(tb, ch)


def test_an_evicted_job_with_no_free_place_moves_a_flexible_job_in_turn():
    # big (8 H100, hours 0-2 only) is left out behind med (3 H100, hours 0-2); hours 3-5 of the H100s hold f1 (tight)
    # and f2 (may run on the L40S). Placing big evicts med, which finds room only by moving f2 to the L40S
    pb = problem(
        [region("A", [10] * 6, gpus={"H100": 8, "L40S": 4}, budget_kw=100.0)],
        [
            job("big", gpus=8, dur=3, dl=3, n_slots=6),
            job("med", gpus=3, dur=3, n_slots=6),
            job("f1", gpus=5, dur=3, rel=3, n_slots=6),
            job("f2", gpus=3, dur={"H100": 3, "L40S": 3}, n_slots=6),
        ],
        hardware=(H100, L40S),
    )
    tb = build_tables(pb)
    big, med, f1, f2 = (_row(tb, pb, k) for k in ("big", "med", "f1", "f2"))
    ch = _plan(
        tb,
        {med: Option(0, 0, 0, 3, 0, 0), f1: Option(0, 0, 3, 3, 0, 0), f2: Option(0, 0, 3, 3, 0, 0)},
    )
    got = repair_left_out(tb, ch, time_limit_s=5.0)
    assert (got.r >= 0).all(), f"every job planned, got {got.r.tolist()}"
    assert _fits(tb, got)
    assert (int(got.h[big]), int(got.s1[big])) == (0, 0)
    assert (int(got.h[med]), int(got.s1[med])) == (0, 3)
    assert int(got.h[f2]) == 1


def test_a_repair_that_cannot_place_a_job_returns_the_plan_unchanged():
    # one pool of 8 GPUs, two tight 8-GPU jobs in the same hours: one is left out whatever the repair does
    tight = [job(k, gpus=8, dur=2, dl=2, n_slots=4) for k in ("a", "b")]
    pb = problem([region("A", [10] * 4, gpus=8)], tight)
    tb = build_tables(pb)
    ch = _plan(tb, {0: Option(0, 0, 0, 2, 0, 0)})
    got = repair_left_out(tb, ch, time_limit_s=1.0)
    assert got.r.tolist() == ch.r.tolist() and got.s1.tolist() == ch.s1.tolist()
