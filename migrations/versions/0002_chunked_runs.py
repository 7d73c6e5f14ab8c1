"""runs per chunk of an interruptible job: runs.chunk_index, jobs.resume_at, job state 'paused'

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 20:50:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import app.db

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A chunked assignment runs as one run per chunk; a job rests in state 'paused' between chunks until resume_at.
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("chunk_index", sa.Integer(), nullable=True))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("resume_at", app.db.UTCDateTime(timezone=True), nullable=True))


def downgrade() -> None:
    # The older schema knows no 'paused' state: such a job goes back to planning, which plans its whole run again.
    op.execute(
        "UPDATE jobs SET state = 'pending', state_reason = 'schema downgrade: chunked run interrupted' "
        "WHERE state = 'paused'"
    )
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("resume_at")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("chunk_index")
