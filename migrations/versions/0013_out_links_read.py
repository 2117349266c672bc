"""Whether a window page's out-links have been read since it joined its site.

A URL crawled before it joined a window (seeded plainly, then made a window's root or reached
by a window's links) kept its validators and content hash, so the server's 304, or identical
bytes, answered every later fetch without a parse, and its links were never read: the window
stayed at that one page. A page whose links are unread is now fetched without validators and
parsed; the record sets ``out_links_read``, and joining a site clears it.

Existing rows start unread, so every window page is fetched whole once after the upgrade, which
also repairs windows that stalled this way. Adding a column with a constant default rewrites
no rows.

Revision ID: 0013_out_links_read
Revises: 0012_host_leases
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_out_links_read"
down_revision = "0012_host_leases"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The type first: on Citus a type command cannot follow a (parallel) change of a
    # distributed table in the same transaction.
    op.execute("ALTER TYPE fetch_record ADD ATTRIBUTE out_links_read boolean")
    op.add_column(
        "urls",
        sa.Column("out_links_read", sa.Boolean(), nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    op.execute("ALTER TYPE fetch_record DROP ATTRIBUTE out_links_read")
    op.drop_column("urls", "out_links_read")
