"""``gridshift keys``: generate an encryption key, show which key protects each cluster, rotate to the newest key."""

from __future__ import annotations

import click
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app import crypto
from app.config import Settings
from app.models import Cluster, Job


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


@click.group("keys")
def command() -> None:
    """Encryption keys for connector credentials (GRIDSHIFT_ENCRYPTION_KEYS, newest first)."""


@command.command("generate")
def generate() -> None:
    """Print a new Fernet key; put it first in GRIDSHIFT_ENCRYPTION_KEYS."""
    click.echo(crypto.generate_key())


def _session(settings: Settings) -> Session:
    from app.db import make_engine, make_session_factory

    return make_session_factory(make_engine(settings))()


@command.command("status")
def status() -> None:
    """Which configured key (0 = newest) opens each cluster's secrets."""
    settings = Settings.from_env()
    with _session(settings) as session:
        for row in session.scalars(select(Cluster).order_by(Cluster.name)):
            if row.secrets_encrypted is None:
                click.echo(f"{row.name}\tno secrets")
                continue
            idx = crypto.key_index(settings.encryption_keys, row.secrets_encrypted)
            click.echo(f"{row.name}\t" + ("NO CONFIGURED KEY OPENS IT" if idx is None else f"key #{idx}"))


@command.command("rotate")
def rotate() -> None:
    """Re-encrypt every cluster's secrets with the newest key (run after putting a new key first)."""
    settings = Settings.from_env()
    with _session(settings) as session:
        try:
            n = rotate_all(session, settings.encryption_keys)
        except crypto.EncryptionKeyError as exc:
            raise click.ClickException(exc.detail) from exc
    click.echo(f"re-encrypted {n} cluster or job secret(s) with the newest key")
