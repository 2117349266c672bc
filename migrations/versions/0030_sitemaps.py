"""Sitemaps and feeds (issue 37): the files read for each host, and the dates they claim.

``sitemaps``: one row per sitemap or feed of a host, keyed by its URL: whether robots.txt
listed it (``robots_origin``: the origin whose robots.txt did, which makes its URLs on that
origin acceptable wherever the file lives), what it was (``kind``), when it was read, what
it listed and added, where it was cut (``cut``) or why it could not be read (``error``), and
its validators for the next, conditional, fetch.

``url_hints``: every date a sitemap or feed gave for a URL (``kind`` lastmod, updated or
published), with the file it came from and when it was seen: evidence beside the fetch
observations. One row per (URL, kind, date, source): reading the same claim again only moves
its ``seen_at``. No foreign key to urls, as for observations (0023): removing URLs deletes
their hints by (id, host_id).

Both are host-owned, keyed and distributed by host_id.

Revision ID: 0030_sitemaps
Revises: 0029_schedule_bounds
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0030_sitemaps"
down_revision = "0029_schedule_bounds"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sitemaps",
        sa.Column("host_id", sa.BigInteger(), sa.ForeignKey("hosts.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("url", sa.Text(), primary_key=True),
        sa.Column("robots_origin", sa.Text(), nullable=True),
        sa.Column("kind", sa.Text(), nullable=True),
        sa.Column("depth", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("read_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("status", sa.SmallInteger(), nullable=True),
        sa.Column("listed", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("added", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("rejected", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("cut", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("etag", sa.Text(), nullable=True),
        sa.Column("last_modified", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "url_hints",
        sa.Column("host_id", sa.BigInteger(), sa.ForeignKey("hosts.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("url_id", sa.BigInteger(), primary_key=True),
        sa.Column("kind", sa.Text(), primary_key=True),
        sa.Column("claimed_at", sa.DateTime(timezone=True), primary_key=True),
        sa.Column("source", sa.Text(), primary_key=True),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("kind IN ('lastmod', 'updated', 'published')",
                           name="url_hints_kind"),
    )


def downgrade() -> None:
    op.drop_table("url_hints")
    op.drop_table("sitemaps")
