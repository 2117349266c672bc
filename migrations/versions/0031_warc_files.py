"""Where each WARC file lives: the machine and directory of the daemon that wrote it.

``warc_files``: one row per WARC file a daemon opened (``stored_records.warc_file`` names it),
written before the first index row that refers to it commits. A fleet whose daemons each
write to a directory of their own machine indexes records that only that machine can read;
``crawler get`` on another machine then names the machine and path that hold the file instead
of calling it missing. One row per file (about a gigabyte of records), not a column per
record: the index rows stay as they are.

Revision ID: 0031_warc_files
Revises: 0030_sitemaps
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0031_warc_files"
down_revision = "0030_sitemaps"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "warc_files",
        sa.Column("name", sa.Text(), primary_key=True),
        sa.Column("machine", sa.Text(), nullable=False),  # the writer's host name
        sa.Column("directory", sa.Text(), nullable=False),  # its CRAWLER_WARC_DIR, absolute
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
    )


def downgrade() -> None:
    op.drop_table("warc_files")
