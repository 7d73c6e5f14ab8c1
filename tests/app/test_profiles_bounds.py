"""A measurement whose derived figures overflow is refused, naming the field, and the old profile stays in force."""

from __future__ import annotations

import json

import pytest

from app.enums import Role
from tests.conftest import make_token


@pytest.mark.parametrize(
    ("figures", "field"),
    [
        # the throughput (rate / reference rate) overflows
        ({"steps_per_s": 1e308, "reference_steps_per_s": 1e-300}, "reference_steps_per_s"),
        # the energy per step (power / rate) overflows
        ({"steps_per_s": 1e-320}, "steps_per_s"),
    ],
)
def test_a_measurement_with_non_finite_derived_figures_is_refused(
    client, session, small_fleet, figures, field
):
    ops = {"Authorization": f"Bearer {make_token(session, 'ops', Role.ADMIN, operator=True)}"}
    before = client.get("/api/v1/profiles/h100/training", headers=ops).json
    body = {"workload_class": "training", "hardware": "h100", "power_w": 500.0, **figures}
    resp = client.post("/api/v1/profiles", json=body, headers=ops)
    assert resp.status_code == 422
    assert field in [e["field"] for e in resp.json["errors"]]
    after = client.get("/api/v1/profiles/h100/training", headers=ops)
    json.loads(after.get_data(as_text=True), parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
    assert after.json == before


def test_a_measurement_that_moves_the_profile_beyond_any_figure_is_flagged_with_valid_json(
    client, session, small_fleet
):
    ops = {"Authorization": f"Bearer {make_token(session, 'ops', Role.ADMIN, operator=True)}"}
    body = {"workload_class": "training", "hardware": "h100", "power_w": 500.0, "steps_per_s": 1.0,
            "relative_throughput": 1e308}  # fmt: skip
    resp = client.post("/api/v1/profiles", json=body, headers=ops)
    assert resp.status_code == 201
    out = json.loads(resp.get_data(as_text=True), parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
    assert out["flagged"] is True
