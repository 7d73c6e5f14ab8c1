from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from app.enums import Role
from app.models import AuditEntry
from tests.conftest import make_token


def test_operator_builds_a_region_and_it_is_audited(client, session, now):
    ops = make_token(session, "ops", Role.ADMIN, operator=True)
    h = {"Authorization": f"Bearer {ops}"}
    resp = client.put("/api/v1/hardware/h100", json={"vendor": "nvidia", "model": "H100", "memory_gb": 80,
                                                     "tdp_w": 700, "idle_w": 90}, headers=h)
    assert resp.status_code == 200, resp.json
    resp = client.put("/api/v1/regions/de", json={"zone": "DE", "power_budget_kw": 400, "pue": 1.2}, headers=h)
    assert resp.status_code == 200
    assert client.put("/api/v1/regions/de/inventory/h100", json={"gpu_count": 8}, headers=h).status_code == 200
    window = {"start_at": (now + timedelta(hours=17)).isoformat(), "end_at": (now + timedelta(hours=20)).isoformat(),
              "power_kw": 100, "reason": "demand response"}
    assert client.post("/api/v1/regions/de/overrides", json=window, headers=h).status_code == 201
    region = client.get("/api/v1/regions/de", headers=h).json
    assert region["inventory"] == [{"hardware": "h100", "gpu_count": 8}]
    assert region["overrides"][0]["power_kw"] == 100
    actions = session.scalars(select(AuditEntry.action).order_by(AuditEntry.id)).all()
    assert actions == ["hardware.put", "region.put", "inventory.put", "region.budget_override"]


def test_region_validation_names_fields(client, session):
    ops = make_token(session, "ops", Role.ADMIN, operator=True)
    h = {"Authorization": f"Bearer {ops}"}
    resp = client.put("/api/v1/regions/xx", json={"zone": "DE"}, headers=h)
    assert resp.status_code == 422 and resp.json["errors"][0]["field"] == "power_budget_kw"
    resp = client.put("/api/v1/regions/xx", json={"zone": "DE", "power_budget_kw": 10, "pue": 0.5}, headers=h)
    assert resp.status_code == 422 and resp.json["errors"][0]["field"] == "pue"
    resp = client.put("/api/v1/regions/de/inventory/h100", json={"gpu_count": 1}, headers=h)
    assert resp.status_code == 404 and "known" in resp.json["detail"]


def test_unknown_connector_kind_lists_known_kinds(client, session, small_fleet):
    ops = make_token(session, "ops", Role.ADMIN, operator=True)
    resp = client.put("/api/v1/clusters/c1", json={"region": "de", "kind": "mainframe"},
                      headers={"Authorization": f"Bearer {ops}"})
    assert resp.status_code == 422
    assert resp.json["errors"][0]["field"] == "kind" and "local" in resp.json["errors"][0]["message"]


def test_non_operator_cannot_change_the_fleet(client, session, small_fleet):
    admin = make_token(session, "team-a", Role.ADMIN)
    h = {"Authorization": f"Bearer {admin}"}
    assert client.put("/api/v1/regions/de", json={"power_budget_kw": 1}, headers=h).status_code == 403
    assert client.get("/api/v1/regions", headers=h).status_code == 200  # reading is fine


def test_region_list_fast_path_matches_the_documented_schema(client, session, small_fleet, now):
    """GET /regions builds its JSON from plain queries; it must be exactly what RegionOut documents."""
    from sqlalchemy.orm import selectinload

    from app.api.fleet import RegionOut
    from app.models import Inventory, Region

    ops = make_token(session, "ops", Role.ADMIN, operator=True)
    h = {"Authorization": f"Bearer {ops}"}
    for hours, kw in ((30, 50), (5, 120)):  # stored out of order: listed by start time
        window = {"start_at": (now + timedelta(hours=hours)).isoformat(),
                  "end_at": (now + timedelta(hours=hours + 2)).isoformat(), "power_kw": kw, "reason": "dr"}
        assert client.post("/api/v1/regions/fi/overrides", json=window, headers=h).status_code == 201
    listed = client.get("/api/v1/regions", headers=h).json
    session.expire_all()
    orm = session.scalars(select(Region).order_by(Region.code).options(
        selectinload(Region.overrides), selectinload(Region.inventory).selectinload(Inventory.hardware_type)))
    assert listed == RegionOut(many=True).dump(orm)
    assert [r["code"] for r in listed] == ["de", "fi"]
    assert [o["power_kw"] for o in listed[1]["overrides"]] == [120, 50]
    assert {i["hardware"] for i in listed[0]["inventory"]} == {"h100", "a100"}


def test_a_region_currency_without_an_exchange_rate_is_refused_before_it_stops_planning(client, session, small_fleet):
    # every plan raises 'missing exchange rate' while one region is priced in a currency without a rate, so
    # accepting it stopped the nightly, hourly and minute plans of the whole fleet
    ops = make_token(session, "ops", Role.ADMIN, operator=True)
    h = {"Authorization": f"Bearer {ops}"}
    resp = client.put("/api/v1/regions/fi", json={"currency": "SEK"}, headers=h)
    assert resp.status_code == 422, resp.json
    assert resp.json["errors"][0]["field"] == "currency" and "GRIDSHIFT_FX_RATES" in resp.json["errors"][0]["message"]
    assert client.get("/api/v1/regions/fi", headers=h).json["currency"] == "EUR"
    assert client.put("/api/v1/regions/fi", json={"currency": "EUR", "pue": 1.3}, headers=h).status_code == 200


def test_a_code_in_the_path_is_checked_like_one_in_a_body(client, session, small_fleet):
    # a region code longer than its column is a database error on PostgreSQL (500), and on SQLite a region that no
    # job could name in allowed_regions
    ops = make_token(session, "ops", Role.ADMIN, operator=True)
    h = {"Authorization": f"Bearer {ops}"}
    long = "r" * 33
    resp = client.put(f"/api/v1/regions/{long}", json={"zone": "DE", "power_budget_kw": 10}, headers=h)
    assert resp.status_code == 422 and resp.json["errors"][0]["field"] == "code"
    resp = client.put("/api/v1/regions/my region", json={"zone": "DE", "power_budget_kw": 10}, headers=h)
    assert resp.status_code == 422 and resp.json["errors"][0]["field"] == "code"
    resp = client.put(f"/api/v1/hardware/{long}", json={"vendor": "nvidia", "model": "X", "memory_gb": 80,
                                                        "tdp_w": 700, "idle_w": 90}, headers=h)
    assert resp.status_code == 422 and resp.json["errors"][0]["field"] == "code"
    resp = client.put("/api/v1/clusters/" + "c" * 101, json={"region": "de", "kind": "local"}, headers=h)
    assert resp.status_code == 422 and resp.json["errors"][0]["field"] == "name"
    assert [r["code"] for r in client.get("/api/v1/regions", headers=h).json] == ["de", "fi"]
