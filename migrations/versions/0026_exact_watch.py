"""Watching a URL or a window exactly (issue 35, "Changes a watcher cares about").

urls.watch_exact / sites.watch_exact: any change of the visible text (of the watched region)
is a change, numbers included, where the simhash rule lets a changed price on a long page pass
as cosmetic. urls.last_text_hash: the SHA-1 of that text as last fetched
(crawler.core.fingerprint.text_hash), which the next fetch is compared with; NULL until a URL
watched exactly is fetched, when its previous version is fingerprinted again from the
collection. fetch_record gains the field the record writes it from.

Columns with a constant default or none rewrite no rows.

Revision ID: 0026_exact_watch
Revises: 0025_gone_rechecked
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026_exact_watch"
down_revision = "0025_gone_rechecked"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The type first: on Citus a type command cannot follow a (parallel) change of a
    # distributed table in the same transaction.
    op.execute("ALTER TYPE fetch_record ADD ATTRIBUTE last_text_hash bytea")
    op.add_column("urls", sa.Column("last_text_hash", sa.LargeBinary(), nullable=True))
    for table in ("urls", "sites"):
        op.add_column(
            table,
            sa.Column("watch_exact", sa.Boolean(), nullable=False, server_default=sa.false()),
        )


def downgrade() -> None:
    op.execute("ALTER TYPE fetch_record DROP ATTRIBUTE last_text_hash")
    for table in ("urls", "sites"):
        op.drop_column(table, "watch_exact")
    op.drop_column("urls", "last_text_hash")
