"""A job travels as one typed value: what submission accepts is what is stored and what the planner reads back."""

from __future__ import annotations

from datetime import timedelta

from app.db import utcnow
from app.enums import Role, WorkloadClass
from app.models import Job
from app.services import auth, jobs
from app.services.fleet import snapshot
from app.services.job_values import JobValues, minutes_to_slots
from app.services.planning import to_opt_job
from optimizer.grid import TimeGrid


def test_a_stored_job_reads_back_as_the_value_it_was_submitted_as(session, small_fleet):
    tenant = auth.create_tenant(session, "team-a")
    token, _ = auth.issue_token(session, tenant, "t", Role.MEMBER)
    session.commit()
    now = utcnow().replace(microsecond=0)
    item = {"name": "fine-tune", "gpu_count": 2, "reference_gpu_hours": 3.0, "deadline_at": now + timedelta(hours=12),
            "allowed_regions": ["de"], "interruptible": True, "env": {"SEED": "1"}, "command": "echo ok"}
    (submitted,) = jobs.validate_batch([item], snapshot(session), now, prefix="")
    # the defaults are applied once, at submission: no reader needs a fallback
    assert submitted.workload_class is WorkloadClass.TRAINING and submitted.release_at == now
    assert submitted.reference_hardware == "h100" and submitted.min_chunk_minutes == 60 and submitted.priority == 0
    _batch, (job_id,) = jobs.submit_jobs(session, auth.principal_for(token), [item], now=now, prefix="")
    session.commit()
    session.expire_all()
    assert JobValues.from_row(session.get(Job, job_id)) == submitted


def test_whole_minutes_become_slots_with_a_started_slot_counting_whole():
    assert [minutes_to_slots(m, 15) for m in (1, 15, 16, 30, 31)] == [1, 1, 2, 2, 3]
    assert minutes_to_slots(0, 60) == 0


def test_the_planner_reads_durations_rounded_once_from_the_value(session, small_fleet):
    now = utcnow().replace(minute=0, second=0, microsecond=0)
    (job,) = jobs.validate_batch([{"name": "j", "gpu_count": 1, "durations_minutes": {"h100": 61, "a100": 60},
                                   "deadline_at": now + timedelta(hours=6), "command": "true"}],
                                 snapshot(session), now, prefix="")
    opt = to_opt_job(job, "1", snapshot(session), TimeGrid.at(now, 60, 360))
    assert opt.duration_slots == {"h100": 2, "a100": 1}
    assert opt.release_slot == 0 and opt.deadline_slot == 6
