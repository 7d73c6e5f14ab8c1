"""simulations: what-if replays of a past period asked for through the API (POST /api/v1/simulations answers 202)

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03 14:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import app.db

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "simulations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("created_at", app.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("requested_by", sa.String(length=200), nullable=True),
        sa.Column("state", sa.Enum("queued", "running", "succeeded", "failed", name="simulation_state",
                                   native_enum=False, length=24), nullable=False),
        sa.Column("period_start", app.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("days", sa.Integer(), nullable=False),
        sa.Column("days_done", sa.Integer(), nullable=False),
        sa.Column("scenario", JSON, nullable=False),
        sa.Column("started_at", app.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("finished_at", app.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("result", JSON, nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("simulations") as batch:
        batch.create_index("ix_simulations_created_at", ["created_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("simulations") as batch:
        batch.drop_index("ix_simulations_created_at")
    op.drop_table("simulations")
