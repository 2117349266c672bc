"""The stored window of a site, indexed (issue 13, "Windows incremental").

urls_site_window_idx: (host_id, site_id, depth) of the pages in a window (host_id first, as
in every key since 0010_citus: a site's pages are on its root's host). An incremental window update
(crawler.core.window_incremental) reads the window's size and deepest level, and at times its
pages, on every fetch that moved a link; without it those reads visit every page of the site.
Partial: a window holds at most its N pages, however large the site.

Revision ID: 0010_window_index
Revises: 0010_citus
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_window_index"
down_revision = "0010_citus"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "urls_site_window_idx", "urls", ["host_id", "site_id", "depth"],
        postgresql_where=sa.text("in_window"),
    )


def downgrade() -> None:
    op.drop_index("urls_site_window_idx", table_name="urls")
