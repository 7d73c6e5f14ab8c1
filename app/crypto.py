"""Encryption at rest of connector credentials (cluster tokens, passwords, kubeconfigs).

Keys come from ``GRIDSHIFT_ENCRYPTION_KEYS``: a comma-separated list of Fernet keys, **newest first**. The newest key
encrypts; every listed key decrypts, so a key can be rotated without downtime:

1. generate a key (``gridshift keys generate``) and put it first in ``GRIDSHIFT_ENCRYPTION_KEYS``, keeping the old
   ones after it; restart web, worker and beat;
2. run ``gridshift keys rotate``, which re-encrypts every stored secret with the newest key;
3. drop the old key from the list and restart again.

Fernet (AES-128-CBC with HMAC-SHA256, from the ``cryptography`` package) authenticates what it decrypts, so a
tampered or foreign ciphertext is an error, never garbage.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from app.errors import FieldError, ServiceError


class EncryptionKeyError(ServiceError):
    """No usable encryption key, or a ciphertext that none of the keys can open."""

    def __init__(self, detail: str, field: str = "GRIDSHIFT_ENCRYPTION_KEYS") -> None:
        super().__init__(detail, [FieldError(field, detail)], 500, "Encryption key problem")


def generate_key() -> str:
    """A fresh Fernet key (URL-safe base64 of 32 random bytes)."""
    return Fernet.generate_key().decode()


def _fernets(keys: Sequence[str]) -> list[Fernet]:
    if not keys:
        raise EncryptionKeyError(
            "no encryption key configured; set GRIDSHIFT_ENCRYPTION_KEYS (gridshift keys generate)"
        )
    out = []
    for i, key in enumerate(keys):
        try:
            out.append(Fernet(key.encode() if isinstance(key, str) else key))
        except (ValueError, TypeError) as exc:
            raise EncryptionKeyError(
                f"key #{i + 1} is not a Fernet key (32 url-safe base64-encoded bytes)"
            ) from exc
    return out


def keyring(keys: Sequence[str]) -> MultiFernet:
    """A MultiFernet over ``keys`` (newest first): encrypts with the first, decrypts with any."""
    return MultiFernet(_fernets(keys))


def encrypt_json(keys: Sequence[str], value: dict[str, Any]) -> str:
    """Encrypt a JSON object with the newest key; returns the Fernet token as text."""
    return keyring(keys).encrypt(json.dumps(value, sort_keys=True).encode()).decode()


def decrypt_json(keys: Sequence[str], token: str) -> dict[str, Any]:
    """Decrypt a token made by :func:`encrypt_json` with any of ``keys``."""
    try:
        raw = keyring(keys).decrypt(token.encode())
    except InvalidToken as exc:
        raise EncryptionKeyError(
            "stored secrets cannot be decrypted with any configured key", "secrets"
        ) from exc
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise EncryptionKeyError("stored secrets are not a JSON object", "secrets")
    return value


def rotate(keys: Sequence[str], token: str) -> str:
    """Re-encrypt ``token`` with the newest key (its content is unchanged)."""
    try:
        return keyring(keys).rotate(token.encode()).decode()
    except InvalidToken as exc:
        raise EncryptionKeyError(
            "stored secrets cannot be decrypted with any configured key", "secrets"
        ) from exc


def key_index(keys: Sequence[str], token: str) -> int | None:
    """Which of ``keys`` opens ``token`` (0 is the newest), or None when none does."""
    for i, f in enumerate(_fernets(keys)):
        try:
            f.decrypt(token.encode())
            return i
        except InvalidToken:
            continue
    return None
