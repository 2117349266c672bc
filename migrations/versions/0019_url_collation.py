"""Compare URLs byte by byte: ``urls.url`` gets the "C" collation.

A URL's identity is its bytes (crawler.core.urls normalises it before it is stored), but the
column had the database's default collation, so every comparison in ``urls_host_id_url_key``
went through the C library's locale-aware ``strcoll``: on every seeded URL, and on every
fetch, whose URL update moves ``next_fetch_at`` and is never HOT, so it inserts a new entry
into that index. Byte comparison (``memcmp``) gives the same equality for a deterministic
collation, so uniqueness is unchanged; only the order of ``ORDER BY url`` may differ, and only
in a database whose default collation is not byte order. It also lets the index serve
``url LIKE 'prefix%'``.

Changing only the collation leaves the table as it is: PostgreSQL rebuilds the index on the
column (about a minute for 10^7 URLs) under an exclusive lock, so stop the daemons first.

Revision ID: 0019_url_collation
Revises: 0018_drop_global_due_index
Create Date: 2026-11-24
"""

from __future__ import annotations

from alembic import op

revision = "0019_url_collation"
down_revision = "0018_drop_global_due_index"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute('ALTER TABLE urls ALTER COLUMN url TYPE text COLLATE "C"')


def downgrade() -> None:
    op.execute('ALTER TABLE urls ALTER COLUMN url TYPE text COLLATE "default"')
