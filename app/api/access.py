"""Role checks shared by the blueprints."""

from __future__ import annotations

from app.api import principal
from app.errors import Forbidden
from app.services.auth import Principal


def writer() -> Principal:
    p = principal()
    if not p.can_write:
        raise Forbidden("this token is read-only")
    return p


def operator() -> Principal:
    p = principal()
    if not p.is_fleet_admin:
        raise Forbidden("fleet administration needs an admin token of the operator tenant")
    return p
