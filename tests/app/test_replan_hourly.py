"""The hourly re-plan runs when something it plans on changed, and is skipped when it would solve the same problem."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from sqlalchemy import select

from app.enums import ForecastRunStatus, JobState, SeriesKind
from app.models import ForecastPoint, ForecastRun, Job, MarketSeries, Plan, PlanRun
from app.services import replan
from app.services.freshness import replan_reason, valued_kinds
from tests.app.test_planning_service import add_job, add_series


def _forecast(session, issued, kind: SeriesKind, *, status=ForecastRunStatus.SUCCEEDED) -> ForecastRun:
    """A run issued at ``issued`` forecasting 50 for a day 100 hours after the first hour of the test."""
    run = ForecastRun(zone="DE", kind=kind, model="lear", issued_at=issued, status=status)
    session.add(run)
    session.flush()
    first = issued.replace(year=2030, month=1, day=1, hour=0)
    session.add_all([ForecastPoint(run_id=run.id, ts=first + timedelta(hours=100 + k), value=50.0) for k in range(24)])
    session.commit()
    return run


def _planned(session, settings, now):
    for zone in ("DE", "FI"):
        add_series(session, zone, now - timedelta(hours=1), [80.0] * 100)
    add_job(session, now, allowed_regions=["de"], allowed_hardware=["h100"])
    record = replan.replan(session, settings, "nightly", now=now)
    session.commit()
    assert record.n_assigned == 1 and record.n_unplanned == 0
    return record


def test_an_hourly_replan_runs_only_on_new_data_the_objective_weighs(session, settings, small_fleet, now):
    _planned(session, settings, now)
    later = now + timedelta(hours=1)
    assert replan.hourly_trigger(session, settings, now=later) is None  # same jobs, fleet and data: skipped
    # realised carbon of the hour just past, a carbon forecast: a cost plan does not weigh them
    session.add(MarketSeries(zone="DE", kind=SeriesKind.CARBON_INTENSITY, ts=now, value=1.0, unit="gCO2eq/kWh",
                             source="measured"))
    session.commit()
    _forecast(session, later, SeriesKind.CARBON_INTENSITY)
    assert replan.hourly_trigger(session, settings, now=later) is None
    assert replan.hourly_trigger(session, replace(settings, objective="carbon"), now=later) == "objective"
    # a price published for an hour still ahead (the day-ahead auction's results) makes the cost plan run
    session.add(MarketSeries(zone="DE", kind=SeriesKind.PRICE, ts=now + timedelta(hours=99), value=5.0,
                             unit="EUR/MWh"))
    session.commit()
    assert replan.hourly_trigger(session, settings, now=later) == "new-data:price"
    replan.replan(session, settings, "hourly", now=later)
    session.commit()
    assert replan.hourly_trigger(session, settings, now=later + timedelta(hours=1)) is None
    # a price forecast run that started before that plan and succeeded after it is new data too
    run = _forecast(session, later, SeriesKind.PRICE, status=ForecastRunStatus.RUNNING)
    replan.replan(session, settings, "hourly", now=later)
    session.commit()
    assert replan.hourly_trigger(session, settings, now=later + timedelta(hours=1)) is None
    run.status = ForecastRunStatus.SUCCEEDED
    session.commit()
    assert replan.hourly_trigger(session, settings, now=later + timedelta(hours=1)) == "new-data:price"
    replan.replan(session, settings, "hourly", now=later + timedelta(hours=1))
    session.commit()
    # the next refresh re-issues the same values (no new day of history yet): nothing to plan on
    _forecast(session, later + timedelta(hours=1), SeriesKind.PRICE)
    assert replan.hourly_trigger(session, settings, now=later + timedelta(hours=2)) is None
    again = _forecast(session, later + timedelta(hours=2), SeriesKind.PRICE)
    session.query(ForecastPoint).filter(ForecastPoint.run_id == again.id).update({"value": 49.0})
    session.commit()
    assert replan.hourly_trigger(session, settings, now=later + timedelta(hours=2)) == "new-data:price"


def test_an_hourly_replan_runs_while_the_plan_leaves_work_out_or_work_ended(session, settings, small_fleet, now):
    _planned(session, settings, now)
    job = session.scalar(select(Job))
    job.state = JobState.SUCCEEDED  # its run ended (the event the sync writes)
    from app.services.job_states import set_state

    set_state(session, job, JobState.SUCCEEDED, "run ended", at=now)
    session.commit()
    assert replan.hourly_trigger(session, settings, now=now + timedelta(hours=1)) == "runs-ended"
    # a job beyond the horizon stays pending with the plan's reason: as the horizon moves the hourly re-plan tries it
    add_job(session, now, release_at=now + timedelta(hours=100), deadline_at=now + timedelta(hours=130))
    record = replan.replan(session, settings, "nightly", now=now)
    session.commit()
    assert record.n_unplanned == 1
    assert replan.hourly_trigger(session, settings, now=now + timedelta(hours=1)) == "left-out"


def test_the_decision_weighs_only_the_objectives_series():
    assert valued_kinds("cost") == (SeriesKind.PRICE,)
    assert valued_kinds("carbon") == (SeriesKind.CARBON_INTENSITY,)
    assert valued_kinds("weighted") == (SeriesKind.PRICE, SeriesKind.CARBON_INTENSITY)
    assert replan_reason("cost", [SeriesKind.CARBON_INTENSITY]) is None
    assert replan_reason("carbon", [SeriesKind.CARBON_INTENSITY]) == "new-data:carbon_intensity"
    assert replan_reason("weighted", [SeriesKind.CARBON_INTENSITY]) == "new-data:carbon_intensity"
    assert replan_reason("cost", [], left_out=True) == "left-out"


def test_the_hourly_task_skips_without_a_plan_run_and_other_triggers_always_plan(app, session, settings,
                                                                                 small_fleet, now):
    from app.tasks import planning

    celery = app.extensions["celery"]
    celery.conf.task_always_eager = True
    try:
        _planned(session, settings, now)
        plans = session.scalars(select(Plan.id)).all()
        # the task plans at the wall clock's now, years before the fixture's: its data all lies ahead, none is new
        with app.app_context():
            out = planning.replan.delay().get()
            assert out == {"trigger": "hourly", "skipped": "nothing new since the current plan"}
            assert session.scalars(select(PlanRun)).all() == []
            forced = planning.replan.delay(trigger="dispatch-failure").get()
        assert forced["state"] == "succeeded"
        session.expire_all()
        assert len(session.scalars(select(Plan.id)).all()) == len(plans) + 1
    finally:
        celery.conf.task_always_eager = False
