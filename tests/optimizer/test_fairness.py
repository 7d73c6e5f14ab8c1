"""Fair share between tenants and tenant budgets in the planner (optimizer.fairness, optimizer.budgets), checked by
check_plan's independent tenant figures."""

from __future__ import annotations

import dataclasses

import pytest

from optimizer import SolveParams, UnplannedReason, check_plan, solve
from optimizer.check_tenants import _fair
from optimizer.layers import tenant_levels, water_fill
from optimizer.pools import constrained_fill
from optimizer.tenancy import BudgetWindow, Fairness, TenantPolicy
from tests.optimizer.conftest import H100, L40S, job, problem, region

N = 12
PARAMS = SolveParams(time_limit_s=3.0, random_seed=0)


def scarce(jobs, **kw):
    """One region of 8 H100 over 12 one-hour slots: 96 GPU-h, twelve 2-GPU 4-hour jobs."""
    return problem([region("X", [50 + i for i in range(N)], gpus=8, budget_kw=1000.0)], jobs, **kw)


def flood(n_a=60, n_b=4, prio_a=1000, prio_b=10):
    jobs = [job(f"a{i}", gpus=2, dur=4, n_slots=N, priority=prio_a, tenant="A") for i in range(n_a)]
    jobs += [job(f"b{i}", gpus=2, dur=4, n_slots=N, priority=prio_b, tenant="B") for i in range(n_b)]
    return jobs


def planned_by(plan, prefix):
    return sum(a.job_id.startswith(prefix) for a in plan.assignments)


def test_a_flood_at_top_priority_does_not_take_another_tenants_fair_share():
    pb = scarce(flood())
    plan = solve(pb, PARAMS)
    report = check_plan(pb, plan, strict_fairness=True)
    assert report.ok, report.violations
    assert planned_by(plan, "b") == 4  # B asks 32 of 96 GPU-h, less than its half: it gets all of it
    assert planned_by(plan, "a") == 8  # the flood gets the rest, no more
    # without fairness the same problem gives the flood everything (the behaviour issue 21 reports)
    unfair = solve(dataclasses.replace(pb, fairness=Fairness(enabled=False)), PARAMS)
    assert planned_by(unfair, "b") == 0
    assert check_plan(pb, unfair).unfair  # and the checker says B is short


def test_equal_weights_split_scarce_capacity_evenly_whatever_the_priorities():
    pb = scarce(flood(n_a=60, n_b=30, prio_a=1000, prio_b=0))
    plan = solve(pb, PARAMS)
    assert check_plan(pb, plan, strict_fairness=True).ok
    assert (planned_by(plan, "a"), planned_by(plan, "b")) == (6, 6)


def test_weights_change_the_shares():
    pb = scarce(flood(n_a=60, n_b=30, prio_a=1000, prio_b=0), tenants=(TenantPolicy("B", weight=3.0),))
    plan = solve(pb, PARAMS)
    report = check_plan(pb, plan, strict_fairness=True)
    assert report.ok, report.violations
    assert (planned_by(plan, "a"), planned_by(plan, "b")) == (3, 9)
    shares = {s.tenant: s for s in report.tenants}
    assert shares["B"].fair_gpu_h == pytest.approx(72.0) and shares["B"].planned_gpu_h == pytest.approx(72.0)


def test_priority_orders_jobs_within_a_tenant():
    jobs = [job(f"a{i}", gpus=2, dur=4, n_slots=N, priority=1000, tenant="A") for i in range(20)]
    jobs += [job(f"bhi{i}", gpus=2, dur=4, n_slots=N, priority=5, tenant="B") for i in range(4)]
    jobs += [job(f"blo{i}", gpus=2, dur=4, n_slots=N, priority=1, tenant="B") for i in range(10)]
    plan = solve(scarce(jobs), PARAMS)
    assert planned_by(plan, "bhi") == 4 and planned_by(plan, "blo") == 2 and planned_by(plan, "a") == 6


def test_left_out_jobs_say_which_share_their_tenant_got():
    plan = solve(scarce(flood()), PARAMS)
    left = [u for u in plan.unplanned if u.job_id.startswith("a")]
    assert left and all(u.reason is UnplannedReason.CAPACITY and "fair share" in u.detail for u in left)


def test_a_carbon_budget_holds_and_jobs_beyond_it_say_how_much_is_short():
    # each job: 2 GPU x 0.7 kW x 4 h = 5.6 kWh at 300 g/kWh = 1.68 kg; B may still emit 4 kg: two jobs
    pb = scarce(flood(n_a=2, n_b=4), tenants=(TenantPolicy("B", carbon_budget_kg=4.0),))
    plan = solve(pb, PARAMS)
    report = check_plan(pb, plan, strict_fairness=True)
    assert report.ok, report.violations
    assert planned_by(plan, "b") == 2 and planned_by(plan, "a") == 2
    budget = [u for u in plan.unplanned if u.reason is UnplannedReason.BUDGET]
    assert len(budget) == 2 and all(u.job_id.startswith("b") for u in budget)
    assert "carbon_kg short 1.040 kg" in budget[0].detail  # 3.36 used + 1.68 = 5.04 against 4.0
    assert {s.tenant: s for s in report.tenants}["B"].carbon_kg <= 4.0


def test_a_cost_budget_moves_nothing_it_need_not_and_frees_capacity_for_others():
    # B may spend nothing more this period: its jobs wait with reason budget and A gets the whole fleet
    pb = scarce(flood(n_a=20, n_b=4), tenants=(TenantPolicy("B", cost_budget=0.0),))
    plan = solve(pb, PARAMS)
    assert check_plan(pb, plan).ok
    assert planned_by(plan, "b") == 0 and planned_by(plan, "a") == 12
    budget = [u for u in plan.unplanned if u.reason is UnplannedReason.BUDGET]
    assert len(budget) == 4 and all("cost" in u.detail and "remaining 0.000" in u.detail for u in budget)


def test_quotas_on_gpu_hours_and_gpus_at_once_hold():
    pb = scarce(flood(n_a=4, n_b=6), tenants=(TenantPolicy("B", gpu_hours_budget=20.0, max_gpus={"H100": 2}),))
    plan = solve(pb, PARAMS)
    report = check_plan(pb, plan)
    assert report.ok, report.violations
    # 20 GPU-h: two 8-GPU-h jobs; 2 GPUs at once: one at a time, which 12 slots allow for both
    assert planned_by(plan, "b") == 2 and planned_by(plan, "a") == 4
    quota = [u for u in plan.unplanned if u.reason is UnplannedReason.QUOTA]
    assert len(quota) == 4 and all(u.job_id.startswith("b") for u in quota)
    b_runs = sorted((a.start_slot, a.end_slot) for a in plan.assignments if a.job_id.startswith("b"))
    assert b_runs[0][1] <= b_runs[1][0]  # never two of B's jobs at once
    over = dataclasses.replace(pb, tenants=(TenantPolicy("B", max_gpus={"H100": 1}),))
    assert any("GPUs at once" in v for v in check_plan(over, plan).violations)


def test_a_gpu_hour_quota_per_window_holds_in_each_window():
    # a daily quota as windows: 8 GPU-h in slots 0-6 and 8 in slots 6-12 (not 16 anywhere): jobs of 8 GPU-h each
    windows = (BudgetWindow(0, 6, gpu_hours=8.0), BudgetWindow(6, 12, gpu_hours=8.0))
    pb = scarce(flood(n_a=0, n_b=4), tenants=(TenantPolicy("B", windows=windows),))
    plan = solve(pb, PARAMS)
    report = check_plan(pb, plan)
    assert report.ok, report.violations
    for w in windows:
        inside = sum(2 * max(0, min(a.end_slot, w.end_slot) - max(a.start_slot, w.start_slot)) for a in plan.assignments)
        assert inside <= 8.0
    assert 1 <= planned_by(plan, "b") <= 2
    left = [u for u in plan.unplanned if u.job_id.startswith("b")]
    assert left and all(u.reason is UnplannedReason.QUOTA and "gpu_hours in slots" in u.detail for u in left)
    # the checker sees a window passed, which the whole-horizon figure (32 of no limit) hides
    tight = dataclasses.replace(pb, tenants=(TenantPolicy("B", windows=(BudgetWindow(0, 12, gpu_hours=1.0),)),))
    assert any("in slots 0-12 exceeds" in v for v in check_plan(tight, plan).violations)
    with pytest.raises(ValueError, match="end_slot"):
        BudgetWindow(6, 6)


def test_check_plan_reports_a_plan_past_a_budget():
    pb = scarce(flood(n_a=0, n_b=4))
    plan = solve(pb, PARAMS)
    tight = dataclasses.replace(pb, tenants=(TenantPolicy("B", energy_budget_kwh=10.0),))
    report = check_plan(tight, plan)
    assert any("energy_kwh" in v and "exceeds its remaining budget" in v for v in report.violations)


def test_water_fill_gives_small_demands_all_and_shares_the_rest_by_weight():
    shares = water_fill(100.0, {"a": 1.0, "b": 1.0, "c": 2.0}, {"a": 10.0, "b": 80.0, "c": 80.0})
    assert shares == pytest.approx({"a": 10.0, "b": 30.0, "c": 60.0})
    assert water_fill(500.0, {"a": 1.0}, {"a": 10.0}) == pytest.approx({"a": 10.0})


def test_fair_shares_count_only_the_hardware_a_tenant_can_use():
    # 8 H100 and 16 L40S over 12 slots; B's jobs need 60 GB (H100 only), A's run on either: B's share is the H100s
    # (96 GPU-h), not half of the whole 288, and A keeps the L40S that B could never use
    fleet = region("X", [50 + i for i in range(N)], gpus={"H100": 8, "L40S": 16}, budget_kw=1000.0)
    jobs = [job(f"a{i}", gpus=2, dur={"H100": 4, "L40S": 4}, n_slots=N, priority=1000, tenant="A") for i in range(60)]
    jobs += [job(f"b{i}", gpus=2, dur={"H100": 4, "L40S": 4}, n_slots=N, tenant="B", memory_gb_per_gpu=60.0)
             for i in range(30)]
    pb = problem([fleet], jobs, hardware=(H100, L40S))
    plan = solve(pb, PARAMS)
    report = check_plan(pb, plan, strict_fairness=True)
    assert report.ok, report.violations
    shares = {s.tenant: s for s in report.tenants}
    assert shares["B"].fair_gpu_h == pytest.approx(96.0) and shares["B"].planned_gpu_h == pytest.approx(96.0)
    assert shares["A"].fair_gpu_h == pytest.approx(192.0) and planned_by(plan, "a") == 24
    assert all(a.hardware == "H100" for a in plan.assignments if a.job_id.startswith("b"))


def test_constrained_shares_follow_the_pools_each_tenant_may_use_and_the_checker_agrees():
    # p1 holds 10 GPU-h, p2 30; b may use p1 only, c asks 5 of p2, a may use both: c gets all it asks, b is stopped
    # by p1 (which a leaves to it), a takes the rest
    capacity = {("R", "p1", 0): 10.0, ("R", "p2", 0): 30.0}
    p1, p2 = frozenset({("R", "p1", 0)}), frozenset({("R", "p2", 0)})
    classes = {("a", p1 | p2): 100.0, ("b", p1): 100.0, ("c", p2): 5.0}
    weights = {"a": 1.0, "b": 1.0, "c": 1.0}
    expected = {"a": 25.0, "b": 10.0, "c": 5.0}
    assert constrained_fill(weights, classes, capacity) == pytest.approx(expected, abs=1e-2)
    demand = [(t, set(pools), w) for (t, pools), w in classes.items()]
    assert _fair(weights, demand, capacity) == pytest.approx(expected, abs=1e-6)
    # with a weight of 3 and both pools open to b, b gets three times a's share
    open_b = {("a", p1 | p2): 100.0, ("b", p1 | p2): 100.0}
    both = constrained_fill({"a": 1.0, "b": 3.0}, open_b, capacity)
    assert both == pytest.approx({"a": 10.0, "b": 30.0}, abs=1e-2)
    assert _fair({"a": 1.0, "b": 3.0}, [(t, set(p), w) for (t, p), w in open_b.items()], capacity) == pytest.approx(
        {"a": 10.0, "b": 30.0}, abs=1e-6
    )


def test_priority_levels_are_ranks_within_each_tenant():
    pb = scarce([*flood(n_a=2, n_b=2, prio_a=1000, prio_b=10), job("b9", n_slots=N, priority=0, tenant="B")])
    levels = tenant_levels(pb)
    assert levels["a0"] == 0 and levels["b0"] == 99 and levels["b9"] == 0


def test_bad_tenant_settings_name_the_field():
    with pytest.raises(ValueError, match="weight"):
        TenantPolicy("A", weight=0.0)
    with pytest.raises(ValueError, match="carbon_budget_kg"):
        TenantPolicy("A", carbon_budget_kg=-1.0)
    with pytest.raises(ValueError, match="pool_hours"):
        Fairness(pool_hours=0.0)
    with pytest.raises(ValueError, match="duplicate tenant"):
        scarce([], tenants=(TenantPolicy("A"), TenantPolicy("A")))


def _left_out(pb, plan, job_ids):
    """``plan`` (of a sub-problem) as a plan of ``pb`` with ``job_ids`` left out for capacity."""
    from optimizer.plan import Unplanned

    more = tuple(Unplanned(j, UnplannedReason.CAPACITY, "no room") for j in job_ids)
    return dataclasses.replace(plan, unplanned=(*plan.unplanned, *more))


def test_repair_takes_out_over_share_work_so_a_short_tenants_big_job_runs():
    """Tenant S's one job needs all 4 GPUs for 4 hours; the flood F fills the pool with 1-GPU jobs. F is 16 GPU-h
    above its share: its jobs of the first four hours go, S's job runs there, and F keeps its share."""
    import time

    from optimizer.swap import repair

    n = 8
    flood_jobs = [job(f"f{i}", gpus=1, dur=4, n_slots=n, priority=1000, tenant="F") for i in range(8)]
    big = job("s0", gpus=4, dur=4, n_slots=n, tenant="S")
    pb = problem([region("X", [50.0] * n, gpus=4, budget_kw=1000.0)], [*flood_jobs, big])
    blind = solve(dataclasses.replace(pb, jobs=tuple(flood_jobs), fairness=Fairness(enabled=False)), PARAMS)
    plan = _left_out(pb, blind, ["s0"])
    assert planned_by(plan, "f") == 8 and planned_by(plan, "s") == 0
    work = {j.job_id: j.gpus * 4.0 for j in pb.jobs}
    fixed = repair(pb, plan, {"F": 16.0, "S": 16.0}, {"F": 32.0, "S": 0.0}, work, tenant_levels(pb),
                   until=time.perf_counter() + 5.0)
    assert fixed is not None
    report = check_plan(pb, fixed, strict_fairness=True)
    assert report.ok, report.violations
    assert planned_by(fixed, "s") == 1 and planned_by(fixed, "f") == 4
    assert {u.job_id for u in fixed.unplanned} == {a.job_id for a in plan.assignments} - {
        a.job_id for a in fixed.assignments
    }


def test_repair_moves_jobs_in_time_when_taking_out_alone_cannot_make_room():
    """2 GPUs over 8 hours; S's own 2-GPU 4-hour job sits in the cheap middle, so its other one fits nowhere, and no
    tenant is over its share to give anything up. Moving the first job to one end makes room for both."""
    import time

    from optimizer.swap import repair

    n = 8
    jobs = [job("s0", gpus=2, dur=4, n_slots=n, tenant="S"), job("s1", gpus=2, dur=4, n_slots=n, tenant="S")]
    pb = problem([region("X", [100.0, 100.0, 1.0, 1.0, 1.0, 1.0, 100.0, 100.0], gpus=2, budget_kw=1000.0)], jobs)
    first = solve(dataclasses.replace(pb, jobs=tuple(jobs[:1]), fairness=Fairness(enabled=False)), PARAMS)
    assert [c.start_slot for c in first.assignments[0].chunks] == [2]
    plan = _left_out(pb, first, ["s1"])
    fixed = repair(pb, plan, {"S": 16.0}, {"S": 8.0}, {"s0": 8.0, "s1": 8.0}, tenant_levels(pb),
                   until=time.perf_counter() + 5.0)
    assert fixed is not None and check_plan(pb, fixed).ok
    assert sorted(a.job_id for a in fixed.assignments) == ["s0", "s1"]
    assert not fixed.unplanned


def test_a_pool_packed_again_brings_in_a_short_tenants_job_by_moving_and_taking_out():
    """One pool of 4 GPUs over 8 hours: S's 2-GPU job in the middle, F's two 2-GPU jobs beside it, F 8 GPU-h above
    its share. S's waiting job of 4 GPUs for 4 hours comes in: S's first job moves, one of F's jobs goes."""
    from optimizer.freeslots import run_at
    from optimizer.repack import repack_pool

    n = 8
    s0 = job("s0", gpus=2, dur=4, n_slots=n, tenant="S")
    s1 = job("s1", gpus=4, dur=4, n_slots=n, tenant="S")
    f0 = job("f0", gpus=2, dur=4, n_slots=n, tenant="F")
    f1 = job("f1", gpus=2, dur=4, n_slots=n, tenant="F")
    pb = problem([region("X", [50.0] * n, gpus=4, budget_kw=1000.0)], [s0, s1, f0, f1])
    placed = {
        "s0": run_at(pb, s0, "X", "H100", 2, 4),
        "f0": run_at(pb, f0, "X", "H100", 0, 4),
        "f1": run_at(pb, f1, "X", "H100", 4, 4),
    }
    jobs = {j.job_id: j for j in pb.jobs}
    work = {"s0": 8.0, "s1": 16.0, "f0": 8.0, "f1": 8.0}
    got = repack_pool(pb, ("X", "H100"), placed, jobs, [s1], {"F": 8.0}, {"S": 16.0}, work, time_limit_s=5.0)
    assert got is not None
    moved, taken, brought = got
    assert set(brought) == {"s1"} and len(taken) == 1 and taken <= {"f0", "f1"}
    assert "s0" in moved  # from the middle to the end F's job left
    use = [0] * n
    for s, d, g in [(*moved.get(j, (placed[j].start_slot, 4)), jobs[j].gpus) for j in placed if j not in taken] + [
        (*brought["s1"], 4)
    ]:
        for k in range(s, s + d):
            use[k] += g
    assert max(use) <= 4


def test_repair_lets_a_whole_job_in_when_that_brings_every_tenant_closer_to_its_share():
    """F holds the whole pool (96 GPU-h) against a share of 60; S's one job is 48 GPU-h against a share of 36. F
    giving up only its 36 above the share leaves no room; giving up 48 (12 below its share) lets S's job in, and no
    tenant ends further than 12 GPU-h from its share instead of 36."""
    import time

    from optimizer.swap import repair

    n = 12
    flood_jobs = [job(f"f{i}", gpus=1, dur=6, n_slots=n, tenant="F") for i in range(16)]
    big = job("s0", gpus=8, dur=6, n_slots=n, tenant="S")
    pb = problem([region("X", [50.0] * n, gpus=8, budget_kw=1000.0)], [*flood_jobs, big])
    blind = solve(dataclasses.replace(pb, jobs=tuple(flood_jobs), fairness=Fairness(enabled=False)), PARAMS)
    assert planned_by(blind, "f") == 16
    work = {j.job_id: j.gpus * 6.0 for j in pb.jobs}
    fixed = repair(pb, _left_out(pb, blind, ["s0"]), {"F": 60.0, "S": 36.0}, {"F": 96.0, "S": 0.0}, work,
                   tenant_levels(pb), until=time.perf_counter() + 5.0)
    assert fixed is not None and check_plan(pb, fixed).ok
    assert planned_by(fixed, "s") == 1 and planned_by(fixed, "f") == 8


def test_repair_moves_a_job_to_another_hardware_type_by_taking_over_share_work_out_there():
    """S's job needs all 4 H100 for the whole horizon, where M's job (at its share) runs; M's job may also run on
    L40S, which F's 1-GPU jobs fill (F 16 GPU-h above its share). No free place takes M's job, so it moves only if
    F's jobs on L40S go: then S's job runs, M keeps its share, and the largest gap from a share falls from 32 to 16."""
    import time

    from optimizer.swap import repair

    n = 8
    f_jobs = [job(f"f{i}", gpus=1, dur={"L40S": 8}, n_slots=n, tenant="F") for i in range(4)]
    m0 = job("m0", gpus=4, dur={"H100": 8, "L40S": 8}, n_slots=n, tenant="M")
    s0 = job("s0", gpus=4, dur=8, n_slots=n, tenant="S")
    pb = problem([region("X", [50.0] * n, gpus={"H100": 4, "L40S": 4}, budget_kw=1000.0)], [*f_jobs, m0, s0],
                 hardware=(H100, L40S))
    blind = solve(dataclasses.replace(pb, jobs=(*f_jobs, m0), fairness=Fairness(enabled=False)), PARAMS)
    assert {a.job_id: a.hardware for a in blind.assignments}["m0"] == "H100"
    work = {j.job_id: j.gpus * 8.0 for j in pb.jobs}
    fixed = repair(pb, _left_out(pb, blind, ["s0"]), {"F": 16.0, "M": 32.0, "S": 32.0},
                   {"F": 32.0, "M": 32.0, "S": 0.0}, work, tenant_levels(pb), until=time.perf_counter() + 5.0)
    assert fixed is not None and check_plan(pb, fixed).ok
    where = {a.job_id: a.hardware for a in fixed.assignments}
    assert where == {"s0": "H100", "m0": "L40S"}


def test_repair_lets_a_short_tenants_small_job_give_way_to_its_big_one():
    """4 H100 for 8 hours: S's 1-GPU job and F's three run the whole horizon; S's 4-GPU job waits, S is 24 GPU-h
    below its share. S's small job finds no other place: it gives way (S gains 32 GPU-h for 8), F's jobs go, and
    the largest gap from a share falls from 24 to 8."""
    import time

    from optimizer.swap import repair

    n = 8
    f_jobs = [job(f"f{i}", gpus=1, dur=8, n_slots=n, tenant="F") for i in range(3)]
    s1 = job("s1", gpus=1, dur=8, n_slots=n, tenant="S")
    s0 = job("s0", gpus=4, dur=8, n_slots=n, tenant="S")
    pb = problem([region("X", [50.0] * n, gpus=4, budget_kw=1000.0)], [*f_jobs, s1, s0])
    blind = solve(dataclasses.replace(pb, jobs=(*f_jobs, s1), fairness=Fairness(enabled=False)), PARAMS)
    assert len(blind.assignments) == 4
    work = {j.job_id: j.gpus * 8.0 for j in pb.jobs}
    fixed = repair(pb, _left_out(pb, blind, ["s0"]), {"F": 8.0, "S": 32.0}, {"F": 24.0, "S": 8.0}, work,
                   tenant_levels(pb), until=time.perf_counter() + 5.0)
    assert fixed is not None and check_plan(pb, fixed).ok
    assert [a.job_id for a in fixed.assignments] == ["s0"]
    assert {u.job_id for u in fixed.unplanned} == {"f0", "f1", "f2", "s1"}


def test_repair_remembers_a_job_no_hole_fits_so_later_rounds_try_the_others_first():
    """M (at its share) fills the only pool for the whole horizon and can go nowhere else: S's job gets no hole.
    The repair says so in ``failed``, which the fair stage passes to its next round (that job is tried last)."""
    import time

    from optimizer.swap import repair

    n = 8
    m_jobs = [job(f"m{i}", gpus=2, dur=8, n_slots=n, tenant="M") for i in range(2)]
    s0 = job("s0", gpus=2, dur=8, n_slots=n, tenant="S")
    pb = problem([region("X", [50.0] * n, gpus=4, budget_kw=1000.0)], [*m_jobs, s0])
    blind = solve(dataclasses.replace(pb, jobs=tuple(m_jobs), fairness=Fairness(enabled=False)), PARAMS)
    failed: set[str] = set()
    fixed = repair(pb, _left_out(pb, blind, ["s0"]), {"M": 32.0, "S": 16.0}, {"M": 32.0, "S": 0.0},
                   {j.job_id: 16.0 for j in pb.jobs}, tenant_levels(pb), until=time.perf_counter() + 5.0,
                   failed=failed)
    assert fixed is None
    assert failed == {"s0"}
