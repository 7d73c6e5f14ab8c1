from __future__ import annotations

import gzip
from datetime import UTC, datetime

from app.enums import Role, SeriesKind
from app.services import market
from tests.conftest import make_token

HARMONIZED = (
    "timestamp_utc,price_eur_mwh,load_mw,load_forecast_mw,solar_forecast_mw,wind_onshore_forecast_mw,"
    "renewable_share,carbon_intensity_g_per_kwh\n"
    "2022-03-01T00:00:00Z,120.5,50000,51000,0,12000,0.41,380\n"
    "2022-03-01T01:00:00Z,-3.2,0,49000,0,15000,,\n"
)


def test_harmonized_rows_become_typed_points():
    pts = market._parse_csv(HARMONIZED.splitlines(), zone="DE", source="t")
    by = {(p.kind, p.ts.hour): p.value for p in pts}
    assert by[(SeriesKind.PRICE, 0)] == 120.5
    assert by[(SeriesKind.PRICE, 1)] == -3.2  # negative prices are real prices
    assert by[(SeriesKind.WIND_SOLAR_FORECAST, 1)] == 15000
    assert (SeriesKind.LOAD, 1) not in by  # upstream zero = missing
    assert (SeriesKind.CARBON_INTENSITY, 1) not in by  # empty cell = gap
    assert all(p.ts.tzinfo is not None for p in pts)


def test_bad_lines_are_named_and_nothing_is_returned():
    text = HARMONIZED + "2022-03-01T02:00:00Z,abc,1,1,1,1,0.2,100\nnot-a-time,1,1,1,1,1,0.2,100\n"
    try:
        market._parse_csv(text.splitlines(), zone="DE", source="t")
    except market.ValidationFailed as exc:
        assert [e.field for e in exc.errors] == ["line 4", "line 5"]
    else:
        raise AssertionError("bad lines were accepted")


def test_naive_timestamp_is_rejected():
    text = "zone,kind,timestamp,value\nDE,price,2022-03-01T00:00:00,10\n"
    try:
        market._parse_csv(text.splitlines(), zone=None, source="t")
    except market.ValidationFailed as exc:
        assert exc.errors[0].field == "line 2" and "offset" in exc.errors[0].message
    else:
        raise AssertionError("naive timestamp accepted")


def test_import_api_stores_whole_file_or_nothing(client, session):
    ops = make_token(session, "ops", Role.ADMIN, operator=True)
    headers = {"Authorization": f"Bearer {ops}", "Content-Type": "text/csv"}
    good = "zone,kind,timestamp,value\nDE,price,2022-03-01T00:00:00Z,10\nDE,price,2022-03-01T01:00:00+00:00,-5\n"
    resp = client.post("/api/v1/market-series/import", data=gzip.compress(good.encode()), headers=headers)
    assert resp.status_code == 201 and resp.json["imported"] == 2
    bad = good.replace("-5", "x") + "DE,price,2022-03-01T02:00:00Z,7\n"
    resp = client.post("/api/v1/market-series/import", data=bad, headers=headers)
    assert resp.status_code == 422 and resp.json["errors"][0]["field"] == "line 3"
    q = "/api/v1/market-series?zone=DE&kind=price&from=2022-03-01T00:00:00Z&to=2022-03-02T00:00:00Z"
    pts = client.get(q, headers=headers).json["points"]
    assert [p["value"] for p in pts] == [10, -5]  # the rejected file changed nothing


def test_reimport_replaces_value(session):
    ts = datetime(2022, 3, 1, tzinfo=UTC)
    market.store(session, [market.Point("FR", SeriesKind.PRICE, ts, 1.0, "EUR/MWh", "s")])
    market.store(session, [market.Point("FR", SeriesKind.PRICE, ts, 2.0, "EUR/MWh", "s")])
    session.commit()
    rows = market.query(session, "FR", SeriesKind.PRICE, ts, ts.replace(day=2))
    assert [r.value for r in rows] == [2.0]


def test_member_cannot_import(client, session):
    token = make_token(session, "team-a", Role.ADMIN)  # admin, but not of the operator tenant
    resp = client.post("/api/v1/market-series/import", data="zone,kind,timestamp,value\n",
                       headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == 403


def test_values_the_database_cannot_hold_are_bad_lines_or_fields(client, session):
    ops = make_token(session, "ops", Role.ADMIN, operator=True)
    headers = {"Authorization": f"Bearer {ops}", "Content-Type": "text/csv"}
    head = "zone,kind,timestamp,value,unit,source\n"
    good = "DE,price,2030-01-01T00:00:00Z,50,EUR/MWh,upload\n"
    for bad, what in [("Z" * 33 + ",price,2030-01-01T01:00:00Z,50,,\n", "zone"),
                      ("DE,price,2030-01-01T01:00:00Z,50," + "x" * 25 + ",\n", "unit"),
                      ("DE,price,2030-01-01T01:00:00Z,50,," + "s" * 65 + "\n", "source"),
                      ("DE,price,2030-01-01T01:00:00Z,50,,a\x00b\n", "NUL"),
                      ("DE,price,9999-12-31T23:00:00-05:00,50,,\n", "years")]:
        resp = client.post("/api/v1/market-series/import", data=(head + good + bad).encode(), headers=headers)
        assert resp.status_code == 422, (what, resp.json)
        assert resp.json["errors"] == [{"field": "line 3", "message": resp.json["errors"][0]["message"]}]
        assert what in resp.json["errors"][0]["message"]
    ok = client.post("/api/v1/market-series/import", data=(head + good).encode(), headers=headers)
    assert ok.status_code == 201 and ok.json["imported"] == 1
    q = "/api/v1/market-series?zone=DE&kind=price&from=2030-01-01T00:00:00Z"
    resp = client.get(q + "&to=9999-12-31T23:00:00-05:00", headers=headers)
    assert resp.status_code == 422 and [e["field"] for e in resp.json["errors"]] == ["to"]
    assert [p["value"] for p in client.get(q + "&to=2030-01-02T00:00:00Z", headers=headers).json["points"]] == [50]


def test_the_latest_import_of_an_hour_wins_whatever_its_source(client, session):
    ops = make_token(session, "ops", Role.ADMIN, operator=True)
    headers = {"Authorization": f"Bearer {ops}", "Content-Type": "text/csv"}
    for source, value in (("upload", 50), ("entsoe", 60), ("upload", 70)):
        resp = client.post(f"/api/v1/market-series/import?source={source}", headers=headers,
                           data=f"zone,kind,timestamp,value\nFR,price,2030-01-01T00:00:00Z,{value}\n")
        assert resp.status_code == 201
    q = "/api/v1/market-series?zone=FR&kind=price&from=2030-01-01T00:00:00Z&to=2030-01-02T00:00:00Z"
    assert [(p["source"], p["value"]) for p in client.get(q, headers=headers).json["points"]] == [("upload", 70)]


def test_the_limit_counts_hours_not_the_rows_of_every_source(session):
    t0 = datetime(2030, 1, 1, tzinfo=UTC)
    hours = [t0.replace(hour=h) for h in range(6)]
    for source, value in (("entsoe", 1.0), ("upload", 2.0)):
        market.store(session, [market.Point("PL", SeriesKind.PRICE, ts, value, "EUR/MWh", source) for ts in hours])
    session.commit()
    rows = market.query(session, "PL", SeriesKind.PRICE, t0, t0.replace(day=2), limit=4)
    assert [(r.ts.hour, r.value) for r in rows] == [(0, 2.0), (1, 2.0), (2, 2.0), (3, 2.0)]


def test_blank_lines_are_skipped(client, session):
    ops = make_token(session, "ops", Role.ADMIN, operator=True)
    headers = {"Authorization": f"Bearer {ops}", "Content-Type": "text/csv"}
    harmonized = "timestamp_utc,price_eur_mwh\n2030-01-01T00:00Z,50\n\n2030-01-01T01:00Z,51\n\n"
    resp = client.post("/api/v1/market-series/import?zone=DE", data=harmonized, headers=headers)
    assert resp.status_code == 201 and resp.json["imported"] == 2, resp.json
    long = "zone,kind,timestamp,value\r\nFR,price,2030-01-01T00:00Z,40\r\n,,,\r\n\r\n"
    resp = client.post("/api/v1/market-series/import", data=long, headers=headers)
    assert resp.status_code == 201 and resp.json["imported"] == 1, resp.json
    bad = "zone,kind,timestamp,value\n\nFR,price,2030-01-01T01:00Z,x\n"
    resp = client.post("/api/v1/market-series/import", data=bad, headers=headers)
    assert resp.status_code == 422 and resp.json["errors"][0]["field"] == "line 3"  # lines keep their numbers
