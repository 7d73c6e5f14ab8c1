"""Dashboard sessions end on the server: a copied cookie replayed after sign-out, after its token is revoked or after
the secret key is rotated gets 401, on reads and on writes."""

from __future__ import annotations

import re
from dataclasses import replace
from http.cookies import SimpleCookie

import pytest
from sqlalchemy import select

from app import create_app
from app.db import utcnow
from app.models import ApiToken
from app.services.auth import hash_token
from tests.conftest import job_payload, make_token


def _sign_in(client, token: str) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """Sign in through the form; returns the session cookie's value and the page's CSRF token."""
    html = client.get("/ui/signin").get_data(as_text=True)
    form_csrf = re.search(r'name="csrf" value="([^"]+)"', html).group(1)  # type: ignore[union-attr]
    resp = client.post("/ui/signin", data={"token": token, "csrf": form_csrf, "next": "/ui/jobs"})
    assert resp.status_code == 302, resp.get_data(as_text=True)
    cookie = SimpleCookie()
    for header in resp.headers.getlist("Set-Cookie"):
        cookie.load(header)
    page = client.get("/ui/jobs").get_data(as_text=True)
    csrf = re.search(r'name="csrf-token" content="([^"]+)"', page)
    assert csrf is not None, "the page carries the session's CSRF token"
    return cookie["session"].value, csrf.group(1)


def _replay(app, cookie: str, csrf: str, now) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """A fresh client (the attacker's browser) with the copied cookie: status of a read and of a write."""
    thief = app.test_client()
    thief.set_cookie("session", cookie)
    read = thief.get("/api/v1/jobs").status_code
    write = thief.post("/api/v1/jobs", json=job_payload(now), headers={"X-CSRF-Token": csrf}).status_code
    return read, write


def test_a_cookie_replayed_after_sign_out_is_refused(app, client, session, small_fleet, now):
    cookie, csrf = _sign_in(client, make_token(session, "team-a"))
    assert _replay(app, cookie, csrf, now) == (200, 201)  # the copy works while the session lives
    client.post("/ui/signout", data={"csrf": csrf})
    assert client.get("/ui/jobs").status_code == 302  # the user is signed out...
    assert _replay(app, cookie, csrf, now) == (401, 401)  # ...and so is every copy of the cookie


def test_a_cookie_replayed_after_its_token_is_revoked_is_refused(app, client, session, small_fleet, now):
    token = make_token(session, "team-a")
    cookie, csrf = _sign_in(client, token)
    row = session.scalar(select(ApiToken).where(ApiToken.token_hash == hash_token(token)))
    assert row is not None
    row.revoked_at = utcnow()
    session.commit()
    assert _replay(app, cookie, csrf, now) == (401, 401)


def test_a_cookie_replayed_after_the_secret_key_is_rotated_is_refused(app, client, session, settings, small_fleet,
                                                                      now):  # fmt: skip
    cookie, csrf = _sign_in(client, make_token(session, "team-a"))
    rotated = create_app(replace(settings, secret_key="a-new-secret-key-after-rotation"))
    try:
        assert _replay(rotated, cookie, csrf, now) == (401, 401)
    finally:
        rotated.extensions["gridshift"].engine.dispose()


@pytest.mark.parametrize("forged", [{"token_id": 1}, {"token_id": 1, "sid": "guessed"}])
def test_a_session_without_a_live_server_record_is_refused(client, session, forged):
    make_token(session, "team-a")
    with client.session_transaction() as cookie:
        cookie.update(forged)
    assert client.get("/api/v1/jobs").status_code == 401
