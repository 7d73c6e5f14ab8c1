"""``gridshift keys``: generate an encryption key, show which key protects each cluster, rotate to the newest key."""

from __future__ import annotations

import click
from sqlalchemy import select
from sqlalchemy.orm import Session

from app import crypto
from app.config import Settings
from app.models import Cluster


def rotate_all(session: Session, keys: tuple[str, ...]) -> int:
    """Re-encrypt every cluster's stored secrets with the newest key, all or none; returns how many.

    Raises
    ------
    app.crypto.EncryptionKeyError
        When a stored secret opens with none of ``keys`` (nothing is changed then; the message names the cluster).
    """
    rows = list(
        session.scalars(select(Cluster).where(Cluster.secrets_encrypted.is_not(None)).order_by(Cluster.name))
    )
    new_tokens = {}
    for row in rows:
        try:
            new_tokens[row.id] = crypto.rotate(keys, row.secrets_encrypted or "")
        except crypto.EncryptionKeyError as exc:
            raise crypto.EncryptionKeyError(
                f"cluster {row.name!r}: stored secrets open with none of the configured keys; nothing was rotated",
                f"clusters.{row.name}",
            ) from exc
    for row in rows:
        row.secrets_encrypted = new_tokens[row.id]
    session.commit()
    return len(rows)


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
    click.echo(f"re-encrypted the secrets of {n} cluster(s) with the newest key")
