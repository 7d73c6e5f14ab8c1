"""The stored history a replay reads: today's fleet, the period's jobs as stored, realised (published) values only."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from app.enums import JobState, SeriesKind, WorkloadClass
from app.models import Job, MarketSeries
from app.services import auth, fleet
from app.services.simulation.history import read_history

START = datetime(2026, 5, 4, tzinfo=UTC)


def test_history_holds_the_periods_jobs_and_published_values_only(session, settings):
    fleet.upsert_hardware(session, "h100", dict(vendor="nvidia", model="H100", memory_gb=80, tdp_w=700, idle_w=90))
    fleet.upsert_region(session, "de", dict(zone="DE", power_budget_kw=200, pue=1.3))
    fleet.set_inventory(session, "de", "h100", 8)
    fleet.add_override(session, "de", START + timedelta(hours=1), START + timedelta(hours=2), 50.0, "maintenance")
    fleet.add_override(session, "de", START - timedelta(days=9), START - timedelta(days=8), 10.0, "long gone")
    tenant = auth.create_tenant(session, "lab")
    session.flush()
    for name, release, state in [("in", START + timedelta(hours=3), JobState.SUCCEEDED),
                                 ("cancelled", START + timedelta(hours=4), JobState.CANCELLED),
                                 ("before", START - timedelta(hours=1), JobState.SUCCEEDED),
                                 ("after", START + timedelta(days=2), JobState.PENDING)]:
        session.add(Job(tenant_id=tenant.id, name=name, workload_class=WorkloadClass.TRAINING, gpu_count=1,
                        reference_gpu_hours=1.0, reference_hardware="h100", release_at=release,
                        deadline_at=release + timedelta(hours=10), state=state))
    for hour in range(3):  # hours 0 and 1 published, hour 2 only forecast
        ts = START + timedelta(hours=hour)
        issued = START - timedelta(days=1) if hour == 2 else None
        session.add(MarketSeries(zone="DE", kind=SeriesKind.PRICE, ts=ts, value=10.0 * (hour + 1), unit="EUR/MWh",
                                 issued_at=issued))
        session.add(MarketSeries(zone="DE", kind=SeriesKind.CARBON_INTENSITY, ts=ts, value=100.0 + hour,
                                 unit="gCO2eq/kWh", issued_at=issued))
    session.commit()
    h = read_history(session, replace(settings, slot_minutes=30, horizon_hours=24), START, START + timedelta(days=1))
    assert [v.name for _, v in h.jobs] == ["in"]
    assert h.fleet.regions["de"].inventory == {"h100": 8} and h.currencies == {"de": "EUR"}
    assert h.overrides == {"de": [(START + timedelta(hours=1), START + timedelta(hours=2), 50.0)]}
    assert h.start == START and h.slot_minutes == 30 and len(h.price["DE"]) == 2 * 48
    assert h.price["DE"][:4] == [10.0, 10.0, 20.0, 20.0]  # hourly values held over both half-hours
    assert all(math.isnan(x) for x in h.price["DE"][4:])  # hour 2 holds a forecast only: not realised
    assert h.carbon["DE"][:4] == [100.0, 100.0, 101.0, 101.0] and math.isnan(h.carbon["DE"][4])
