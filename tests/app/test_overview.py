"""The fleet overview's power budget per hour: demand-response windows that do not start on the hour."""

from __future__ import annotations

from datetime import timedelta

from app.services import fleet, overview


def _de_budget(session, now) -> dict:
    de = next(r for r in overview.regions_overview(session, now, hours_back=0, hours_ahead=8) if r.code == "de")
    return {(t - now) // timedelta(hours=1): kw for t, kw in zip(de.slots, de.budget_kw, strict=True)}


def test_a_curtailment_inside_an_hour_shows_in_that_hour(session, small_fleet, now):
    # the planner gives every slot such a window touches its budget; the chart showed 500 kW throughout
    fleet.add_override(session, "de", now + timedelta(hours=2, minutes=15), now + timedelta(hours=2, minutes=45), 50.0)
    fleet.add_override(session, "de", now + timedelta(hours=4, minutes=30), now + timedelta(hours=6), 100.0)
    session.commit()
    budget = _de_budget(session, now)
    assert budget[1] == 500.0 and budget[2] == 50.0 and budget[3] == 500.0
    assert budget[4] == 100.0 and budget[5] == 100.0 and budget[6] == 500.0  # the window ends at 06:00, half-open


def test_a_raised_budget_shows_only_in_hours_it_covers_whole(session, small_fleet, now):
    fleet.add_override(session, "de", now + timedelta(hours=2, minutes=30), now + timedelta(hours=4), 800.0)
    fleet.add_override(session, "de", now + timedelta(hours=4), now + timedelta(hours=5), 700.0)
    session.commit()
    budget = _de_budget(session, now)
    assert budget[2] == 500.0  # its first half keeps the region's budget
    assert budget[3] == 800.0 and budget[4] == 700.0 and budget[5] == 500.0


def test_on_the_quarter_hour_grid_a_quarter_hour_dip_shows_in_its_quarter_hour_only(session, small_fleet, now):
    fleet.add_override(session, "de", now + timedelta(hours=2, minutes=15), now + timedelta(hours=2, minutes=30), 50.0)
    session.commit()
    de = next(r for r in overview.regions_overview(session, now, hours_back=0, hours_ahead=3, slot_minutes=15)
              if r.code == "de")
    assert len(de.slots) == 12 and de.slots[1] - de.slots[0] == timedelta(minutes=15)
    assert de.budget_kw[8:11] == [500.0, 50.0, 500.0]  # 02:00, 02:15, 02:30
