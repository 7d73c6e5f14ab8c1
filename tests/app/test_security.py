"""Security regressions: key rotation, rate limits."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from app import crypto
from app.commands import keys as keys_cmd
from app.models import Cluster
from app.services import fleet


@pytest.mark.parametrize("change", [{"token": "new-credential"}, None])
def test_a_credential_changed_during_key_rotation_is_kept(app, session, settings, small_fleet, monkeypatch,
                                                           change):  # fmt: skip
    old_keys = settings.encryption_keys
    new_keys = (crypto.generate_key(), *old_keys)
    fleet.upsert_cluster(session, "c1", "de", "local", {})
    fleet.set_cluster_secrets(session, "c1", {"token": "old-credential"}, old_keys)
    session.commit()
    real_rotate, changed = crypto.rotate, []

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
