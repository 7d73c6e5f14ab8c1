"""The replay engine on plain data: it plans each day as the service does and settles the runs on realised series."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from app.config import Settings
from app.enums import WorkloadClass
from app.errors import ValidationFailed
from app.services.fleet import FleetSnapshot, HardwareInfo, RegionInfo
from app.services.job_values import JobValues
from app.services.simulation import History, Scenario, compare, replay
from app.services.simulation.scenario import from_pairs, parse
from optimizer import SolveParams

START = datetime(2026, 3, 2, tzinfo=UTC)
DAYS = 3
SETTINGS = Settings(slot_minutes=60, horizon_hours=24, plan_time_limit_s=2.0)
PARAMS = SolveParams(time_limit_s=2.0, num_workers=1, random_seed=0)


def fleet(gpus: int = 4, budget_kw: float = 100.0) -> FleetSnapshot:
    hw = {"h100": HardwareInfo("h100", "nvidia", 80, 700, 90, {"default": 1.0})}
    regions = {"de": RegionInfo("de", "DE", 1.2, budget_kw, frozenset(), {"h100": gpus}),
               "fi": RegionInfo("fi", "FI", 1.1, budget_kw, frozenset(), {"h100": gpus})}
    return FleetSnapshot(regions, hw)


def job(release: datetime, hours: float, deadline_h: float, gpus: int = 4, **over) -> JobValues:  # type: ignore[no-untyped-def]
    fields = dict(name="j", workload_class=WorkloadClass.TRAINING, gpu_count=gpus, reference_gpu_hours=hours * gpus,
                  reference_hardware="h100", durations_minutes=None, memory_gb_per_gpu=0.0, allowed_regions=None,
                  residency_tag=None, allowed_hardware=None, home_region="de", release_at=release,
                  deadline_at=release + timedelta(hours=deadline_h), priority=0, interruptible=False,
                  checkpoint_overhead_minutes=0, min_chunk_minutes=60, command="x", image=None, env={})
    fields.update(over)
    return JobValues(**fields)  # type: ignore[arg-type]


def history(jobs: list[JobValues], snapshot: FleetSnapshot | None = None) -> History:
    """Hourly series over the period and a horizon: DE cheap at night but dirty, FI dear but clean at night."""
    n = (DAYS + 2) * 24
    de_price = [40.0 + 60.0 * (8 <= h % 24 < 20) + (h % 7) for h in range(n)]
    fi_price = [70.0 + 10.0 * (h % 5) for h in range(n)]
    de_carbon = [500.0 - 200.0 * (8 <= h % 24 < 20) for h in range(n)]
    fi_carbon = [80.0 + 150.0 * (8 <= h % 24 < 20) for h in range(n)]
    return History(start=START, slot_minutes=60, fleet=snapshot or fleet(), currencies={"de": "EUR", "fi": "EUR"},
                   price={"DE": de_price, "FI": fi_price}, carbon={"DE": de_carbon, "FI": fi_carbon},
                   jobs=[(str(i + 1), v) for i, v in enumerate(jobs)])


def busy_jobs() -> list[JobValues]:
    """More work than 4 GPUs per region can finish by the deadlines: each day six 4-GPU jobs of 6 h, 12 h to go."""
    return [job(START + timedelta(days=d, hours=2), 6.0, 12.0) for d in range(DAYS) for _ in range(6)]


def test_settled_cost_is_energy_times_realised_price_hour_by_hour():
    h = history([job(START + timedelta(hours=1, minutes=30), 3.0, 40.0),
                 job(START + timedelta(days=1, hours=5), 2.0, 30.0, gpus=2)])
    out = replay(h, SETTINGS, START, DAYS, params=PARAMS)
    assert out.jobs_run == 2 and out.deadline_misses == 0
    total_cost = total_carbon = 0.0
    for run in out.runs:
        zone = "DE" if run.region == "de" else "FI"
        cost = carbon = energy = 0.0
        for first, last in run.intervals:
            t = first
            while t < last:  # hour by hour, by hand
                hour_end = t.replace(minute=0, second=0) + timedelta(hours=1)
                upto = min(hour_end, last)
                k = int((t - START).total_seconds() // 3600)
                kwh = run.power_kw * (upto - t).total_seconds() / 3600.0
                energy += kwh
                cost += kwh * h.price[zone][k] / 1000.0
                carbon += kwh * h.carbon[zone][k] / 1000.0
                t = upto
        assert run.energy_kwh == pytest.approx(energy) and run.cost == pytest.approx(cost)
        assert run.carbon_kg == pytest.approx(carbon)
        total_cost += cost
        total_carbon += carbon
    assert out.cost == pytest.approx(total_cost) and out.carbon_kg == pytest.approx(total_carbon)
    assert sum(d["cost"] for d in out.days) == pytest.approx(out.cost)


def test_more_gpus_or_a_bigger_budget_never_misses_more_deadlines():
    jobs = busy_jobs()
    base = replay(history(jobs), SETTINGS, START, DAYS, params=PARAMS)
    assert base.deadline_misses > 0  # the test needs a fleet short of GPUs
    more = replay(history(jobs), SETTINGS, START, DAYS, params=PARAMS,
                  scenario=parse({"regions": {"de": {"gpus": {"h100": 16}}, "fi": {"gpus": {"h100": 16}}}}))
    assert more.deadline_misses < base.deadline_misses and more.jobs_run > base.jobs_run
    # a budget that fits one 4-GPU job per region, then a generous one
    tight = history(jobs, fleet(gpus=16, budget_kw=3.5))
    low = replay(tight, SETTINGS, START, DAYS, params=PARAMS)
    high = replay(tight, SETTINGS, START, DAYS, params=PARAMS,
                  scenario=parse({"regions": {"de": {"power_budget_kw": 50}, "fi": {"power_budget_kw": 50}}}))
    assert low.deadline_misses > 0 and high.deadline_misses <= low.deadline_misses
    assert high.deadline_misses < low.deadline_misses


def test_the_carbon_objective_emits_no_more_than_the_cost_objective_on_the_same_data():
    h = history([job(START + timedelta(days=d, hours=1), 4.0, 30.0, gpus=2) for d in range(DAYS) for _ in range(2)])
    cost = replay(h, SETTINGS, START, DAYS, params=PARAMS, scenario=Scenario(objective="cost"))
    carbon = replay(h, SETTINGS, START, DAYS, params=PARAMS, scenario=Scenario(objective="carbon"))
    assert cost.jobs_run == carbon.jobs_run == 6
    assert carbon.carbon_kg <= cost.carbon_kg + 1e-9 and cost.cost <= carbon.cost + 1e-9
    assert carbon.carbon_kg < cost.carbon_kg  # the data make the two objectives disagree


def test_compare_reports_both_and_the_difference_and_a_removed_region_takes_its_work_elsewhere():
    h = history([job(START + timedelta(days=d, hours=1), 3.0, 30.0, gpus=2) for d in range(DAYS)])
    seen: list[int] = []
    result = compare(h, SETTINGS, START, DAYS, parse({"regions": {"fi": {"removed": True}}}), params=PARAMS,
                     on_day=seen.append)
    assert seen == list(range(1, 2 * DAYS + 1))
    for key in ("cost", "carbon_kg", "energy_kwh", "deadline_misses"):
        assert result["difference"][key] == pytest.approx(result["changed"][key] - result["current"][key])
    assert result["changed"]["jobs_run"] == 3 and len(result["per_day"]["changed"]) == DAYS
    only_de = replay(h, SETTINGS, START, DAYS, params=PARAMS, scenario=parse({"regions": {"fi": {"removed": True}}}))
    assert {r.region for r in only_de.runs} == {"de"}
    moved = replay(h, SETTINGS, START, DAYS, params=PARAMS,
                   scenario=parse({"regions": {"de": {"removed": True}, "se": {"like": "fi", "pue": 1.05}}}))
    assert {r.region for r in moved.runs} <= {"fi", "se"} and moved.jobs_run == 3


def test_a_missing_realised_value_is_reported_and_never_priced():
    h = history([job(START + timedelta(hours=1), 2.0, 40.0, gpus=2)])
    gap = replace(h, price={**h.price, "FI": [math.nan] * len(h.price["FI"])})
    result = compare(gap, SETTINGS, START, 1, Scenario(), params=PARAMS)
    assert any(n.startswith("FI price") for n in result["notes"])
    assert result["current"]["jobs_run"] == 1


@pytest.mark.parametrize(("body", "field"), [
    ({"regions": {"de": {"gpus": {"h100": -1}}}}, "regions.de.gpus.h100"),
    ({"regions": {"de": {"pue": 0.5}}}, "regions.de.pue"),
    ({"regions": {"de": {"power_budget_kw": "lots"}}}, "regions.de.power_budget_kw"),
    ({"regions": {"de": {"colour": "red"}}}, "regions.de.colour"),
    ({"objective": "cheapest"}, "objective"),
    ({"carbon_price_per_tonne": -5}, "carbon_price_per_tonne"),
])
def test_a_bad_field_is_named(body, field):  # type: ignore[no-untyped-def]
    with pytest.raises(ValidationFailed) as err:
        parse(body)
    assert field in [e.field for e in err.value.errors]


@pytest.mark.parametrize(("body", "field"), [
    ({"regions": {"xx": {"pue": 1.3}}}, "regions.xx"),
    ({"regions": {"de": {"gpus": {"b200": 8}}}}, "regions.de.gpus.b200"),
    ({"regions": {"se": {"like": "nowhere"}}}, "regions.se.like"),
    ({"regions": {"se": {"like": "fi", "zone": "SE3"}}}, "regions.se.zone"),
    ({"regions": {"de": {"removed": True}, "fi": {"removed": True}}}, "regions"),
])
def test_a_scenario_that_does_not_fit_the_fleet_names_the_field(body, field):  # type: ignore[no-untyped-def]
    with pytest.raises(ValidationFailed) as err:
        replay(history([]), SETTINGS, START, 1, scenario=parse(body), params=PARAMS)
    assert field in [e.field for e in err.value.errors]


def test_set_pairs_read_as_the_json_scenario():
    pairs = ["region.de.gpus.h100=8", "regions.fi.budget_kw=250.5", "region.se.like=fi", "objective=carbon",
             "carbon_price=120", "region.fi.removed=true"]
    assert from_pairs(pairs) == {"regions": {"de": {"gpus": {"h100": 8}}, "fi": {"power_budget_kw": 250.5,
                                                                                  "removed": True},
                                             "se": {"like": "fi"}},
                                 "objective": "carbon", "carbon_price_per_tonne": 120}
    with pytest.raises(ValidationFailed) as err:
        from_pairs(["gpus=8", "region.de"])
    assert [e.field for e in err.value.errors] == ["gpus", "region.de"]


def test_a_region_whose_zone_has_no_stored_series_is_named():
    h = history([job(START + timedelta(hours=1), 2.0, 20.0)])
    bare = replace(h, price={"DE": h.price["DE"]}, carbon={"DE": h.carbon["DE"]})
    with pytest.raises(ValidationFailed) as err:
        replay(bare, SETTINGS, START, 1, params=PARAMS)
    assert [e.field for e in err.value.errors] == ["regions.fi.zone"]
    out = replay(bare, SETTINGS, START, 1, params=PARAMS, scenario=parse({"regions": {"fi": {"removed": True}}}))
    assert out.jobs_run == 1 and {r.region for r in out.runs} == {"de"}
