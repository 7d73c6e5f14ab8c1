"""Audit log: who submitted, cancelled, re-planned or changed a region or budget."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.models import AuditEntry
from app.services.auth import Principal

#: Audited fleet changes that can make a plan wrong: GPUs, power budgets (demand-response windows), PUE, hardware,
#: clusters.
FLEET_ACTIONS = ("region.put", "region.budget_override", "inventory.put", "hardware.put", "cluster.put")


def last_fleet_change(session: Session) -> int:
    """Id of the newest audited fleet change (0: none), which a plan records as the fleet it saw."""
    return int(session.scalar(select(func.max(AuditEntry.id)).where(AuditEntry.action.in_(FLEET_ACTIONS))) or 0)


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
