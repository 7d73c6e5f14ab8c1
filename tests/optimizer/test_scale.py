"""The fast first plan (issue 22, 100,000 jobs): vectorised scans and tables give the same answers as the per-job ones."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from optimizer import Job, check_plan, solve
from optimizer.bound import Choice, Multipliers, evaluate
from optimizer.candidates import Candidates, place_fast
from optimizer.heuristic import Residual, Scanner, greedy_order, place
from optimizer.scan import best_option
from optimizer.tables import build_tables
from optimizer.windows import SharedSegments
from tests.optimizer.conftest import H100, L40S, problem, region


def _random(seed: int, n_jobs: int = 40, n_slots: int = 16):
    """Three regions (one with missing prices), H100 and L40S, tight GPUs and power, a third of the jobs
    interruptible in chunks of at least 1-2 slots with 0-1 slots of overhead."""
    rng = np.random.default_rng(seed)
    regions = []
    for name in ("A", "B", "C"):
        prices = rng.uniform(5, 120, n_slots).round(1)
        if name == "C":
            prices[rng.integers(0, n_slots, 2)] = np.nan
        regions.append(
            region(
                name,
                prices,
                gpus={"H100": int(rng.integers(2, 6)), "L40S": int(rng.integers(2, 6))},
                budget_kw=float(rng.uniform(2.0, 6.0)),
            )
        )
    jobs = []
    for i in range(n_jobs):
        rel = int(rng.integers(0, n_slots - 4))
        dur = int(rng.integers(1, 6))
        dl = min(n_slots, rel + dur + int(rng.integers(0, 8)))
        intr = bool(rng.random() < 0.35)
        jobs.append(
            Job(
                f"j{i}",
                int(rng.integers(1, 3)),
                {"H100": dur, "L40S": dur + int(rng.integers(0, 3))},
                rel,
                dl,
                interruptible=intr,
                max_chunks=2 if intr else 1,
                min_chunk_slots=int(rng.integers(1, 3)),
                checkpoint_overhead_slots=int(rng.integers(0, 2)),
            )
        )
    return problem(regions, jobs, hardware=(H100, L40S))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("priced", [False, True])
def test_the_one_pass_scan_finds_the_per_pair_scans_option(seed, priced):
    # the first plan's scan over all pairs at once must pick exactly what the per-pair scan picks (ties included)
    tb = build_tables(_random(seed))
    rng = np.random.default_rng(seed)
    m = None
    if priced:
        m = Multipliers.zeros(tb)
        m.mu = rng.uniform(0, 0.05, m.mu.shape)
        m.lam = rng.uniform(0, 0.05, m.lam.shape)
    scan = Scanner(tb, m)
    res = Residual(tb)
    half = greedy_order(tb)[: tb.J // 2]
    ch = place(tb, half)
    for placed in np.flatnonzero(ch.r >= 0):
        res.apply(tb, ch, int(placed), -1)
    compared = 0
    for row in range(tb.J):
        r, h = np.nonzero(tb.elig[row])
        order = rng.permutation(len(r))
        r, h = r[order], h[order]
        pairs = [(int(a), int(b), -np.inf) for a, b in zip(r, h, strict=True)]
        want = scan.best(row, res, pairs)
        got = best_option(scan, row, res, r, h)
        assert (want is None) == (got is None), row
        if want is not None:
            assert got == want, row
            compared += 1
    assert compared > tb.J // 2


@pytest.mark.parametrize("seed", range(4))
def test_the_fast_first_plan_is_the_greedy_plan_and_checks(seed):
    # place_fast (candidates, then the one-pass scan) makes the same choices as the plain greedy placement
    pb = _random(seed, n_jobs=60)
    tb = build_tables(pb)
    found: list = []
    evaluate(tb, Multipliers.zeros(tb), collect=found)
    order = greedy_order(tb)
    fast = place_fast(tb, order, Candidates(tb, found))
    plain = place(tb, order)
    for field in ("r", "h", "s1", "l1", "s2", "l2"):
        assert np.array_equal(getattr(fast, field), getattr(plain, field)), field
    assert isinstance(fast, Choice)


def test_a_solved_random_plan_passes_the_checker():
    pb = _random(7, n_jobs=60)
    plan = solve(pb)
    assert check_plan(pb, plan).ok


@pytest.mark.parametrize("seed", range(4))
def test_the_shared_start_windows_equal_each_jobs_own(seed):
    # start windows are checked once per job shape; every job's starts must still be exactly those that fit alone
    pb = _random(seed, n_jobs=80)
    tb = build_tables(pb)
    segs = [*tb.contig, *(s for pair in tb.halves for s in pair)]
    assert segs
    for seg in segs:
        at = 0
        for k, row in enumerate(seg.job):
            power = tb.g[row] * tb.pkw[row, seg.h] * tb.pue[seg.r]
            for s in range(seg.rel[k], seg.rel[k] + seg.nst[k]):
                run = slice(s, s + seg.length[k])
                fits = (
                    tb.cap[seg.r, seg.h, run].min() >= tb.g[row]
                    and tb.kw_cap[seg.r, run].min() >= power - 1e-9
                    and tb.valid[seg.r, run].all()
                )
                assert seg.ok[at] == fits, (seg.r, seg.h, row, s)
                at += 1
        assert at == len(seg.ok)
    # a job is plannable on a pair exactly when one of its single runs fits there (or two chunks do)
    for seg in tb.contig:
        first = np.concatenate(([0], np.cumsum(seg.nst)[:-1]))
        alone = np.logical_or.reduceat(seg.ok, first)
        assert np.all(tb.elig[seg.job[alone], seg.r, seg.h])


@pytest.mark.parametrize("seed", range(4))
def test_a_job_that_fits_beside_the_plan_is_not_left_out(seed):
    # a plan that leaves out jobs (the first half placed only) gets every job that still fits placed, none moved,
    # and the residual capacity it is checked against is the one job by job
    from optimizer.candidates import fill_left_out, residual_of

    tb = build_tables(_random(seed, n_jobs=60))
    ch = place(tb, greedy_order(tb)[: tb.J // 2])
    res = Residual(tb)
    for row in np.flatnonzero(ch.r >= 0):
        res.apply(tb, ch, int(row), -1)
    fast = residual_of(tb, ch)
    assert np.array_equal(fast.gpu, res.gpu) and np.array_equal(fast.kw, res.kw)
    filled = fill_left_out(tb, ch, np.arange(tb.J))
    kept = ch.r >= 0
    for field in ("r", "h", "s1", "l1", "s2", "l2"):
        assert np.array_equal(getattr(filled, field)[kept], getattr(ch, field)[kept])
    assert (filled.r >= 0).sum() > kept.sum()
    after = residual_of(tb, filled)
    assert after.gpu.min() >= 0 and after.kw.min() >= 0
    scan = Scanner(tb)
    for row in np.flatnonzero(filled.r < 0):
        assert scan.best(int(row), after) is None, row


def _job_by_job(tb) -> None:
    """Make ``evaluate`` price every job of ``tb`` (each segment its own unit)."""
    contig = [(seg, np.arange(len(seg.job))) for seg in tb.contig]
    halves = [(a, b, np.arange(len(a.job))) for a, b in tb.halves]
    tb.shared = SharedSegments(contig, halves, 0, 0)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("priced", [False, True])
def test_the_shared_evaluation_equals_the_plain_one(seed, priced):
    # the Lagrangian evaluation, once per job shape, gives the same bound, options and candidates as job by job
    pb = _random(seed, n_jobs=80)
    twins = tuple(dataclasses.replace(j, job_id=j.job_id + "-twin") for j in pb.jobs[:40])  # shapes shared
    pb = dataclasses.replace(pb, jobs=pb.jobs + twins)
    plain, tb = build_tables(pb), build_tables(pb)
    _job_by_job(plain)
    m = Multipliers.zeros(tb)
    if priced:
        rng = np.random.default_rng(seed)
        m.mu = rng.uniform(0, 0.05, m.mu.shape)
        m.lam = rng.uniform(0, 0.05, m.lam.shape)
    want_found: list = []
    got_found: list = []
    want = evaluate(plain, m, collect=want_found)
    got = evaluate(tb, m, collect=got_found)
    assert got[0] == want[0]
    assert np.array_equal(got[2], want[2])
    for field in ("r", "h", "s1", "l1", "s2", "l2"):
        assert np.array_equal(getattr(got[1], field), getattr(want[1], field)), field
    for a, b in zip(got_found, want_found, strict=True):
        for x, y in zip(a, b, strict=True):
            assert np.array_equal(np.asarray(x), np.asarray(y))
    assert tb.shared is not None and tb.shared.starts < tb.shared.every  # the copied jobs were not evaluated again


@pytest.mark.parametrize("seed", range(3))
def test_each_two_chunk_option_of_the_evaluation_is_the_cheapest_pair_and_its_earliest(seed):
    # the two-chunk pricing (running minima per width class) against an enumeration of every pair of starts
    from optimizer.bound import cumulative, segment_values, two_chunk_argmin

    tb = build_tables(_random(seed, n_jobs=60, n_slots=24))
    assert tb.halves
    rng = np.random.default_rng(seed)
    m = Multipliers.zeros(tb)
    m.lam = rng.uniform(0, 0.05, m.lam.shape)
    cum_a, cum_l = cumulative(tb.slot_h * tb.weights() + m.mu), cumulative(m.lam)
    for seg_a, seg_b in tb.halves:
        total, s1, s2 = two_chunk_argmin(tb, seg_a, seg_b, cum_a, cum_l)
        si, start_a, _, va = segment_values(tb, seg_a, cum_a, cum_l)
        _, start_b, _, vb = segment_values(tb, seg_b, cum_a, cum_l)
        for i in range(len(seg_a.job)):
            mine = np.flatnonzero(si == i)
            pairs = [
                (va[p] + vb[q], start_a[p], start_b[q])
                for p in mine
                for q in mine
                if start_b[q] >= start_a[p] + seg_a.length[i] + 1
            ]
            want = min((v for v, _, _ in pairs), default=np.inf)
            assert total[i] == want, (seg_a.r, seg_a.h, i)
            if np.isfinite(want):
                # the earliest second chunk reaching it, then the earliest first chunk before that one
                b = min(q for v, _, q in pairs if v == want)
                a = min(p for v, p, q in pairs if v == want and q == b)
                assert (s1[i], s2[i]) == (a, b), (seg_a.r, seg_a.h, i)
