"""Credentials only where they belong: a cluster's config refuses them (they go to the encrypted ``secrets``)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from app.enums import Role
from app.models import Cluster
from tests.conftest import make_token
from tests.security.conftest import bearer


@pytest.mark.parametrize(
    ("kind", "config", "field"),
    [
        ("slurm", {"mode": "rest", "rest_url": "http://127.0.0.1:6820", "rest_user": "u", "rest_token": "tok-1"},
         "config.rest_token"),
        ("kubernetes", {"host": "https://127.0.0.1:6443", "token": "tok-1"}, "config.token"),
        ("local", {"db_password": "tok-1"}, "config.db_password"),
    ],
)  # fmt: skip
def test_a_credential_in_a_cluster_config_is_refused_and_never_stored(client, session, small_fleet, kind, config,
                                                                      field):  # fmt: skip
    ops = bearer(make_token(session, "ops", Role.ADMIN, operator=True))
    resp = client.put("/api/v1/clusters/c1", json={"region": "de", "kind": kind, "config": config}, headers=ops)
    assert resp.status_code == 422, resp.json
    assert field in [e["field"] for e in resp.json["errors"]]
    assert "tok-1" not in resp.get_data(as_text=True)
    assert session.scalar(select(Cluster).where(Cluster.name == "c1")) is None


def test_a_credential_under_secrets_is_stored_encrypted_and_never_echoed(client, session, small_fleet):

    ops = bearer(make_token(session, "ops", Role.ADMIN, operator=True))
    body = {"region": "de", "kind": "slurm", "secrets": {"rest_token": "tok-2"},
            "config": {"mode": "rest", "rest_url": "http://127.0.0.1:6820", "rest_user": "u"}}  # fmt: skip
    resp = client.put("/api/v1/clusters/c2", json=body, headers=ops)
    assert resp.status_code == 200, resp.json
    assert resp.json["has_secrets"] is True and "tok-2" not in resp.get_data(as_text=True)
    assert "tok-2" not in client.get("/api/v1/clusters", headers=ops).get_data(as_text=True)
    row = session.scalar(select(Cluster).where(Cluster.name == "c2"))
    assert row is not None and "tok-2" not in str(row.config) and "tok-2" not in (row.secrets_encrypted or "")


def test_a_credential_stored_in_config_before_is_not_echoed(client, session, small_fleet):
    from app.models import Region

    de = session.scalar(select(Region).where(Region.code == "de"))
    session.add(Cluster(name="old", region=de, kind="kubernetes", config={"host": "h", "token": "tok-3"}))
    session.commit()
    ops = bearer(make_token(session, "ops", Role.ADMIN, operator=True))
    text = client.get("/api/v1/clusters", headers=ops).get_data(as_text=True)
    assert "tok-3" not in text and '"token": "***"' in text.replace('":"', '": "')
