from __future__ import annotations

from datetime import timedelta

from app.enums import JobState, Role
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


def test_a_fleet_change_is_planned_around_by_the_minute_check(client, session, app, small_fleet, now):
    for zone in ("DE", "FI"):
        add_series(session, zone, now - timedelta(hours=1), [80.0] * 100)
    token = make_token(session, "team-a")
    ops = {"Authorization": f"Bearer {make_token(session, 'ops', Role.ADMIN, operator=True)}"}
    body = {"jobs": [job_payload(now, name=f"j{i}", gpu_count=4, allowed_hardware=["h100"],
                                 release_at=(now + timedelta(hours=1)).isoformat()) for i in range(2)]}
    assert client.post("/api/v1/jobs/batch", json=body, headers={"Authorization": f"Bearer {token}"}).status_code == 201
    settings = app.extensions["gridshift"].settings
    first = replan.replan_new_work(session, settings, now=now)
    session.commit()
    assert first is not None and first.n_assigned == 2 and not replan.fleet_changed(session)
    # the operator takes Frankfurt's H100s out for maintenance: the next minute's check plans around it
    rep = client.put("/api/v1/regions/de/inventory/h100", json={"gpu_count": 0}, headers=ops)
    assert rep.status_code == 200
    assert replan.fleet_changed(session)
    second = replan.replan_new_work(session, settings, now=now + timedelta(minutes=1))
    session.commit()
    assert second is not None and second.trigger == "fleet-change"
    assert second.n_assigned == 0 and second.n_unplanned == 2  # h100 only: nowhere left to run
    assert not replan.fleet_changed(session)
    assert replan.replan_new_work(session, settings, now=now + timedelta(minutes=2)) is None
    # other audited actions (a submission) are not fleet changes
    more = {"jobs": [job_payload(now, name="j9", release_at=(now + timedelta(hours=1)).isoformat())]}
    assert client.post("/api/v1/jobs/batch", json=more, headers={"Authorization": f"Bearer {token}"}).status_code == 201
    assert not replan.fleet_changed(session)
