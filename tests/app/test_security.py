"""Security regressions: key rotation, rate limits."""

from __future__ import annotations

import re
import secrets
from dataclasses import replace

import pytest
from sqlalchemy import select

from app import create_app, crypto
from app.commands import keys as keys_cmd
from app.models import Cluster
from app.services import fleet
from tests.conftest import make_token


@pytest.mark.parametrize("change", [{"token": "new-credential"}, None])
def test_a_credential_changed_during_key_rotation_is_kept(app, session, settings, small_fleet, monkeypatch,
                                                           change):  # fmt: skip
    old_keys = settings.encryption_keys
    new_keys = (crypto.generate_key(), *old_keys)
    fleet.upsert_cluster(session, "c1", "de", "local", {})
    fleet.set_cluster_secrets(session, "c1", {"token": "old-credential"}, old_keys)
    session.commit()
    real_rotate, changed = crypto.rotate, list[bool]()

    def rotate_while_an_operator_changes_it(keys: tuple[str, ...], token: str) -> str:
        if not changed:  # an operator PUTs the cluster's credentials (or clears them) between read and write
            changed.append(True)
            other = app.extensions["gridshift"].sessions()
            fleet.set_cluster_secrets(other, "c1", change, new_keys)
            other.commit()
            other.close()
        return real_rotate(keys, token)

    monkeypatch.setattr(crypto, "rotate", rotate_while_an_operator_changes_it)
    keys_cmd.rotate_all(session, new_keys)
    session.expire_all()
    row = session.scalar(select(Cluster).where(Cluster.name == "c1"))
    assert row is not None
    if change is None:
        assert row.secrets_encrypted is None  # cleared stays cleared
    else:
        # the newer credential, under the newest key
        assert fleet.cluster_secrets(row, new_keys[:1]) == change


@pytest.fixture
def limited(settings):  # type: ignore[no-untyped-def]
    application = create_app(replace(settings, rate_limit="5 per minute"))
    yield application
    application.extensions["gridshift"].engine.dispose()


def test_failed_authentications_are_limited_per_address(limited, session):
    client = limited.test_client()
    token = make_token(session, "team-a")
    guess = lambda: {"Authorization": f"Bearer gs_{secrets.token_hex(4)}_guess"}  # noqa: E731
    guesses = [client.get("/api/v1/me", headers=guess()).status_code for _ in range(5)]
    assert guesses == [401] * 5
    refused = client.get("/api/v1/me", headers={"Authorization": "Bearer gs_0000_another-guess"})
    assert refused.status_code == 429 and refused.mimetype == "application/problem+json"
    assert int(refused.headers["Retry-After"]) > 0
    assert client.get("/api/v1/me").status_code == 429  # no token at all counts the same
    # sign-in form guesses from that address are refused too (a valid token still signs in: test_cost_limits.py)
    html = client.get("/ui/signin").get_data(as_text=True)
    csrf = re.search(r'name="csrf" value="([^"]+)"', html).group(1)  # type: ignore[union-attr]
    form = client.post("/ui/signin", data={"token": token + "x", "csrf": csrf})
    assert form.status_code == 429 and form.mimetype == "text/html"  # the form again, saying why
    assert "Too many failed sign-ins from this address" in form.get_data(as_text=True)
    assert int(form.headers["Retry-After"]) > 0
    # another address is not affected
    other = limited.test_client()
    other.environ_base["REMOTE_ADDR"] = "192.0.2.7"
    assert other.get("/api/v1/me", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    assert client.get("/api/v1/health").status_code == 200  # probes are never limited
