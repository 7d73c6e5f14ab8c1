"""Run isolation: server-side dashboard sessions, and jobs' secret env encrypted at rest

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 10:10:00

``web_sessions`` holds one row per signed-in dashboard session (the cookie carries only its random id), so that
signing out ends it on the server. ``jobs.secret_env_encrypted`` holds a job's secret variables as a Fernet token.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import app.db

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "web_sessions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("sid_hash", sa.String(length=64), nullable=False),
        sa.Column("token_id", sa.Integer(), nullable=False),
        sa.Column("created_at", app.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["token_id"], ["api_tokens.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("sid_hash"),
    )
    with op.batch_alter_table("web_sessions") as batch:
        batch.create_index(batch.f("ix_web_sessions_token_id"), ["token_id"], unique=False)
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("secret_env_encrypted", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("secret_env_encrypted")
    with op.batch_alter_table("web_sessions") as batch:
        batch.drop_index(batch.f("ix_web_sessions_token_id"))
    op.drop_table("web_sessions")
