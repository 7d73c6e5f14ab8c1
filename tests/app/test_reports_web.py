"""Dashboard sign-in and assets through Flask's test client (the browser tests drive the same pages)."""

from __future__ import annotations

import re

from app.models import ApiToken
from app.services import auth
from tests.conftest import job_payload, make_token


def _signin_form(client, path: str = "/ui/signin") -> str:
    html = client.get(path).get_data(as_text=True)
    return re.search(r'name="csrf" value="([^"]+)"', html).group(1)


def _sign_in(client, token: str, next_: str = "/") -> str:
    resp = client.post("/ui/signin", data={"token": token, "csrf": _signin_form(client), "next": next_})
    assert resp.status_code == 302, resp.get_data(as_text=True)
    page = client.get("/").get_data(as_text=True)
    return re.search(r'name="csrf-token" content="([^"]+)"', page).group(1)


def test_pages_need_a_session(client):
    resp = client.get("/ui/jobs?state=pending")
    assert resp.status_code == 302
    assert resp.headers["Location"].startswith("/ui/signin?next=%2Fui%2Fjobs%3Fstate%3Dpending")


def test_sign_in_needs_the_forms_csrf_token_and_a_valid_token(client, session):
    token = make_token(session, "team-a")
    _signin_form(client)
    resp = client.post("/ui/signin", data={"token": token, "csrf": "forged"})
    assert resp.status_code == 401 and "expired" in resp.get_data(as_text=True)
    with client.application.test_client() as fresh:  # no sign-in form seen: an empty token must not match
        assert fresh.post("/ui/signin", data={"token": token, "csrf": ""}).status_code == 401
        assert fresh.post("/ui/signin", data={"token": token, "csrf": "é"}).status_code == 401
    resp = client.post("/ui/signin", data={"token": "gs_bad", "csrf": _signin_form(client)})
    assert resp.status_code == 401 and "invalid" in resp.get_data(as_text=True)
    assert client.get("/api/v1/me").status_code == 401


def test_session_calls_the_api_and_writes_need_the_csrf_header(client, session, small_fleet, now):
    csrf = _sign_in(client, make_token(session, "team-a"))
    assert client.get("/api/v1/me").json["tenant"] == "team-a"
    assert client.post("/api/v1/jobs", json=job_payload(now)).status_code == 403
    assert client.post("/api/v1/jobs", json=job_payload(now), headers={"X-CSRF-Token": csrf}).status_code == 201
    with client.session_transaction() as sess:  # a session that lost its CSRF value accepts no write at all
        sess.pop("csrf")
    assert client.post("/api/v1/jobs", json=job_payload(now)).status_code == 403
    assert client.post("/api/v1/jobs", json=job_payload(now), headers={"X-CSRF-Token": ""}).status_code == 403


def test_no_redirect_off_site_after_sign_in(client, session):
    token = make_token(session, "team-a")
    for target in ("https://evil.example/", "//evil.example/x", "javascript:alert(1)"):
        resp = client.post("/ui/signin", data={"token": token, "csrf": _signin_form(client), "next": target})
        assert resp.headers["Location"] == "/", target


def test_sign_out_and_revocation_end_the_session(client, session):
    token = make_token(session, "team-a")
    csrf = _sign_in(client, token)
    assert client.post("/ui/signout", data={"csrf": "wrong"}).status_code == 302
    assert client.get("/api/v1/me").status_code == 200  # a forged sign-out does nothing
    client.post("/ui/signout", data={"csrf": csrf})
    assert client.get("/api/v1/me").status_code == 401
    _sign_in(client, token)
    row = session.query(ApiToken).filter_by(token_hash=auth.hash_token(token)).one()
    auth.revoke_token(session, row.tenant_id, row.id)
    session.commit()
    assert client.get("/ui/plan").status_code == 302
    assert client.get("/api/v1/me").status_code == 401


def test_pages_carry_a_content_security_policy(client, session):
    _sign_in(client, make_token(session, "team-a"))
    resp = client.get("/ui/reports")
    assert resp.status_code == 200
    assert "script-src 'self'" in resp.headers["Content-Security-Policy"]
    assert "cdn" not in resp.get_data(as_text=True).lower()


def test_chart_and_docs_assets_come_from_installed_packages(client):
    js = client.get("/ui/vendor/plotly.min.js")
    assert js.status_code == 200 and len(js.data) > 1_000_000
    assert client.get("/static/swagger-ui/swagger-ui-bundle.js").status_code == 200
    assert client.get("/static/app.js").status_code == 200
    assert client.get("/static/../app/web.py").status_code == 404
