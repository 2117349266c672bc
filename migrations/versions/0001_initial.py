"""Initial schema: hosts, urls (the frontier), observations, planner state.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "hosts",
        sa.Column("id", sa.BigInteger(), primary_key=True, autoincrement=True),
        sa.Column("origin", sa.Text(), nullable=False, unique=True),
        sa.Column("next_due_at", TZ, nullable=True),
        sa.Column("next_request_at", TZ, nullable=False, server_default=sa.text("'-infinity'")),
        sa.Column("crawl_delay_seconds", sa.Float(), nullable=True),
        sa.Column("lease_owner", sa.Text(), nullable=True),
        sa.Column("lease_expires_at", TZ, nullable=True),
        sa.Column(
            "consecutive_failures", sa.Integer(), nullable=False, server_default=sa.text("0")
        ),
        sa.Column("backoff_until", TZ, nullable=True),
        sa.Column("robots_body", sa.Text(), nullable=True),
        sa.Column("robots_status", sa.SmallInteger(), nullable=True),
        sa.Column("robots_fetched_at", TZ, nullable=True),
        sa.Column("robots_good_at", TZ, nullable=True),
        sa.Column("robots_expires_at", TZ, nullable=True),
        sa.Column("robots_unreachable_since", TZ, nullable=True),
        sa.Column("created_at", TZ, nullable=False, server_default=sa.text("now()")),
    )
    op.create_index("hosts_next_due_at_idx", "hosts", ["next_due_at"])
    op.create_index(
        "hosts_lease_owner_idx", "hosts", ["lease_owner"],
        postgresql_where=sa.text("lease_owner IS NOT NULL"),
    )

    op.create_table(
        "sites",
        sa.Column("id", sa.BigInteger(), primary_key=True, autoincrement=True),
        sa.Column("root_url", sa.Text(), nullable=False, unique=True),
        sa.Column("window_size", sa.Integer(), nullable=False),
        sa.Column("created_at", TZ, nullable=False, server_default=sa.text("now()")),
    )

    op.create_table(
        "urls",
        sa.Column("id", sa.BigInteger(), primary_key=True, autoincrement=True),
        sa.Column("url", sa.Text(), nullable=False, unique=True),
        sa.Column(
            "host_id", sa.BigInteger(), sa.ForeignKey("hosts.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("state", sa.Text(), nullable=False, server_default=sa.text("'new'")),
        sa.Column("importance", sa.Float(), nullable=False, server_default=sa.text("1.0")),
        sa.Column("next_fetch_at", TZ, nullable=False),
        sa.Column("lease_owner", sa.Text(), nullable=True),
        sa.Column("lease_expires_at", TZ, nullable=True),
        sa.Column("last_fetched_at", TZ, nullable=True),
        sa.Column("last_status", sa.SmallInteger(), nullable=True),
        sa.Column("last_simhash", sa.BigInteger(), nullable=True),
        sa.Column("last_content_hash", sa.LargeBinary(), nullable=True),
        sa.Column("etag", sa.Text(), nullable=True),
        sa.Column("last_modified", TZ, nullable=True),
        sa.Column("fetch_count", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("change_count", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column(
            "consecutive_failures", sa.Integer(), nullable=False, server_default=sa.text("0")
        ),
        sa.Column(
            "changed_intervals_days", postgresql.ARRAY(postgresql.DOUBLE_PRECISION()),
            nullable=False, server_default=sa.text("'{}'"),
        ),
        sa.Column("unchanged_days", sa.Float(), nullable=False, server_default=sa.text("0")),
        sa.Column("intervals_observed", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("change_rate_per_day", sa.Float(), nullable=True),
        sa.Column("fetch_rate_per_day", sa.Float(), nullable=True),
        sa.Column(
            "change_brackets_days", postgresql.ARRAY(postgresql.DOUBLE_PRECISION()),
            nullable=False, server_default=sa.text("'{}'"),
        ),
        sa.Column("update_period_days", sa.Float(), nullable=True),
        sa.Column("update_phase_days", sa.Float(), nullable=True),
        sa.Column("update_jitter_days", sa.Float(), nullable=True),
        sa.Column("redirect_to", sa.Text(), nullable=True),
        sa.Column(
            "site_id", sa.BigInteger(), sa.ForeignKey("sites.id", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column("depth", sa.Integer(), nullable=True),
        sa.Column("in_window", sa.Boolean(), nullable=False, server_default=sa.text("false")),
        sa.Column("entered_window_at", TZ, nullable=True),
        sa.Column("left_window_at", TZ, nullable=True),
        sa.Column(
            "discovered_initially", sa.Boolean(), nullable=False,
            server_default=sa.text("false"),
        ),
        sa.Column("created_at", TZ, nullable=False, server_default=sa.text("now()")),
        sa.CheckConstraint(
            "state IN ('new', 'active', 'gone', 'error', 'redirected', 'disallowed')",
            name="urls_state_check",
        ),
    )
    op.create_index("urls_host_next_fetch_idx", "urls", ["host_id", "next_fetch_at"])
    op.create_index("urls_next_fetch_idx", "urls", ["next_fetch_at"])
    op.create_index(
        "urls_lease_owner_idx", "urls", ["lease_owner"],
        postgresql_where=sa.text("lease_owner IS NOT NULL"),
    )

    op.create_index(
        "urls_site_idx", "urls", ["site_id"], postgresql_where=sa.text("site_id IS NOT NULL")
    )

    op.create_table(
        "links",
        sa.Column(
            "from_url_id", sa.BigInteger(), sa.ForeignKey("urls.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column(
            "to_url_id", sa.BigInteger(), sa.ForeignKey("urls.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("position", sa.Integer(), nullable=False),
    )
    op.create_index("links_to_idx", "links", ["to_url_id"])

    op.create_table(
        "observations",
        sa.Column("id", sa.BigInteger(), primary_key=True, autoincrement=True),
        sa.Column(
            "url_id", sa.BigInteger(), sa.ForeignKey("urls.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("fetched_at", TZ, nullable=False),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column("status", sa.SmallInteger(), nullable=True),
        sa.Column("bytes", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("duration_seconds", sa.Float(), nullable=False),
        sa.Column("simhash", sa.BigInteger(), nullable=True),
        sa.Column("content_hash", sa.LargeBinary(), nullable=True),
        sa.Column("simhash_distance", sa.SmallInteger(), nullable=True),
        sa.Column("changed", sa.Boolean(), nullable=True),
        sa.Column("content_changed", sa.Boolean(), nullable=True),
        sa.Column("last_modified", TZ, nullable=True),
        sa.Column("error_kind", sa.Text(), nullable=True),
        sa.Column("truncated", sa.Boolean(), nullable=False, server_default=sa.text("false")),
    )
    # Unique: a retried commit after a lost acknowledgement cannot record a fetch twice.
    op.create_index(
        "observations_url_fetched_idx", "observations", ["url_id", "fetched_at"], unique=True
    )
    op.create_index("observations_fetched_at_idx", "observations", ["fetched_at"])

    op.create_table(
        "planner_state",
        sa.Column("key", sa.Text(), primary_key=True),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("updated_at", TZ, nullable=False, server_default=sa.text("now()")),
    )


def downgrade() -> None:
    op.drop_table("planner_state")
    op.drop_table("observations")
    op.drop_table("links")
    op.drop_table("urls")
    op.drop_table("sites")
    op.drop_table("hosts")
