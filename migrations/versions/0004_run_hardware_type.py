"""runs.hardware_type_id: the hardware a run was placed on, as a column instead of inside its run key

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02 18:20:00

Runs dispatched before this revision carry their hardware only in the run key (``gs-<job>-<attempt>-<hw>-<tail>``,
the hardware code lower-cased, letters and digits only, at most 16 characters). The upgrade fills the column from
the run's assignment, else reads the key once here, so those runs stay readable after their plan was pruned.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _key_code(code: str) -> str:
    """A hardware code as run keys wrote it (the old app.services.dispatch_claim.new_run_key)."""
    return "".join(c for c in code.lower() if c.isalnum())[:16] or "hw"


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("hardware_type_id", sa.Integer(), nullable=True))
        batch.create_foreign_key("fk_runs_hardware_type_id", "hardware_types", ["hardware_type_id"], ["id"],
                                 ondelete="SET NULL")
    conn = op.get_bind()
    conn.execute(sa.text(
        "UPDATE runs SET hardware_type_id = (SELECT a.hardware_type_id FROM assignments a WHERE a.id = runs.assignment_id)"
        " WHERE assignment_id IS NOT NULL"
    ))
    by_key_code = {_key_code(code): hw_id for hw_id, code in conn.execute(sa.text("SELECT id, code FROM hardware_types"))}
    for run_id, run_key in list(conn.execute(sa.text("SELECT id, run_key FROM runs WHERE hardware_type_id IS NULL"))):
        parts = run_key.split("-")
        hw_id = by_key_code.get(parts[3]) if len(parts) == 5 and parts[0] == "gs" else None
        if hw_id is not None:
            conn.execute(sa.text("UPDATE runs SET hardware_type_id = :hw WHERE id = :id"), {"hw": hw_id, "id": run_id})


def downgrade() -> None:
    # Run keys still name the hardware, which is how the older code reads it.
    with op.batch_alter_table("runs") as batch:
        batch.drop_constraint("fk_runs_hardware_type_id", type_="foreignkey")
        batch.drop_column("hardware_type_id")
