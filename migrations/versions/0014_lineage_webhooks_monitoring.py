"""Lineage, webhooks and margin monitoring (issue 37): the datasets' content hash, webhook
endpoints and their delivery outbox, the jobs' announcement mark, and the served margins
per model and window.

Existing datasets keep a NULL content hash until ``sodm backfill-hashes`` computes it from
their stored files (reading every dataset is no job for a migration). Jobs that ended before
this revision are marked announced, so no webhook fires for the past.

Revision ID: 0014
Revises: 0012
Create Date: 2026-12-01 10:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0014"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSONT = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def upgrade() -> None:
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.add_column(sa.Column("content_sha256", sa.String(64), nullable=True))
        batch_op.create_index("ix_datasets_tenant_content", ["tenant_id", "content_sha256"],
                              unique=False)
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("announced_at", sa.DateTime(timezone=True),
                                      nullable=True))
        batch_op.create_index(batch_op.f("ix_jobs_announced_at"), ["announced_at"],
                              unique=False)
    jobs = sa.table("jobs", sa.column("state", sa.String), sa.column("finished_at"),
                    sa.column("updated_at"), sa.column("announced_at"))
    op.execute(jobs.update().where(jobs.c.state.in_(TERMINAL))
               .values(announced_at=sa.func.coalesce(jobs.c.finished_at, jobs.c.updated_at)))

    op.create_table(
        "webhooks",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("tenant_id", sa.String(36), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("events", JSONT, nullable=False),
        sa.Column("secret", sa.String(128), nullable=False),
        sa.Column("description", sa.Text(), server_default="", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_webhooks_tenant_created", "webhooks", ["tenant_id", "created_at", "id"],
                    unique=False)
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("webhook_id", sa.String(36), nullable=False),
        sa.Column("event", sa.String(64), nullable=False),
        sa.Column("payload", JSONT, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["webhook_id"], ["webhooks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_webhook_deliveries_due", "webhook_deliveries",
                    ["status", "next_attempt_at"], unique=False)
    op.create_index("ix_webhook_deliveries_hook_created", "webhook_deliveries",
                    ["webhook_id", "created_at", "id"], unique=False)

    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.add_column(sa.Column("margin_reference", JSONT, nullable=True))
    op.create_table(
        "margin_windows",
        sa.Column("model_id", sa.String(36), nullable=False),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("source", sa.String(255), nullable=False),
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.Column("total", sa.Float(), nullable=False),
        sa.Column("total_sq", sa.Float(), nullable=False),
        sa.Column("inside", sa.BigInteger(), nullable=False),
        sa.Column("counts", JSONT, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("model_id", "window_start", "source"),
    )
    op.create_index(op.f("ix_margin_windows_window_start"), "margin_windows", ["window_start"],
                    unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_margin_windows_window_start"), table_name="margin_windows")
    op.drop_table("margin_windows")
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.drop_column("margin_reference")
    op.drop_index("ix_webhook_deliveries_hook_created", table_name="webhook_deliveries")
    op.drop_index("ix_webhook_deliveries_due", table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
    op.drop_index("ix_webhooks_tenant_created", table_name="webhooks")
    op.drop_table("webhooks")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_jobs_announced_at"))
        batch_op.drop_column("announced_at")
    with op.batch_alter_table("datasets", schema=None) as batch_op:
        batch_op.drop_index("ix_datasets_tenant_content")
        batch_op.drop_column("content_sha256")
