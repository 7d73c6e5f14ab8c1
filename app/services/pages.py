"""Opaque page cursors of the list endpoints (jobs, plans): a row id the client hands back unchanged."""

from __future__ import annotations

import base64

from app.errors import FieldError, ValidationFailed


def encode_cursor(last_id: int, kind: str = "j") -> str:
    """An opaque cursor after row ``last_id`` of a list (``kind``: j = jobs, p = plans)."""
    return base64.urlsafe_b64encode(f"{kind}{last_id}".encode()).decode().rstrip("=")


MAX_ID = 2**31 - 1  # ids are 32-bit integers in the database


def decode_cursor(cursor: str, kind: str = "j") -> int:
    """The row id in ``cursor``; anything this API could not have returned is a 422 naming the cursor."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        if not raw.startswith(kind):
            raise ValueError
        last_id = int(raw[len(kind):])
        if not 1 <= last_id <= MAX_ID:  # a larger number overflows the database's integer
            raise ValueError
        return last_id
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValidationFailed("bad cursor", [FieldError("cursor", "not a cursor this API returned")]) from exc
