"""The closed-loop replay's pure pieces: forecast cache key, what a forecast may see, the service's slot rule,
jobs through the service's to_opt_job, and the saving-captured arithmetic."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import numpy as np
import pandas as pd
import pytest

from app.enums import SeriesKind
from bench import closed_loop
from bench.closed_loop import cache_key, published_by, saving_captured, slot_curve
from tests.optimizer.conftest import START

DAY = datetime(2022, 3, 10, tzinfo=UTC)


def test_cache_key_names_every_input_and_only_those():
    at = DAY - timedelta(hours=11)
    key = cache_key("DE", SeriesKind.PRICE, "lear", at, 107)
    assert key == "DE-price-lear-20220309T13Z-107h.csv"
    others = {cache_key("FR", SeriesKind.PRICE, "lear", at, 107),
              cache_key("DE", SeriesKind.CARBON_INTENSITY, "lear", at, 107),
              cache_key("DE", SeriesKind.PRICE, "lear_nn", at, 107),
              cache_key("DE", SeriesKind.PRICE, "lear", at + timedelta(hours=1), 107),
              cache_key("DE", SeriesKind.PRICE, "lear", at, 108)}
    assert key not in others and len(others) == 5
    # the same instant written in another zone is the same entry
    assert cache_key("DE", SeriesKind.PRICE, "lear", at.astimezone(timezone(timedelta(hours=1))), 107) == key
    with pytest.raises(ValueError, match="timezone-aware"):
        cache_key("DE", SeriesKind.PRICE, "lear", at.replace(tzinfo=None), 107)
    with pytest.raises(ValueError, match="on the hour"):
        cache_key("DE", SeriesKind.PRICE, "lear", at + timedelta(minutes=30), 107)
    with pytest.raises(ValueError, match="horizon_hours"):
        cache_key("DE", SeriesKind.PRICE, "lear", at, 0)


def test_saving_captured_is_the_share_of_the_possible_saving():
    assert saving_captured(100.0, 70.0, 40.0) == pytest.approx(0.5)
    assert saving_captured(100.0, 40.0, 40.0) == pytest.approx(1.0)
    assert saving_captured(100.0, 110.0, 40.0) == pytest.approx(-1 / 6)  # worse than running now
    assert saving_captured(100.0, 90.0, 100.0) is None  # nothing to capture


def test_the_nightly_plan_sees_the_day_ahead_prices_but_not_the_days_carbon():
    issued = closed_loop.issue_of(DAY)
    assert issued == DAY - timedelta(hours=11)
    assert published_by(SeriesKind.PRICE, issued) == DAY + timedelta(days=1)  # auction for DAY closed
    assert published_by(SeriesKind.PRICE, issued - timedelta(hours=2)) == DAY  # not yet
    assert published_by(SeriesKind.CARBON_INTENSITY, issued) == issued  # measured up to the hour
    assert closed_loop.horizon_of(DAY, 4) == 4 * 24 + 11


def test_a_published_value_beats_the_forecast_of_its_hour():
    idx = pd.date_range(DAY, periods=4, freq="h")
    published = pd.Series([1.0, 2.0], index=idx[:2])
    forecast = pd.Series([10.0, 20.0, 30.0, np.nan], index=idx)
    slots = list(idx.to_pydatetime())
    out = slot_curve(published, forecast, slots, SeriesKind.PRICE)
    assert out[:3] == [1.0, 2.0, 30.0] and np.isnan(out[3])


def test_forecasts_never_see_the_day_they_plan(monkeypatch):
    """Carbon of the plan's day and later prices changed: the forecast the nightly plan uses is the same."""
    monkeypatch.setattr(closed_loop, "DEFAULT_MODELS", {SeriesKind.PRICE: "naive_daily",
                                                        SeriesKind.CARBON_INTENSITY: "naive_daily"})
    idx = pd.date_range(DAY - timedelta(days=60), DAY + timedelta(days=6), freq="h", inclusive="left")
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({c: rng.uniform(50, 150, len(idx)) for c in
                          ("price_eur_mwh", "carbon_intensity_g_per_kwh", "load_forecast_mw",
                           "wind_solar_forecast_mw")}, index=idx)
    issued, horizon = closed_loop.issue_of(DAY), closed_loop.horizon_of(DAY, 4)
    runs = {k: closed_loop.forecast_run({"FI": frame}, "FI", k, issued, horizon) for k in closed_loop.KINDS}
    later = frame.copy()
    later.loc[DAY - timedelta(hours=11):, "carbon_intensity_g_per_kwh"] += 1000.0
    later.loc[DAY + timedelta(days=1):, ["price_eur_mwh", "load_forecast_mw"]] += 1000.0
    for k in closed_loop.KINDS:
        again = closed_loop.forecast_run({"FI": later}, "FI", k, issued, horizon)
        pd.testing.assert_frame_equal(again, runs[k])
    assert runs[SeriesKind.PRICE].index[0] == DAY + timedelta(days=1)  # day 1 is published: forecast from day 2
    assert runs[SeriesKind.CARBON_INTENSITY].index[-1] >= DAY + timedelta(days=4) - timedelta(hours=1)


def test_jobs_go_through_the_services_to_opt_job():
    from bench.plan_workload import CATALOG, Spec, build_problem, hardware_from_dicts
    from optimizer import Objective, ObjectiveKind

    hardware = hardware_from_dicts(CATALOG)
    spec = Spec("s0-0", "training", 2, 3.5, release=5, slack_h=10, memory_gb=100.0, interruptible=True,
                home="FR", resident=True)
    flat = pd.DataFrame({"FR": [50.0] * 48, "DE": [60.0] * 48}, index=pd.date_range(DAY, periods=48, freq="h"))
    base = build_problem([spec], hardware, flat, flat, DAY, Objective(ObjectiveKind.COST))
    fleet = closed_loop.fleet_of(hardware, base)
    from app.config import Settings

    pb = closed_loop.service_problem(base, [spec], fleet, Settings(slot_minutes=60), "carbon",
                                     {z: [1.0] * 48 for z in ("FR", "DE")}, {z: [2.0] * 48 for z in ("FR", "DE")})
    (j,) = pb.jobs
    assert (j.release_slot, j.deadline_slot) == (5, 5 + 4 + 10)
    assert j.allowed_regions == ("FR",)
    assert set(j.duration_slots) >= {"H200", "MI300X"} and j.duration_slots["H100"] == 4  # 3.5 h on the reference
    assert j.interruptible and j.min_chunk_slots == 2 and j.checkpoint_overhead_slots == 1
    assert pb.objective.kind is ObjectiveKind.CARBON and pb.region("FR").carbon_g_per_kwh[0] == 2.0


def test_a_replan_keeps_started_work_and_places_the_rest_from_its_hour():
    from optimizer import SOLVERS, SolveParams
    from tests.optimizer.conftest import job, problem, region

    pb = problem([region("A", [10, 20, 30, 40, 50, 60], gpus=1, budget_kw=100.0)],
                 [job("a", dur=2, n_slots=6), job("b", dur=2, n_slots=6)])
    plan = SOLVERS["gridshift"](pb, SolveParams(time_limit_s=5, num_workers=1, random_seed=0))
    starts = {a.job_id: a.start_slot for a in plan.assignments}
    first = min(starts, key=lambda job_id: starts[job_id])
    rest, kept = closed_loop.replan_problem(pb, plan, 1)
    assert [a.job_id for a in kept] == [first] and [j.job_id for j in rest.jobs] == [next(iter(set(starts) - {first}))]
    (left,) = rest.jobs
    assert left.release_slot == 1
    reg = rest.region("A")
    assert [reg.gpus_at("H100", t) for t in range(6)] == [0, 0, 1, 1, 1, 1]  # the kept job holds its GPU
    assert reg.base_kw_at(0) == pytest.approx(0.7) and reg.base_kw_at(2) == 0.0
    again = SOLVERS["gridshift"](rest, SolveParams(time_limit_s=5, num_workers=1, random_seed=0))
    assert again.assignments[0].start_slot == 2  # the earliest the GPU is free again


def test_the_replay_replans_at_the_services_interval_and_takes_the_runs_in_force():
    from app.config import Settings

    assert closed_loop.replan_times(Settings(), DAY) == [DAY + timedelta(hours=h) for h in range(1, 24)]
    assert closed_loop.replan_times(Settings(replan_interval_s=7200.0), DAY)[:2] == [DAY + timedelta(hours=2),
                                                                                   DAY + timedelta(hours=4)]
    hourly = closed_loop.carbon_refreshes(Settings())
    assert hourly == tuple(range(24))  # app.schedule: carbon forecasts at :05 of every hour
    # prices: the run of 13:00 the day before until today's auction, then today's (the next nightly plan's run)
    at_noon, at_one = DAY + timedelta(hours=12), DAY + timedelta(hours=13)
    assert closed_loop.run_issued(SeriesKind.PRICE, at_noon, hourly) == closed_loop.issue_of(DAY)
    assert closed_loop.run_issued(SeriesKind.PRICE, at_one, hourly) == closed_loop.issue_of(DAY + timedelta(days=1))
    assert closed_loop.run_horizon(at_one, 4) == closed_loop.horizon_of(DAY + timedelta(days=1), 4)
    # carbon: the refresh at 12:05 is in force at 13:00, the one at 13:05 only after it
    assert closed_loop.run_issued(SeriesKind.CARBON_INTENSITY, at_one, hourly) == at_noon
    assert closed_loop.run_issued(SeriesKind.CARBON_INTENSITY, at_one + timedelta(minutes=10), hourly) == at_one
    assert closed_loop.run_issued(SeriesKind.CARBON_INTENSITY, at_one, (0, 6, 12, 18)) == at_noon
    # what changes by 13:00: the next day's prices are published; a run re-issued with the same values is no change
    idx = pd.date_range(DAY, periods=48, freq="h")
    run = pd.DataFrame({"forecast": np.arange(48.0)}, index=idx)
    runs = {("DE", SeriesKind.PRICE): run, ("DE", SeriesKind.CARBON_INTENSITY): run}
    same = {("DE", SeriesKind.PRICE): run.copy(), ("DE", SeriesKind.CARBON_INTENSITY): run.copy()}
    before, after = closed_loop.seen_state(at_noon, runs), closed_loop.seen_state(at_one, same)
    assert before[SeriesKind.PRICE][0] == DAY + timedelta(days=1) and after[SeriesKind.PRICE][0] == DAY + timedelta(days=2)
    assert before[SeriesKind.CARBON_INTENSITY][0] is None  # measured carbon: only past hours are published
    assert closed_loop.changed_since(before, after, at_one) == [SeriesKind.PRICE]
    other = run.copy()
    other.iloc[:12] += 5.0  # differs only before 13:00: nothing ahead of the re-plan changed
    assert closed_loop.changed_since(before, closed_loop.seen_state(at_noon, {**same, ("DE", SeriesKind.PRICE): other}),
                                     at_one) == []
    other.iloc[20] += 5.0
    assert closed_loop.changed_since(before, closed_loop.seen_state(at_noon, {**same, ("DE", SeriesKind.PRICE): other}),
                                     at_one) == [SeriesKind.PRICE]


def _chain(objective: str):
    """A 6-slot day: carbon forecasts re-issued every slot, prices published at slot 2; job "b" becomes cheaper to run
    from slot 2 on once the prices are seen."""
    from optimizer import SOLVERS, SolveParams
    from optimizer.scenarios import plan_value
    from tests.optimizer.conftest import job, problem, region

    def pb(prices):
        return problem([region("A", prices, gpus=1, budget_kw=100.0)],
                       [job("a", dur=2, n_slots=6), job("b", dur=2, n_slots=6)])

    seen_prices = {0: [10, 20, 30, 40, 50, 60], 2: [10, 20, 90, 5, 5, 90]}
    built: list[datetime] = []

    def problem_at(t):
        built.append(t)
        return pb(seen_prices[0 if t < START + timedelta(hours=2) else 2])

    def state_at(t):  # prices published at slot 2; a carbon run with other values every hour
        carbon = pd.Series([float(t.hour)] * 6, index=pd.date_range(START, periods=6, freq="h"))
        return {SeriesKind.PRICE: (t >= START + timedelta(hours=2), {}), SeriesKind.CARBON_INTENSITY: (None, {"A": carbon})}

    def solve(p):
        return SOLVERS["gridshift"](p, SolveParams(time_limit_s=5, num_workers=1, random_seed=0))

    nightly = solve(pb(seen_prices[0]))
    times = [START + timedelta(hours=h) for h in (1, 2, 3)]
    out = closed_loop.replan_chain(objective, nightly, START, state_at(START), times, state_at, problem_at, solve,
                                   plan_value)
    return nightly, out, built


def test_the_replay_skips_a_replan_where_nothing_the_objective_weighs_changed():
    nightly, out, built = _chain("cost")
    # carbon forecasts re-issued every hour do not move a cost plan: one re-plan, when the prices are published
    assert out.replans == (("02:00", "new-data:price"),) and out.skipped == 2
    assert [t.hour for t in built] == [2]  # no problem was built (no forecast computed) for the skipped hours
    starts = {a.job_id: a.start_slot for a in out.plan.assignments}
    assert starts == {"a": 0, "b": 3}  # "a" started at slot 0 and stays; "b" moves to the newly cheap slots
    assert {a.job_id: a.start_slot for a in nightly.assignments} == {"a": 0, "b": 2}
    _, every_hour, _ = _chain("carbon")
    assert [t for t, _ in every_hour.replans] == ["01:00", "02:00", "03:00"] and every_hour.skipped == 0


def test_an_hourly_refresh_on_the_same_inputs_is_the_same_run_without_a_second_fit(monkeypatch, tmp_path):
    from forecasting.models import get_model

    monkeypatch.setattr(closed_loop, "DEFAULT_MODELS", {SeriesKind.PRICE: "naive_daily",
                                                        SeriesKind.CARBON_INTENSITY: "naive_daily"})
    fits: list[datetime] = []

    class Counting:
        def predict(self, hist, future, task):
            fits.append(future.index[0])
            return get_model("naive_daily").predict(hist, future, task)

    monkeypatch.setattr(closed_loop, "get_model", lambda _name: Counting())
    idx = pd.date_range(DAY - timedelta(days=60), DAY + timedelta(days=6), freq="h", inclusive="left")
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({c: rng.uniform(50, 150, len(idx)) for c in
                          ("price_eur_mwh", "carbon_intensity_g_per_kwh", "load_forecast_mw",
                           "wind_solar_forecast_mw")}, index=idx)
    kind = SeriesKind.CARBON_INTENSITY
    runs = [closed_loop.cached_run({"FI": frame}, "FI", kind, DAY + timedelta(hours=h),
                                   closed_loop.run_horizon(DAY + timedelta(hours=h), 4), tmp_path) for h in (1, 5, 14)]
    # 01:00 and 05:00 see the same complete days and regressors: one fit; 14:00 sees the next day-ahead ones
    assert len(fits) == 2 and len(list(tmp_path.glob("*.csv"))) == 3
    epochs = [closed_loop.input_epoch(DAY + timedelta(hours=h)) for h in (1, 5, 14)]
    assert epochs[0] == epochs[1] != epochs[2]  # the replay's shortcut for what the hash finds
    pd.testing.assert_frame_equal(runs[0], runs[1])
    direct = closed_loop.forecast_run({"FI": frame}, "FI", kind, DAY + timedelta(hours=5),
                                      closed_loop.run_horizon(DAY + timedelta(hours=5), 4))
    pd.testing.assert_frame_equal(direct, runs[1])
