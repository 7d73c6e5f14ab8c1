"""plan_runs: plans asked for through the API, run by a worker and polled (POST /api/v1/plans answers 202)

Revision ID: 0006
Revises: 0004
Create Date: 2026-12-03 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import app.db

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "plan_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", app.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("trigger", sa.String(length=32), nullable=False),
        sa.Column("objective", sa.String(length=32), nullable=True),
        sa.Column("requested_by", sa.String(length=200), nullable=True),
        sa.Column("state", sa.Enum("queued", "running", "succeeded", "failed", name="plan_run_state",
                                   native_enum=False, length=24), nullable=False),
        sa.Column("phase", sa.String(length=32), nullable=False),
        sa.Column("progress", sa.Float(), nullable=False),
        sa.Column("started_at", app.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("finished_at", app.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("plan_id", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("summary", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
                  nullable=True),
        sa.ForeignKeyConstraint(["plan_id"], ["plans.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("plan_runs") as batch:
        batch.create_index("ix_plan_runs_created_at", ["created_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("plan_runs") as batch:
        batch.drop_index("ix_plan_runs_created_at")
    op.drop_table("plan_runs")
