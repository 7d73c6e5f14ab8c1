"""tenant_policies: each tenant's fair-share weight, quotas and cost/energy/carbon budgets (issue 21)

Revision ID: 0009
Revises: 0004
Create Date: 2026-12-03 10:00:00

One row per tenant that the operator gave a policy; a tenant without a row weighs 1 and has no quota or budget.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import app.db

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    json_type = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
    op.create_table(
        "tenant_policies",
        sa.Column("tenant_id", sa.Integer(), sa.ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("weight", sa.Float(), nullable=False, server_default="1.0"),
        sa.Column("max_gpus", json_type, nullable=False),
        sa.Column("max_gpu_hours_per_day", sa.Float(), nullable=True),
        sa.Column("max_gpu_hours_per_month", sa.Float(), nullable=True),
        sa.Column("max_queued_jobs", sa.Integer(), nullable=True),
        sa.Column("budget_period", sa.String(16), nullable=False, server_default="month"),
        sa.Column("cost_budget", sa.Float(), nullable=True),
        sa.Column("energy_budget_kwh", sa.Float(), nullable=True),
        sa.Column("carbon_budget_kg", sa.Float(), nullable=True),
        sa.Column("updated_at", app.db.UTCDateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("tenant_policies")
