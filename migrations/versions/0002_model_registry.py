"""Model registry: a description per model version, tags, and aliases per model name.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-25 15:22:14.040129
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "model_aliases",
        sa.Column("tenant_id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("alias", sa.String(length=64), nullable=False),
        sa.Column("model_id", sa.String(length=36), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("tenant_id", "name", "alias"),
    )
    op.create_index(op.f("ix_model_aliases_model_id"), "model_aliases", ["model_id"],
                    unique=False)
    op.create_table(
        "model_tags",
        sa.Column("model_id", sa.String(length=36), nullable=False),
        sa.Column("tag", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("model_id", "tag"),
    )
    op.create_index(op.f("ix_model_tags_tag"), "model_tags", ["tag"], unique=False)
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.add_column(sa.Column("description", sa.Text(), server_default="",
                                      nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.drop_column("description")
    op.drop_index(op.f("ix_model_tags_tag"), table_name="model_tags")
    op.drop_table("model_tags")
    op.drop_index(op.f("ix_model_aliases_model_id"), table_name="model_aliases")
    op.drop_table("model_aliases")
