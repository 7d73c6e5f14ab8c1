"""Role checks shared by the blueprints, and ``first``, which runs one before the request body is parsed."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

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


def first(check: Callable[[], Principal]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Run the role ``check`` before any per-item work: place it right under ``@blp.route``, above
    ``@blp.arguments``, so that a token without the role gets 403 whatever body it sends (a read-only token's
    10,000-job batch is refused before one job is parsed or validated)."""

    def decorate(view: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            check()
            return view(*args, **kwargs)

        return wrapper

    return decorate
