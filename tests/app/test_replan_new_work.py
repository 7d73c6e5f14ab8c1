from __future__ import annotations

from datetime import timedelta

from app.enums import JobState
from app.models import Job
from app.services import replan
from tests.app.test_planning_service import add_series
from tests.conftest import job_payload, make_token


def test_new_submissions_are_planned_once_by_the_minute_check(client, session, app, small_fleet, now):
    for zone in ("DE", "FI"):  # real planning needs prices and carbon over the horizon
        add_series(session, zone, now - timedelta(hours=1), [80.0] * 100)
    token = make_token(session, "team-a")
    headers = {"Authorization": f"Bearer {token}"}
    assert not replan.new_work_waiting(session)
    body = {"jobs": [job_payload(now, name=f"j{i}", release_at=(now + timedelta(hours=1)).isoformat()) for i in range(3)]}
    assert client.post("/api/v1/jobs/batch", json=body, headers=headers).status_code == 201
    assert replan.new_work_waiting(session)
    settings = app.extensions["gridshift"].settings
    record = replan.replan_new_work(session, settings, now=now + timedelta(minutes=1))
    session.commit()
    assert record is not None and record.n_assigned == 3
    assert {j.state for j in session.query(Job)} == {JobState.PLANNED}
    # nothing new since that plan: the next check does not plan again
    assert replan.replan_new_work(session, settings, now=now + timedelta(minutes=2)) is None
