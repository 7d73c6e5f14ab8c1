"""plan retention: plans.pruned_at, and an index on runs.assignment_id

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02 06:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import app.db

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # The retention clean-up deletes superseded plans' assignment rows and records when on the plan it keeps.
    with op.batch_alter_table("plans") as batch:
        batch.add_column(sa.Column("pruned_at", app.db.UTCDateTime(timezone=True), nullable=True))
    # Deleting an assignment makes the database look for runs that reference it (ON DELETE SET NULL); without an
    # index that is a scan of every run per deleted row on PostgreSQL.
    op.create_index("ix_runs_assignment", "runs", ["assignment_id"])


def downgrade() -> None:
    op.drop_index("ix_runs_assignment", table_name="runs")
    with op.batch_alter_table("plans") as batch:
        batch.drop_column("pruned_at")
