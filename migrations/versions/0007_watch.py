"""A watched region per URL or per window (issue 15, "A watched region").

urls.watch_css / urls.ignore_css and sites.watch_css / sites.ignore_css: CSS selectors of the
elements whose text counts, and of those removed. urls.fingerprint_region: the key of the region
last_simhash was computed under; '' (the whole page) for every fingerprint taken before, so
they all stay valid.

Revision ID: 0007_watch
Revises: 0006_scale
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_watch"
down_revision = "0006_scale"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ("urls", "sites"):
        op.add_column(table, sa.Column("watch_css", sa.Text(), nullable=True))
        op.add_column(table, sa.Column("ignore_css", sa.Text(), nullable=True))
    op.add_column(
        "urls",
        sa.Column(
            "fingerprint_region", sa.Text(), nullable=False, server_default=sa.text("''")
        ),
    )


def downgrade() -> None:
    op.drop_column("urls", "fingerprint_region")
    for table in ("urls", "sites"):
        op.drop_column(table, "ignore_css")
        op.drop_column(table, "watch_css")
