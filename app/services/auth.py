"""Tenants, roles and API tokens. Tokens are shown once and stored only as a SHA-256 hash."""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session, joinedload

from app.db import utcnow
from app.enums import Role
from app.errors import Conflict, FieldError, NotFound, Unauthorized, ValidationFailed
from app.models import ApiToken, Tenant

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
) -> tuple[ApiToken, str]:
    """Create a token; returns the row and the plaintext, which is never stored and never shown again."""
    prefix = secrets.token_hex(4)
    plaintext = f"{TOKEN_PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"
    now = now or utcnow()
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


def revoke_token(session: Session, tenant_id: int, token_id: int) -> ApiToken:
    row = session.get(ApiToken, token_id)
    if row is None or row.tenant_id != tenant_id:
        raise NotFound(f"token {token_id}")
    if row.revoked_at is None:
        row.revoked_at = utcnow()
    return row


def authenticate(session: Session, plaintext: str, *, now: datetime | None = None) -> Principal:
    """Resolve a bearer token; every failure answers the same way so that tokens cannot be probed."""
    now = now or utcnow()
    row = session.scalar(
        select(ApiToken).options(joinedload(ApiToken.tenant)).where(ApiToken.token_hash == hash_token(plaintext))
    )
    if row is None or row.revoked_at is not None or (row.expires_at is not None and row.expires_at <= now):
        raise Unauthorized("invalid, expired or revoked token")
    if row.last_used_at is None or now - row.last_used_at > timedelta(minutes=5):
        row.last_used_at = now  # coarse, so that reads do not write on every request
        session.commit()
    return principal_for(row)


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
