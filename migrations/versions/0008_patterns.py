"""Per-site URL patterns (issue 15, "URL patterns").

sites.include_patterns / sites.exclude_patterns: the regular expressions (crawler.core.patterns)
a windowed site's discovered links must match / must not match, after the global
CRAWLER_INCLUDE / CRAWLER_EXCLUDE. Existing sites get none: they keep discovering as before.

Revision ID: 0008_patterns
Revises: 0007_watch
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY

revision = "0008_patterns"
down_revision = "0008_partitions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for column in ("include_patterns", "exclude_patterns"):
        op.add_column(
            "sites",
            sa.Column(column, ARRAY(sa.Text()), nullable=False,
                      server_default=sa.text("'{}'::text[]")),
        )


def downgrade() -> None:
    op.drop_column("sites", "exclude_patterns")
    op.drop_column("sites", "include_patterns")
