"""Jobs shorter than a slot share it one after another: bundled before the solve, given back after."""

from __future__ import annotations

from optimizer import SOLVERS, SolveParams, check_plan
from optimizer.bundle import bundle_short_jobs, unbundle
from tests.optimizer.conftest import job, problem, region


def test_short_alike_jobs_become_one_slot_and_come_back_as_their_members():
    pb = problem([region("DE", [10.0, 50.0, 90.0, 90.0], gpus=1)],
                 [job(f"s{k}", dur=1, n_slots=4) for k in range(3)] + [job("long", dur=2, n_slots=4)])
    minutes = {"s0": {"H100": 4.0}, "s1": {"H100": 5.0}, "s2": {"H100": 9.0}, "long": {"H100": 100.0}}
    packed, bundles = bundle_short_jobs(pb, minutes, {})  # 60-minute slots: 4 + 5 + 9 minutes fit one
    assert [j.job_id for j in packed.jobs] == ["bundle:s0", "long"]
    assert bundles.of("bundle:s0") == ("s0", "s1", "s2")
    plan = SOLVERS["gridshift"](packed, SolveParams(time_limit_s=1.0))
    assert check_plan(packed, plan).ok
    members = unbundle(plan, bundles)
    assert {a.job_id: a.start_slot for a in members.assignments if a.job_id != "long"} == {"s0": 0, "s1": 0, "s2": 0}


def test_jobs_that_do_not_fit_one_slot_together_or_differ_stay_apart():
    pb = problem([region("DE", [10.0] * 4, gpus=2)],
                 [job("a", dur=1, n_slots=4), job("b", dur=1, n_slots=4), job("c", dur=1, gpus=2, n_slots=4),
                  job("d", dur=1, rel=2, n_slots=4)])
    minutes = {k: {"H100": 40.0} for k in "abcd"}
    packed, bundles = bundle_short_jobs(pb, minutes, {})
    assert not bundles.members and packed is pb  # 40 + 40 > 60; c needs 2 GPUs; d's window is later
    # a released 20 minutes into its slot: a and b (20 + 2 x 20 minutes) just fit, a third would not
    packed, bundles = bundle_short_jobs(pb, {k: {"H100": 20.0} for k in "abcd"}, {"a": 20.0})
    assert bundles.members == {"bundle:a": ("a", "b")}
    assert [j.job_id for j in packed.jobs] == ["bundle:a", "c", "d"]


def test_on_a_free_fleet_short_jobs_keep_their_own_gpus():
    pb = problem([region("DE", [10.0] * 4, gpus=8)], [job(f"s{k}", dur=1, n_slots=4) for k in range(3)])
    packed, bundles = bundle_short_jobs(pb, {f"s{k}": {"H100": 1.0} for k in range(3)}, {})
    assert packed is pb and not bundles.members  # eight GPUs: all three start at once, none waits for another
