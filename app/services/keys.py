"""Encryption keys of connector credentials: which configured key opens each cluster's secrets, and rotation."""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app import crypto
from app.models import Cluster, Job


def key_status(session: Session, keys: tuple[str, ...]) -> list[tuple[str, int | None, bool]]:
    """``(cluster name, index of the key that opens its secrets or None, has secrets)``, by name."""
    out: list[tuple[str, int | None, bool]] = []
    for row in session.scalars(select(Cluster).order_by(Cluster.name)):
        if row.secrets_encrypted is None:
            out.append((row.name, None, False))
        else:
            out.append((row.name, crypto.key_index(keys, row.secrets_encrypted), True))
    return out


def rotate_all(session: Session, keys: tuple[str, ...]) -> int:
    """Re-encrypt every cluster's stored secrets and every job's secret env with the newest key, all or none; returns
    how many.

    Each row is written only if its secrets are still the ones that were rotated (a conditional UPDATE): a
    credential an operator changes or clears meanwhile is read again and rotated, never overwritten with the old one.

    Raises
    ------
    app.crypto.EncryptionKeyError
        When a stored secret opens with none of ``keys`` (nothing is changed then; the message names the cluster).
    """
    rows = session.execute(
        select(Cluster.id, Cluster.name, Cluster.secrets_encrypted)
        .where(Cluster.secrets_encrypted.is_not(None))
        .order_by(Cluster.name)
    ).all()
    pending = {row.id: (row.name, row.secrets_encrypted or "") for row in rows}
    done = 0
    try:
        for _attempt in range(5):
            rotated = {cid: (name, old, _rotated(keys, name, old)) for cid, (name, old) in pending.items()}
            changed = {}
            for cid, (name, old, new) in rotated.items():
                result = session.execute(
                    update(Cluster)
                    .where(Cluster.id == cid, Cluster.secrets_encrypted == old)
                    .values(secrets_encrypted=new)
                    .execution_options(synchronize_session=False)
                )
                if result.rowcount == 1:  # type: ignore[attr-defined]
                    done += 1
                    continue
                current = session.scalar(select(Cluster.secrets_encrypted).where(Cluster.id == cid))
                if current is not None:  # changed meanwhile: rotate what is stored now
                    changed[cid] = (name, current)
            pending = changed
            if not pending:
                break
        else:
            names = ", ".join(sorted(name for name, _old in pending.values()))
            raise crypto.EncryptionKeyError(
                f"the secrets of {names} kept changing during the rotation; nothing was rotated, run it again",
                "clusters",
            )
        done += _rotate_job_secrets(session, keys)
    except BaseException:
        session.rollback()
        raise
    session.commit()
    session.expire_all()
    return done


def _rotate_job_secrets(session: Session, keys: tuple[str, ...]) -> int:
    """Re-encrypt every job's secret env with the newest key (in the caller's transaction); returns how many.
    A job's secret env is written once, at submission, so no conditional update is needed."""
    done = 0
    rows = session.execute(select(Job.id, Job.secret_env_encrypted).where(Job.secret_env_encrypted.is_not(None)))
    for job_id, token in rows.all():
        try:
            new = crypto.rotate(keys, token or "")
        except crypto.EncryptionKeyError as exc:
            raise crypto.EncryptionKeyError(
                f"job {job_id}: its secret env opens with none of the configured keys; nothing was rotated",
                f"jobs.{job_id}",
            ) from exc
        session.execute(update(Job).where(Job.id == job_id).values(secret_env_encrypted=new)
                        .execution_options(synchronize_session=False))  # fmt: skip
        done += 1
    return done


def _rotated(keys: tuple[str, ...], name: str, token: str) -> str:
    try:
        return crypto.rotate(keys, token)
    except crypto.EncryptionKeyError as exc:
        raise crypto.EncryptionKeyError(
            f"cluster {name!r}: stored secrets open with none of the configured keys; nothing was rotated",
            f"clusters.{name}",
        ) from exc
