"""The collection: an index of stored WARC records and an outbox of change events.

Revision ID: 0002_collection
Revises: 0004_frontier_control
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002_collection"
down_revision = "0004_frontier_control"
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "stored_records",
        sa.Column("id", sa.BigInteger(), primary_key=True, autoincrement=True),
        sa.Column(
            "url_id", sa.BigInteger(), sa.ForeignKey("urls.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("fetched_at", TZ, nullable=False),
        sa.Column("record_type", sa.Text(), nullable=False),
        sa.Column("status", sa.SmallInteger(), nullable=True),
        sa.Column("warc_file", sa.Text(), nullable=False),
        sa.Column("warc_offset", sa.BigInteger(), nullable=False),
        sa.Column("warc_length", sa.BigInteger(), nullable=False),
        sa.Column("record_id", sa.Text(), nullable=False),
        sa.Column("payload_digest", sa.Text(), nullable=False),
        sa.Column("payload_bytes", sa.Integer(), nullable=False),
        sa.Column("changed", sa.Boolean(), nullable=True),
        sa.Column("refers_to", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "record_type IN ('response', 'revisit')", name="stored_records_type_check"
        ),
    )
    op.create_index(
        "stored_records_url_fetched_idx", "stored_records", ["url_id", "fetched_at"],
        unique=True,
    )
    op.create_index(
        "stored_records_url_response_idx", "stored_records", ["url_id", "fetched_at"],
        postgresql_where=sa.text("record_type = 'response'"),
    )
    op.create_index("stored_records_file_idx", "stored_records", ["warc_file"])

    op.create_table(
        "change_events",
        sa.Column("id", sa.BigInteger(), primary_key=True, autoincrement=True),
        sa.Column(
            "url_id", sa.BigInteger(), sa.ForeignKey("urls.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("fetched_at", TZ, nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("payload", postgresql.JSONB(), nullable=False),
        sa.Column("created_at", TZ, nullable=False, server_default=sa.text("now()")),
        sa.Column("delivered_at", TZ, nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("next_attempt_at", TZ, nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.CheckConstraint("kind IN ('changed', 'gone', 'back')", name="change_events_kind_check"),
    )
    op.create_index(
        "change_events_url_fetched_idx", "change_events", ["url_id", "fetched_at"], unique=True
    )
    op.create_index("change_events_fetched_idx", "change_events", ["fetched_at", "id"])
    op.create_index(
        "change_events_pending_idx", "change_events", ["id"],
        postgresql_where=sa.text("delivered_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_table("change_events")
    op.drop_table("stored_records")
