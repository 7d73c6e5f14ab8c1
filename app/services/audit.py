"""Audit log: who submitted, cancelled, re-planned or changed a region or budget."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.models import AuditEntry
from app.services.auth import Principal

#: Audited fleet changes that can make a plan wrong: GPUs, power budgets (demand-response windows), PUE, hardware,
#: clusters, and a tenant's fair-share weight, quotas or budgets.
FLEET_ACTIONS = (
    "region.put", "region.budget_override", "inventory.put", "hardware.put", "cluster.put", "tenant.policy_put",
)


def last_entry(session: Session) -> int:
    """Id of the newest audit entry (0: none); a plan records it as the state of the fleet it read."""
    return int(session.scalar(select(func.max(AuditEntry.id))) or 0)


def fleet_changed_since(session: Session, entry_id: int) -> bool:
    """True when an audited fleet change is newer than entry ``entry_id``.

    A range scan of the primary key over the entries since then (a minute's or an hour's worth), whatever the size
    of the log.
    """
    q = select(AuditEntry.id).where(AuditEntry.id > entry_id, AuditEntry.action.in_(FLEET_ACTIONS))
    return session.scalar(q.limit(1)) is not None


def record(
    session: Session,
    principal: Principal | None,
    action: str,
    target_type: str,
    target_id: object = None,
    **details: Any,
) -> None:
    """Add an audit entry to the caller's unit of work (committed with the change it describes)."""
    session.add(
        AuditEntry(
            tenant_id=principal.tenant_id if principal else None,
            token_id=(principal.token_id or None) if principal else None,
            actor=principal.actor if principal else "system",
            action=action,
            target_type=target_type,
            target_id=None if target_id is None else str(target_id),
            details=details,
        )
    )
