"""The time grid: "now" in the current slot, real times onto slots, real-length figures, earliest among ties."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from optimizer import SOLVERS, SolveParams, check_plan
from optimizer.grid import TimeGrid, check_slot_minutes, interval_figures
from tests.optimizer.conftest import job, problem, region

NOW = datetime(2026, 12, 3, 16, 20, tzinfo=UTC)


def test_slot_zero_holds_now_and_a_release_now_starts_now():
    grid = TimeGrid.at(NOW, 15, 72 * 60)
    assert grid.start == datetime(2026, 12, 3, 16, 15, tzinfo=UTC)
    assert grid.n_slots == 288
    assert grid.release_slot(NOW) == 0
    assert grid.start_at(0, NOW) == NOW  # not 16:30, and not 16:15 (the past)
    assert grid.start_at(2, NOW) == datetime(2026, 12, 3, 16, 45, tzinfo=UTC)
    # released an hour ago: it can start now, not in the past
    assert grid.start_at(0, NOW - timedelta(hours=1)) == NOW


def test_a_run_counted_from_its_release_fits_its_slots_and_ends_by_the_deadline():
    grid = TimeGrid.at(NOW, 15, 600)
    # 5 minutes into the slot: 10 minutes fit slot 0, 11 do not
    assert grid.slots_needed(10, NOW) == 1
    assert grid.slots_needed(11, NOW) == 2
    assert grid.slots_needed(20 / 60, NOW) == 1  # a 20-second job
    deadline = NOW + timedelta(minutes=65)  # 17:25: the run must end by 17:15, the boundary before it
    assert grid.deadline_slot(deadline) == 4
    assert grid.earliest_deadline(60, NOW) == datetime(2026, 12, 3, 17, 30, tzinfo=UTC)
    hourly = TimeGrid.at(NOW, 60, 600)
    assert hourly.start == datetime(2026, 12, 3, 16, tzinfo=UTC)
    assert hourly.deadline_slot(deadline) == 1 and hourly.slots_needed(1, NOW) == 1


@pytest.mark.parametrize("bad", [0, 4, 7, 45, 90, 120])
def test_slot_minutes_must_divide_the_hour(bad):
    with pytest.raises(ValueError, match="slot_minutes"):
        check_slot_minutes(bad)
    assert check_slot_minutes(15) == 15


def test_figures_cover_the_real_interval_only():
    grid = TimeGrid.at(NOW, 15, 60)
    prices = [100.0, 200.0, 300.0, 400.0]
    carbon = [500.0, 500.0, 500.0, 500.0]
    twenty_s = interval_figures(grid, 3.6, [(NOW, NOW + timedelta(seconds=20))], prices, carbon)
    assert twenty_s.energy_kwh == pytest.approx(3.6 * 20 / 3600)  # 0.02 kWh, not 3.6 kWh for an hour
    assert twenty_s.cost == pytest.approx(0.02 * 100 / 1000)
    # 16:25-16:35 straddles two slots: 5 minutes at each price
    straddle = interval_figures(grid, 6.0, [(NOW + timedelta(minutes=5), NOW + timedelta(minutes=15))], prices, carbon)
    assert straddle.energy_kwh == pytest.approx(1.0)
    assert straddle.cost == pytest.approx(0.5 * 0.1 + 0.5 * 0.2)
    assert straddle.carbon_kg == pytest.approx(0.5)
    missing = interval_figures(grid, 6.0, [(NOW, NOW + timedelta(minutes=5))], [math.nan] * 4, carbon)
    assert missing.cost == 0.0 and missing.energy_kwh == pytest.approx(0.5)


def test_equal_cost_slots_resolve_to_the_earliest():
    # an hourly price held over four quarter-hours: slots 0-3 cost the same, 4-7 more
    prices = [50.0] * 4 + [80.0] * 4
    pb = problem([region("DE", prices, gpus=2)], [job(f"j{k}", dur=1, n_slots=8) for k in range(3)])
    plan = SOLVERS["gridshift"](pb, SolveParams(time_limit_s=2.0))
    assert check_plan(pb, plan).ok
    assert sorted(a.start_slot for a in plan.assignments) == [0, 0, 1]  # two GPUs: two now, one next


def test_range_minimum_over_any_window_matches_the_slice():
    import numpy as np

    from optimizer.windows import _min_levels, _range_min

    rng = np.random.default_rng(1)
    for n in (1, 2, 3, 7, 96, 97):
        x = rng.integers(0, 50, n)
        starts, lengths = zip(*[(a, b - a) for a in range(n) for b in range(a + 1, n + 1)], strict=True)
        got = _range_min(_min_levels(x), np.array(starts), np.array(lengths))
        assert got.tolist() == [int(x[a : a + k].min()) for a, k in zip(starts, lengths, strict=True)]
