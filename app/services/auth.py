"""Tenants, roles and API tokens. Tokens are shown once and stored only as a SHA-256 hash."""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, or_, select
from sqlalchemy.orm import Session, joinedload

from app.db import utcnow
from app.enums import Role
from app.errors import Conflict, FieldError, NotFound, Unauthorized, ValidationFailed
from app.models import ApiToken, Tenant, WebSession

TOKEN_PREFIX = "gs"
_SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the tenant and role behind a token or a dashboard session."""

    tenant_id: int
    tenant_slug: str
    token_id: int
    token_name: str
    role: Role
    is_operator: bool

    @property
    def can_write(self) -> bool:
        return self.role in (Role.ADMIN, Role.MEMBER)

    @property
    def is_fleet_admin(self) -> bool:
        """An admin of the operator tenant: changes the fleet, re-plans, sees every tenant's work."""
        return self.is_operator and self.role == Role.ADMIN

    @property
    def sees_fleet(self) -> bool:
        """An admin or read-only token of the operator tenant: reads every tenant's jobs, runs, receipts and plans
        (an operator member submits work of its own and sees only that)."""
        return self.is_operator and self.role in (Role.ADMIN, Role.READONLY)

    def can_see(self, tenant_id: int) -> bool:
        """Whether this caller may read work of ``tenant_id``."""
        return tenant_id == self.tenant_id or self.sees_fleet

    @property
    def actor(self) -> str:
        return f"{self.tenant_slug}/{self.token_name}"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_tenant(session: Session, slug: str, name: str | None = None, *, is_operator: bool = False) -> Tenant:
    if not _SLUG.match(slug):
        raise ValidationFailed("bad tenant", [FieldError("slug", "lower-case letters, digits and '-' (1-63)")])
    if session.scalar(select(Tenant.id).where(Tenant.slug == slug)) is not None:
        raise Conflict(f"tenant {slug!r} already exists", [FieldError("slug", "already exists")])
    tenant = Tenant(slug=slug, name=name or slug, is_operator=is_operator)
    session.add(tenant)
    session.flush()
    return tenant


def get_tenant(session: Session, slug: str) -> Tenant:
    tenant = session.scalar(select(Tenant).where(Tenant.slug == slug))
    if tenant is None:
        raise NotFound(f"tenant {slug!r}")
    return tenant


def issue_token(
    session: Session,
    tenant: Tenant,
    name: str,
    role: Role = Role.MEMBER,
    *,
    expires_in: timedelta | None = None,
    now: datetime | None = None,
    max_live: int | None = None,
) -> tuple[ApiToken, str]:
    """Create a token; returns the row and the plaintext, which is never stored and never shown again.

    With ``max_live``, a tenant that already holds that many live (unrevoked, unexpired) tokens gets a Conflict:
    every token has its own request budget, so minting tokens would multiply a tenant's share of the service.
    """
    now = now or utcnow()
    if max_live is not None and count_live_tokens(session, tenant.id, now) >= max_live:
        raise Conflict(
            f"tenant {tenant.slug!r} already holds {max_live} live tokens, the most it may; revoke one first",
            [FieldError("name", f"at most {max_live} live tokens per tenant")],
        )
    prefix = secrets.token_hex(4)
    plaintext = f"{TOKEN_PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"
    row = ApiToken(
        tenant_id=tenant.id,
        name=name,
        prefix=prefix,
        token_hash=hash_token(plaintext),
        role=Role(role),
        created_at=now,
        expires_at=now + expires_in if expires_in else None,
    )
    session.add(row)
    session.flush()
    return row, plaintext


def count_live_tokens(session: Session, tenant_id: int, now: datetime) -> int:
    """How many of a tenant's tokens are neither revoked nor expired."""
    return session.scalar(
        select(func.count(ApiToken.id)).where(
            ApiToken.tenant_id == tenant_id,
            ApiToken.revoked_at.is_(None),
            or_(ApiToken.expires_at.is_(None), ApiToken.expires_at > now),
        )
    ) or 0


def list_tokens(session: Session, tenant_id: int) -> list[ApiToken]:
    """A tenant's tokens, oldest first."""
    return list(session.scalars(select(ApiToken).where(ApiToken.tenant_id == tenant_id).order_by(ApiToken.id)))


def revoke_token(session: Session, tenant_id: int, token_id: int) -> ApiToken:
    row = session.get(ApiToken, token_id)
    if row is None or row.tenant_id != tenant_id:
        raise NotFound(f"token {token_id}")
    if row.revoked_at is None:
        row.revoked_at = utcnow()
    return row


class PrincipalCache:
    """Bearer tokens resolved in the last ``ttl_s`` seconds, so that a busy token costs no database round trip.

    Every API request authenticates; at a few hundred requests per second the token lookup was the largest single
    cost of a read. Only valid tokens are cached, keyed by their hash. A token's own expiry is honoured to the
    second, cached or not; a revocation made through this process takes effect at once (``forget``), one made
    elsewhere (another worker, the CLI) within ``ttl_s`` seconds. ``ttl_s = 0`` turns the cache off.
    """

    def __init__(self, ttl_s: float, max_entries: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._entries: dict[str, tuple[Principal, datetime | None, float]] = {}
        self._lock = threading.Lock()

    def get(self, token_hash: str, now: datetime) -> Principal | None:
        entry = self._entries.get(token_hash)
        if entry is None:
            return None
        principal, expires_at, fresh_until = entry
        if time.monotonic() >= fresh_until or (expires_at is not None and expires_at <= now):
            with self._lock:
                self._entries.pop(token_hash, None)
            return None
        return principal

    def put(self, token_hash: str, principal: Principal, expires_at: datetime | None) -> None:
        if self.ttl_s <= 0:
            return
        with self._lock:
            if len(self._entries) >= self.max_entries:
                self._entries.clear()  # rare: more distinct live tokens than entries; start over
            self._entries[token_hash] = (principal, expires_at, time.monotonic() + self.ttl_s)

    def forget(self, token_id: int) -> None:
        """Drop a token (revoked, or its role changed) so that this process re-reads it on its next use."""
        with self._lock:
            for key in [k for k, (p, _e, _t) in self._entries.items() if p.token_id == token_id]:
                del self._entries[key]


def authenticate(
    session: Session, plaintext: str, *, now: datetime | None = None, cache: PrincipalCache | None = None
) -> Principal:
    """Resolve a bearer token; every failure answers the same way so that tokens cannot be probed."""
    now = now or utcnow()
    token_hash = hash_token(plaintext)
    if cache is not None:
        cached = cache.get(token_hash, now)
        if cached is not None:
            return cached
    row = session.scalar(
        select(ApiToken).options(joinedload(ApiToken.tenant)).where(ApiToken.token_hash == token_hash)
    )
    if row is None or row.revoked_at is not None or (row.expires_at is not None and row.expires_at <= now):
        raise Unauthorized("invalid, expired or revoked token")
    if row.last_used_at is None or now - row.last_used_at > timedelta(minutes=5):
        row.last_used_at = now  # coarse, so that reads do not write on every request
        session.commit()
    principal = principal_for(row)
    if cache is not None:
        cache.put(token_hash, principal, row.expires_at)
    return principal


def principal_for(row: ApiToken) -> Principal:
    return Principal(
        tenant_id=row.tenant_id,
        tenant_slug=row.tenant.slug,
        token_id=row.id,
        token_name=row.name,
        role=Role(row.role),
        is_operator=row.tenant.is_operator,
    )


def load_principal(session: Session, token_id: int, *, now: datetime | None = None) -> Principal:
    """For dashboard sessions, which remember the token id rather than the secret."""
    now = now or utcnow()
    row = session.get(ApiToken, token_id)
    if row is None or row.revoked_at is not None or (row.expires_at is not None and row.expires_at <= now):
        raise Unauthorized("session expired or token revoked")
    return principal_for(row)


# --- dashboard sessions, kept server side so that signing out ends them ------------------------------------------

#: A dashboard session lasts at most this long, however it is replayed [s].
WEB_SESSION_MAX_AGE_S = 12 * 3600


def open_web_session(session: Session, token_id: int, *, now: datetime | None = None) -> str:
    """Record a new dashboard session of ``token_id``; returns its id for the cookie (only its hash is stored)."""
    now = now or utcnow()
    session.execute(delete(WebSession).where(
        WebSession.token_id == token_id, WebSession.created_at < now - timedelta(seconds=WEB_SESSION_MAX_AGE_S)))
    sid = secrets.token_urlsafe(32)
    session.add(WebSession(sid_hash=hash_token(sid), token_id=token_id, created_at=now))
    session.commit()
    return sid


def web_session_principal(session: Session, sid: object, token_id: object, *, now: datetime | None = None) -> Principal:
    """The principal of a live dashboard session: its row exists (not signed out), is young enough and belongs to
    ``token_id``, and that token is neither revoked nor expired. Anything else is Unauthorized."""
    now = now or utcnow()
    if not isinstance(sid, str) or not sid or not isinstance(token_id, int):
        raise Unauthorized("signed out or session expired")
    row = session.scalar(select(WebSession).where(WebSession.sid_hash == hash_token(sid)))
    if row is None or row.token_id != token_id or row.created_at <= now - timedelta(seconds=WEB_SESSION_MAX_AGE_S):
        raise Unauthorized("signed out or session expired")
    return load_principal(session, token_id, now=now)


def end_web_session(session: Session, sid: object) -> None:
    """Sign out: the session's row goes, so a copy of its cookie is worth nothing."""
    if isinstance(sid, str) and sid:
        session.execute(delete(WebSession).where(WebSession.sid_hash == hash_token(sid)))
        session.commit()
def local_principal(session: Session, tenant: str | None = None) -> Principal:
    """Who the ``gridshift`` command acts as on this host (it holds the database URL, so it is trusted): an admin of
    ``tenant``, or without one an admin of the operator tenant, who sees every tenant's work."""
    row: Tenant | None
    if tenant is not None:
        row = get_tenant(session, tenant)
    else:
        row = session.scalar(select(Tenant).where(Tenant.is_operator.is_(True)).order_by(Tenant.id).limit(1))
    if row is None:
        return Principal(0, "local", 0, "cli", Role.ADMIN, True)
    return Principal(row.id, row.slug, 0, "cli", Role.ADMIN, tenant is None or row.is_operator)
