"""Connector credentials are encrypted at rest, never returned, and survive a key rotation."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from app import crypto
from app.commands import keys as keys_cmd
from app.models import Cluster
from app.services import fleet
from tests.security.conftest import bearer

OLD, NEW = crypto.generate_key(), crypto.generate_key()
SECRET = {"token": "slurm-jwt-very-secret-123", "password": "hunter2-secret"}


def test_round_trip_and_tamper_detection():
    token = crypto.encrypt_json((OLD,), SECRET)
    assert "very-secret" not in token
    assert crypto.decrypt_json((OLD,), token) == SECRET
    with pytest.raises(crypto.EncryptionKeyError, match="cannot be decrypted"):
        crypto.decrypt_json((NEW,), token)
    forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    with pytest.raises(crypto.EncryptionKeyError):
        crypto.decrypt_json((OLD,), forged)


def test_bad_or_missing_keys_are_named():
    with pytest.raises(crypto.EncryptionKeyError, match="GRIDSHIFT_ENCRYPTION_KEYS"):
        crypto.encrypt_json((), SECRET)
    with pytest.raises(crypto.EncryptionKeyError, match="key #2 is not a Fernet key"):
        crypto.encrypt_json((NEW, "not-a-key"), SECRET)


def test_rotation_keeps_content_and_moves_to_the_newest_key():
    token = crypto.encrypt_json((OLD,), SECRET)
    assert crypto.key_index((NEW, OLD), token) == 1
    rotated = crypto.rotate((NEW, OLD), token)
    assert crypto.key_index((NEW, OLD), rotated) == 0
    assert crypto.decrypt_json((NEW,), rotated) == SECRET


def test_cluster_secrets_via_api_are_encrypted_and_write_only(client, session, world, settings):
    ops = bearer(world.tokens["ops-admin"])
    rest = {"mode": "rest", "rest_url": "http://127.0.0.1:9", "rest_user": "gridshift"}
    secret = {"rest_token": SECRET["token"]}
    body = {"region": "de", "kind": "slurm", "config": rest, "secrets": secret}
    resp = client.put("/api/v1/clusters/de-gpu", json=body, headers=ops)
    assert resp.status_code == 200, resp.json
    assert "secrets" not in resp.json and resp.json["has_secrets"] is True
    listed = client.get("/api/v1/clusters", headers=ops).get_data(as_text=True)
    assert "very-secret" not in listed
    row = session.scalar(select(Cluster).where(Cluster.name == "de-gpu"))
    assert row.secrets_encrypted and "very-secret" not in row.secrets_encrypted
    assert fleet.cluster_secrets(row, settings.encryption_keys) == secret
    # an update without `secrets` keeps them (and they still satisfy the schema); an empty object clears them
    resp = client.put("/api/v1/clusters/de-gpu", json={"region": "de", "kind": "slurm", "config": rest}, headers=ops)
    assert resp.status_code == 200, resp.json
    session.expire_all()
    assert fleet.cluster_secrets(session.get(Cluster, row.id), settings.encryption_keys) == secret
    # a credential the connector does not know is refused, naming it
    resp = client.put("/api/v1/clusters/de-gpu", json={**body, "secrets": {"password": "x"}}, headers=ops)
    assert resp.status_code == 422 and resp.json["errors"][0]["field"] == "secrets.password"
    client.put("/api/v1/clusters/de-gpu", json={**body, "config": {"mode": "cli"}, "secrets": {}}, headers=ops)
    session.expire_all()
    assert session.get(Cluster, row.id).secrets_encrypted is None


def test_keys_rotate_reencrypts_every_cluster_all_or_none(session, world, settings, monkeypatch):
    old = settings.encryption_keys
    for name in ("c1", "c2"):
        fleet.upsert_cluster(session, name, "de", "local", {})
        fleet.set_cluster_secrets(session, name, {"token": f"{name}-secret"}, old)
    session.commit()
    new_keys = (NEW, *old)
    assert keys_cmd.rotate_all(session, new_keys) == 2
    session.expire_all()
    rows = {r.name: r for r in session.scalars(select(Cluster).where(Cluster.secrets_encrypted.is_not(None)))}
    assert all(crypto.key_index(new_keys, r.secrets_encrypted) == 0 for r in rows.values())
    assert fleet.cluster_secrets(rows["c2"], (NEW,)) == {"token": "c2-secret"}

    # a secret no key opens: the command names the cluster and changes nothing
    rows["c1"].secrets_encrypted = crypto.encrypt_json((OLD,), {"token": "orphan"})
    session.commit()
    before = {r.name: r.secrets_encrypted for r in rows.values()}
    with pytest.raises(crypto.EncryptionKeyError, match="'c1'"):
        keys_cmd.rotate_all(session, (crypto.generate_key(), NEW))
    session.expire_all()
    after = {
        r.name: r.secrets_encrypted for r in session.scalars(select(Cluster).where(Cluster.name.in_(before)))
    }
    assert after == before


def test_keys_command_line(settings, session, world, monkeypatch):
    fleet.upsert_cluster(session, "c3", "de", "local", {})
    fleet.set_cluster_secrets(session, "c3", SECRET, settings.encryption_keys)
    session.commit()
    env = {
        "GRIDSHIFT_DATABASE_URL": settings.effective_database_url,
        "GRIDSHIFT_VAR_DIR": str(settings.var_dir),
        "GRIDSHIFT_ENCRYPTION_KEYS": f"{NEW},{settings.encryption_keys[0]}",
    }
    runner = CliRunner()
    assert len(runner.invoke(keys_cmd.command, ["generate"]).output.strip()) == 44
    out = runner.invoke(keys_cmd.command, ["status"], env=env)
    assert "c3\tkey #1" in out.output, out.output
    out = runner.invoke(keys_cmd.command, ["rotate"], env=env)
    assert out.exit_code == 0 and "1 cluster" in out.output, out.output
    assert "c3\tkey #0" in runner.invoke(keys_cmd.command, ["status"], env=env).output
    bad = runner.invoke(keys_cmd.command, ["rotate"], env={**env, "GRIDSHIFT_ENCRYPTION_KEYS": OLD})
    assert bad.exit_code != 0 and "'c3'" in bad.output


def test_a_required_credential_may_live_only_in_secrets(client, world):
    body = {
        "region": "de",
        "kind": "slurm",
        "config": {"mode": "rest", "rest_url": "http://127.0.0.1:9", "rest_user": "gridshift"},
        "secrets": {"rest_token": "jwt-only-in-secrets"},
    }
    resp = client.put("/api/v1/clusters/de-slurm", json=body, headers=bearer(world.tokens["ops-admin"]))
    assert resp.status_code == 200, resp.get_data(as_text=True)[:300]
    assert "jwt-only-in-secrets" not in resp.get_data(as_text=True)
