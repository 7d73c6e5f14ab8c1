"""``gridshift keys``: generate an encryption key, show which key protects each cluster, rotate to the newest key."""

from __future__ import annotations

import click

from app import crypto
from app.config import Settings
from app.db import session_scope
from app.services.keys import key_status, rotate_all


@click.group("keys")
def command() -> None:
    """Encryption keys for connector credentials (GRIDSHIFT_ENCRYPTION_KEYS, newest first)."""


@command.command("generate")
def generate() -> None:
    """Print a new Fernet key; put it first in GRIDSHIFT_ENCRYPTION_KEYS."""
    click.echo(crypto.generate_key())


def _factory(settings: Settings):  # type: ignore[no-untyped-def]
    from app.db import make_engine, make_session_factory

    return make_session_factory(make_engine(settings))


@command.command("status")
def status() -> None:
    """Which configured key (0 = newest) opens each cluster's secrets."""
    settings = Settings.from_env()
    with session_scope(_factory(settings)) as session:
        rows = key_status(session, settings.encryption_keys)
    for name, idx, has_secrets in rows:
        if not has_secrets:
            click.echo(f"{name}\tno secrets")
            continue
        click.echo(f"{name}\t" + ("NO CONFIGURED KEY OPENS IT" if idx is None else f"key #{idx}"))


@command.command("rotate")
def rotate() -> None:
    """Re-encrypt every cluster's secrets with the newest key (run after putting a new key first)."""
    settings = Settings.from_env()
    with _factory(settings)() as session:
        try:
            n = rotate_all(session, settings.encryption_keys)
        except crypto.EncryptionKeyError as exc:
            raise click.ClickException(exc.detail) from exc
    click.echo(f"re-encrypted {n} cluster or job secret(s) with the newest key")
