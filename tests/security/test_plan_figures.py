"""Tenants see only their own figures in plan answers: the fleet's objective, bound, gap and totals are for
operator admins (the plan's objective value is the whole fleet's cost)."""

from __future__ import annotations

import json
from datetime import timedelta

from sqlalchemy import select

from app.models import ApiToken, Assignment, HardwareType, Job, Plan, Region
from tests.security.conftest import SHARED_BASE_ID, World, bearer

FLEET_OBJECTIVE, FLEET_BOUND, FLEET_GAP = 987.654, 876.543, 11.25
BRAVO_COST = 4.5


def _bravo_assignment(session, world: World, now) -> None:  # type: ignore[no-untyped-def]
    """One planned job of bravo's in the shared plan, and fleet-wide figures on the plan that only ops may read."""
    bravo_tenant = session.scalar(select(ApiToken.tenant_id).where(ApiToken.name == "bravo-inc-member"))
    job = Job(tenant_id=bravo_tenant, name="bravo-job", workload_class="training", gpu_count=1,
              reference_gpu_hours=1.0, reference_hardware="h100", release_at=now, deadline_at=now + timedelta(hours=9),
              command="true", env={})  # fmt: skip
    session.add(job)
    session.flush()
    session.add(Assignment(plan_id=SHARED_BASE_ID, job_id=job.id, start_at=now, end_at=now + timedelta(hours=1),
                           region_id=session.scalar(select(Region.id).where(Region.code == "de")),
                           hardware_type_id=session.scalar(select(HardwareType.id).where(HardwareType.code == "h100")),
                           energy_kwh=1.0, cost=BRAVO_COST, currency="EUR", carbon_kg=0.5))  # fmt: skip
    plan = session.get(Plan, SHARED_BASE_ID)
    plan.objective_value, plan.best_bound, plan.gap_pct = FLEET_OBJECTIVE, FLEET_BOUND, FLEET_GAP
    plan.stats = {"cost": FLEET_OBJECTIVE, "energy_kwh": 4321.0, "jobs": {"assigned": 4, "unplanned": 1}}
    session.commit()


def test_a_read_only_tenant_sees_no_fleet_wide_figure_in_any_plan_answer(client, session, world, now):
    _bravo_assignment(session, world, now)
    reader = bearer(world.tokens["bravo-readonly"])
    answers = {path: client.get(path, headers=reader) for path in
               ("/api/v1/plans", "/api/v1/plans/current", f"/api/v1/plans/{SHARED_BASE_ID}")}  # fmt: skip
    for path, resp in answers.items():
        assert resp.status_code == 200, (path, resp.json)
        text = json.dumps(resp.json)
        for figure in ("987.654", "876.543", "11.25", "4321"):
            assert figure not in text, f"{path} shows the fleet-wide figure {figure}"
    summary = answers["/api/v1/plans"].json["items"][0]
    one = answers[f"/api/v1/plans/{SHARED_BASE_ID}"].json
    for body in (summary, one, answers["/api/v1/plans/current"].json):
        assert body["objective_value"] == BRAVO_COST  # the objective (cost) over bravo's own jobs
        assert body["best_bound"] is None and body["gap_pct"] is None
    assert summary["fleet"] is None and one["region_totals"] == []
    ops = client.get(f"/api/v1/plans/{SHARED_BASE_ID}", headers=bearer(world.tokens["ops-admin"])).json
    assert ops["objective_value"] == FLEET_OBJECTIVE and ops["best_bound"] == FLEET_BOUND  # operators still see them
