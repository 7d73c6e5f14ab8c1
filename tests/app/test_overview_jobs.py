"""The overview's planned power and GPUs in use count only work that is still to run or running."""

from __future__ import annotations

from datetime import timedelta

from app.enums import JobState
from app.models import Job
from app.services import overview
from tests.app.test_reports_support import Planned, make_plan, submit
from tests.conftest import make_token


def test_a_job_cancelled_after_the_plan_neither_draws_power_nor_holds_gpus(session, small_fleet, now):
    make_token(session, "team-a")
    make_token(session, "team-b")
    a = submit(session, "team-a", now, 1)
    b = submit(session, "team-b", now, 1)
    make_plan(session, now, [
        Planned(a[0], "de", "h100", now + timedelta(hours=2), 2, 100.0, 10.0, 40.0, 15.0, 50.0),
        Planned(b[0], "de", "a100", now + timedelta(hours=1), 3, 60.0, 5.0, 20.0, 6.0, 25.0),
    ])
    session.get(Job, a[0]).state = JobState.CANCELLED
    session.commit()
    at = now + timedelta(hours=2, minutes=30)
    de = next(r for r in overview.regions_overview(session, at, hours_back=3, hours_ahead=5) if r.code == "de")
    gpus = {g["hardware"]: g for g in de.gpus}
    assert gpus["h100"]["in_use_now"] == 0 and gpus["h100"]["peak_planned"] == 0
    assert gpus["a100"]["in_use_now"] == 4
    hour = {t: i for i, t in enumerate(de.slots)}
    assert de.planned_kw[hour[now + timedelta(hours=2)]] == 20.0  # team-b's 60 kWh over 3 h only
