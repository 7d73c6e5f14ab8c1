"""Dashboard sign-in: where it sends the user afterwards."""

from __future__ import annotations

import re

import pytest

from tests.conftest import make_token


def _sign_in(client, token: str, next_: str):  # type: ignore[no-untyped-def]
    html = client.get("/ui/signin").get_data(as_text=True)
    csrf = re.search(r'name="csrf" value="([^"]+)"', html).group(1)  # type: ignore[union-attr]
    return client.post("/ui/signin", data={"token": token, "csrf": csrf, "next": next_})


@pytest.mark.parametrize("next_", ["/ui/jobs\r\nSet-Cookie: x=1", "/ui/jobs\n", "/\\evil.example", "/\x00"])
def test_sign_in_with_a_malformed_next_lands_on_the_overview(client, session, next_):
    resp = _sign_in(client, make_token(session, "team-a"), next_)
    assert resp.status_code == 302 and resp.headers["Location"] == "/"
    assert client.get("/").status_code == 200  # signed in


def test_sign_in_returns_to_the_page_asked_for(client, session):
    resp = _sign_in(client, make_token(session, "team-a"), "/ui/jobs?state=pending")
    assert resp.status_code == 302 and resp.headers["Location"] == "/ui/jobs?state=pending"
