"""market_series.resolution_minutes: how long each point holds (60 for hourly, 15 for quarter-hourly products)

Revision ID: 0008
Revises: 0006
Create Date: 2026-12-03 10:00:00

Every point stored before this revision came from hourly data (the harmonized files, hourly imports), so the column
starts at 60 for them. A point holds its value over [ts, ts + resolution_minutes); the planner reads a slot's value
from the point that holds the slot's start (app.services.series.slot_values).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("market_series") as batch:
        batch.add_column(sa.Column("resolution_minutes", sa.Integer(), nullable=False, server_default="60"))


def downgrade() -> None:
    with op.batch_alter_table("market_series") as batch:
        batch.drop_column("resolution_minutes")
