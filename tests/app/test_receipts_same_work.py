"""Receipts compare a job with the same work run now, and reports claim savings on settled work only."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update

from app.enums import Role, SeriesKind
from app.models import MarketSeries, Run
from tests.app.test_reports_support import Planned, finish_run, make_plan, submit
from tests.conftest import make_token

SHORT_S = 20  # the job ran 20 s of the 60-minute slot its plan held for it
IT_KWH = 0.0027  # metered GPU energy of those 20 s
PUE_DE = 1.2


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def short_job(session, small_fleet, now):
    """A 0.1 GPU-h job planned for a full hour on an H100 five hours after release, which ran 20 s."""
    token = make_token(session, "team-a")
    job, later = submit(session, "team-a", now, 2, reference_gpu_hours=0.1, gpu_count=1)
    for h in range(24):  # Frankfurt: 200 EUR/MWh and 400 g/kWh at release, 50 and 100 five hours later
        cheap = h >= 5
        session.add(MarketSeries(zone="DE", kind=SeriesKind.PRICE, ts=now + timedelta(hours=h),
                                 value=50.0 if cheap else 200.0, unit="EUR/MWh", source="test"))
        session.add(MarketSeries(zone="DE", kind=SeriesKind.CARBON_INTENSITY, ts=now + timedelta(hours=h),
                                 value=100.0 if cheap else 400.0, unit="gCO2eq/kWh", source="test"))
    # The plan's figures are a full hour at 0.63 kW IT (0.76 kWh at the facility), run now likewise.
    make_plan(session, now, [
        Planned(job, "de", "h100", now + timedelta(hours=5), 1, 0.76, 0.038, 0.076, 0.152, 0.304),
        Planned(later, "de", "h100", now + timedelta(hours=6), 1, 0.76, 0.038, 0.076, 0.152, 0.304),
    ])
    facility = IT_KWH * PUE_DE
    finish_run(session, job, now + timedelta(hours=5), SHORT_S / 3600, IT_KWH, cost=facility * 50.0 / 1000,
               carbon_kg=facility * 100.0 / 1000)
    return token, job, later


def test_short_job_is_compared_with_the_same_20_seconds_run_at_release(client, short_job, now):
    token, job, _later = short_job
    r = client.get(f"/api/v1/jobs/{job}/receipt", headers=auth(token)).json
    facility = IT_KWH * PUE_DE
    assert r["basis"] == "metered" and r["label"] == "metered" and r["settled"] is True
    assert r["actual"]["energy_kwh"] == pytest.approx(facility)
    # Run now is the same metered work, not the hour the plan held: 0.00324 kWh at release, at 200 EUR/MWh.
    assert r["run_now_basis"] == "metered" and r["run_now_region"] == "de"
    assert r["run_now"]["energy_kwh"] == pytest.approx(facility)
    assert r["run_now"]["cost"] == pytest.approx(facility * 200.0 / 1000)
    assert r["run_now"]["carbon_kg"] == pytest.approx(facility * 400.0 / 1000)
    assert r["run_now_start_at"].startswith("2030-01-01T00:00:00")
    assert r["run_now_end_at"].startswith("2030-01-01T00:00:20")
    # The saving is the price difference on the work done (75 %), not the old "about 100 %" against a full slot.
    assert r["saving_cost"] == pytest.approx(facility * 150.0 / 1000)
    assert r["saving_cost"] / r["run_now"]["cost"] == pytest.approx(0.75)
    assert r["saving_carbon_kg"] == pytest.approx(facility * 300.0 / 1000)
    assert r["planned_energy_kwh"] == pytest.approx(0.76)  # the plan is still shown, as the plan


def test_report_claims_savings_on_settled_work_and_shows_planned_work_as_expected(client, short_job, now):
    token, _job, _later = short_job
    facility = IT_KWH * PUE_DE
    total = client.get("/api/v1/reports/monthly?month=2030-01", headers=auth(token)).json["total"]
    assert total["jobs"] == 2 and total["settled_jobs"] == 1 and total["planned_jobs"] == 1
    assert total["energy_kwh"] == pytest.approx(facility)  # settled only: no planned hour mixed in
    assert total["saving_cost"] == pytest.approx(facility * 150.0 / 1000)
    assert total["saving_pct"] == pytest.approx(75.0)
    assert total["planned_energy_kwh"] == pytest.approx(0.76)
    assert total["expected_saving_cost"] == pytest.approx(0.152 - 0.038)
    csv_rows = client.get("/api/v1/reports/monthly.csv?month=2030-01", headers=auth(token)).get_data(
        as_text=True).splitlines()
    header, last = csv_rows[0].split(","), csv_rows[-1].split(",")
    row = dict(zip(header, last, strict=True))
    assert row["settled_jobs"] == "1" and row["planned_jobs"] == "1"
    assert float(row["saving_cost"]) == pytest.approx(facility * 150.0 / 1000, abs=1e-3)
    assert float(row["expected_saving_cost"]) == pytest.approx(0.114, abs=1e-3)


def test_energy_estimated_from_a_profile_is_labelled_so(client, session, short_job):
    token, job, _later = short_job
    session.execute(update(Run).where(Run.job_id == job).values(energy_source="estimate"))
    session.commit()
    r = client.get(f"/api/v1/jobs/{job}/receipt", headers=auth(token)).json
    assert r["basis"] == "estimated" and r["label"] == "estimated from profile" and r["settled"] is True
    total = client.get("/api/v1/reports/monthly?month=2030-01", headers=auth(token)).json["total"]
    assert total["settled_jobs"] == 1 and total["estimated_jobs"] == 1


def test_planned_receipt_compares_the_planned_duration(client, session, short_job):
    token, _job, later = short_job
    r = client.get(f"/api/v1/jobs/{later}/receipt", headers=auth(token)).json
    assert r["basis"] == "planned" and r["label"] == "planned" and r["settled"] is False
    assert r["run_now_basis"] == "planned" and r["run_now"]["cost"] == pytest.approx(0.152)


def test_operator_readonly_sees_the_fleet_report(client, session, short_job):
    ops = make_token(session, "ops", Role.READONLY, operator=True)
    rep = client.get("/api/v1/reports/monthly?month=2030-01", headers=auth(ops)).json
    assert rep["tenant"] == "all" and rep["total"]["jobs"] == 2
