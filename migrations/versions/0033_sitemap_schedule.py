"""Sitemaps and feeds read again on a schedule of their own (issue 37, "keeping up").

``sitemaps`` gains what the daemon needs to read each file again: when (``next_read_at``,
walked in order by the reader's claim, whose fencing epoch is ``lease_epoch``), how it was
found (``source``: robots, seed, index or page; ``found_on``: the index or page that named
it), the digest of the listing last read and when it last changed, the change statistics of
the page model (``reads``, ``changes``, ``changed_intervals_days``, ``unchanged_days``,
``intervals_observed``, ``change_rate_per_day``, ``read_rate_per_day``, and ``answered_at``,
the last read that got the file or a 304), how many URLs its last change dropped, and how
many invalid bytes its last read repaired. Files already read are due at once.

``sitemap_urls``: which URL each sitemap lists, as last read (``sitemap_id`` is the file
URL's hash, as a host's key is its origin's: ``crawler_host_id(url)``). Keyed by the URL's
host (a file lists URLs of its own host, or of the host whose robots.txt or page named it).
No foreign key to urls, as for observations (0023): its check cost a third of recording a
listing, and removing URLs deletes their rows by (id, host_id). A URL no sitemap of its host
lists any more is flagged by ``urls.unlisted_at`` (``urls_unlisted_idx``: the few flagged,
by host, for `crawler sites`); listed again, the flag is cleared.

Revision ID: 0033_sitemap_schedule
Revises: 0032_rules_for_new_urls
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY, DOUBLE_PRECISION

revision = "0033_sitemap_schedule"
down_revision = "0032_rules_for_new_urls"
branch_labels = None
depends_on = None

ZERO = sa.text("0")


def upgrade() -> None:
    columns = [
        sa.Column("source", sa.Text(), nullable=True),
        sa.Column("found_on", sa.Text(), nullable=True),
        sa.Column("next_read_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lease_epoch", sa.BigInteger(), nullable=False, server_default=ZERO),
        sa.Column("answered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("digest", sa.LargeBinary(), nullable=True),
        sa.Column("changed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("dropped", sa.Integer(), nullable=False, server_default=ZERO),
        sa.Column("repaired", sa.Integer(), nullable=False, server_default=ZERO),
        sa.Column("reads", sa.Integer(), nullable=False, server_default=ZERO),
        sa.Column("changes", sa.Integer(), nullable=False, server_default=ZERO),
        sa.Column("consecutive_failures", sa.Integer(), nullable=False, server_default=ZERO),
        sa.Column("changed_intervals_days", ARRAY(DOUBLE_PRECISION), nullable=False,
                  server_default=sa.text("'{}'")),
        sa.Column("unchanged_days", sa.Float(), nullable=False, server_default=ZERO),
        sa.Column("intervals_observed", sa.Integer(), nullable=False, server_default=ZERO),
        sa.Column("change_rate_per_day", sa.Float(), nullable=True),
        sa.Column("read_rate_per_day", sa.Float(), nullable=True),
    ]
    for column in columns:
        op.add_column("sitemaps", column)
    op.execute(
        "UPDATE sitemaps SET next_read_at = now(), "
        "source = CASE WHEN depth > 0 THEN 'index' "
        "WHEN robots_origin IS NOT NULL THEN 'robots' ELSE 'seed' END"
    )
    op.create_index("sitemaps_next_read_idx", "sitemaps", ["next_read_at"],
                    postgresql_where=sa.text("next_read_at IS NOT NULL"))
    op.add_column("urls", sa.Column("unlisted_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index("urls_unlisted_idx", "urls", ["host_id"],
                    postgresql_where=sa.text("unlisted_at IS NOT NULL"))
    op.create_table(
        "sitemap_urls",
        sa.Column("url_id", sa.BigInteger(), nullable=False),
        sa.Column("host_id", sa.BigInteger(), nullable=False),
        sa.Column("sitemap_id", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("host_id", "sitemap_id", "url_id", name="sitemap_urls_pkey"),
    )
    op.create_index("sitemap_urls_url_idx", "sitemap_urls", ["host_id", "url_id"])


def downgrade() -> None:
    op.drop_table("sitemap_urls")
    op.drop_index("urls_unlisted_idx", table_name="urls")
    op.drop_column("urls", "unlisted_at")
    op.drop_index("sitemaps_next_read_idx", table_name="sitemaps")
    for name in ("read_rate_per_day", "change_rate_per_day", "intervals_observed",
                 "unchanged_days", "changed_intervals_days", "consecutive_failures", "changes",
                 "reads", "repaired", "dropped", "changed_at", "digest", "answered_at",
                 "lease_epoch", "next_read_at", "found_on", "source"):
        op.drop_column("sitemaps", name)
