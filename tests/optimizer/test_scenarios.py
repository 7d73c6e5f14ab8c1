"""Planning under forecast uncertainty (optimizer.scenarios): the risk-adjusted curve and the choice between plans."""

from __future__ import annotations

import pytest

from optimizer import SOLVERS, Objective, ObjectiveKind, SolveParams
from optimizer.scenarios import (
    Quantiles,
    Uncertain,
    choose_plan,
    plan_value,
    risk_adjusted,
    scenario_problems,
)
from tests.optimizer.conftest import job, problem, region

PARAMS = SolveParams(time_limit_s=5, num_workers=1, random_seed=0)


def _case(q10_slot0: float, q90_slot0: float):
    """One 1-slot job, 4 slots: slot 0 has a median price of 10 but an uncertain one, slot 1 a sure 11."""
    q50 = (10.0, 11.0, 50.0, 50.0)
    q10 = (q10_slot0, 11.0, 50.0, 50.0)
    q90 = (q90_slot0, 11.0, 50.0, 50.0)
    flat = (300.0,) * 4
    pb = problem([region("A", q50)], [job("j", dur=1, n_slots=4)], objective=Objective(ObjectiveKind.COST))
    unc = Uncertain({"A": Quantiles(q10, q50, q90)}, {"A": Quantiles(flat, flat, flat)})
    return pb, unc


def _start(plan) -> int:
    return plan.assignments[0].start_slot


def test_the_risk_adjusted_plan_avoids_an_uncertain_hour_the_median_plan_takes():
    pb, unc = _case(0.0, 100.0)
    median = SOLVERS["gridshift"](pb, PARAMS)
    risky = SOLVERS["gridshift"](risk_adjusted(pb, unc, 0.5), PARAMS)
    assert _start(median) == 0  # 10 on the median
    assert _start(risky) == 1  # slot 0: 0.3*0 + 0.4*10 + 0.3*100 + 0.5*50 = 59 against a sure 11


def test_the_choice_weighs_expected_value_and_risk():
    pb, unc = _case(0.0, 20.0)  # slot 0: expected 10, 10 above it on q90; slot 1: 11 for sure
    scenarios = scenario_problems(pb, unc)
    plans = {"median": SOLVERS["gridshift"](pb, PARAMS),
             "sure": SOLVERS["gridshift"](risk_adjusted(pb, unc, 1.0), PARAMS)}
    assert _start(plans["median"]) == 0 and _start(plans["sure"]) == 1
    pick, scores = choose_plan(plans, scenarios, risk_weight=0.0)
    assert pick == "median"  # risk-neutral: expected 10 < 11
    pick, scores = choose_plan(plans, scenarios, risk_weight=0.5)
    assert pick == "sure"  # 10 + 0.5 x 10 = 15 > 11
    kwh = 0.7  # one H100 for an hour
    assert scores["sure"].total == pytest.approx(11.0 * kwh / 1000.0)
    assert scores["median"].expected == pytest.approx(10.0 * kwh / 1000.0)
    assert scores["median"].excess == pytest.approx(10.0 * kwh / 1000.0)


def test_a_plan_that_leaves_work_out_is_never_chosen_for_its_lower_value():
    pb, unc = _case(0.0, 20.0)
    full = SOLVERS["gridshift"](pb, PARAMS)
    empty = SOLVERS["run_now"](problem([region("A", (10.0,) * 4, gpus=0)], [job("j", dur=1, n_slots=4)]), PARAMS)
    assert empty.unplanned and not full.unplanned
    pick, _ = choose_plan({"empty": empty, "full": full}, scenario_problems(pb, unc), risk_weight=0.0)
    assert pick == "full"


def test_known_hours_do_not_move_and_the_value_follows_the_curves():
    q = Quantiles((5.0, 7.0), (5.0, 8.0), (5.0, 12.0))
    assert q.adjusted(0.5) == pytest.approx((5.0, 0.3 * 7 + 0.4 * 8 + 0.3 * 12 + 0.5 * 2.5))
    with pytest.raises(ValueError, match="one value per slot"):
        Quantiles((1.0,), (1.0, 2.0), (1.0, 2.0))
    pb, _ = _case(0.0, 20.0)
    plan = SOLVERS["gridshift"](pb, PARAMS)
    assert plan_value(pb, plan) == pytest.approx(10.0 * 0.7 / 1000.0)
