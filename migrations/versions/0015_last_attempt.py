"""When a URL was last requested and how that went, whatever the answer.

``urls.last_fetched_at`` is the last fetch that brought content (a 200 or a 304): the change
estimator measures its intervals from it, so a 404, a 500 or a timeout leaves it alone, and a
URL that has only ever failed showed no fetch at all (QA). ``last_attempt_at`` and
``last_outcome`` are the last fetch's time and outcome (the newest observation's), written by
the same statement as the rest of the row.

Both are nullable without a default, so adding them rewrites no rows. A URL fetched before the
upgrade has none until its next fetch; ``crawler urls`` and ``crawler show`` show its
``last_fetched_at`` as the last attempt until then (a lower bound). No change to the
``fetch_record`` type: the item's own ``fetched_at`` and ``outcome`` are those values.

Revision ID: 0015_last_attempt
Revises: 0014_citus_row_locks
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_last_attempt"
down_revision = "0014_citus_row_locks"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("urls", sa.Column("last_attempt_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("urls", sa.Column("last_outcome", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("urls", "last_outcome")
    op.drop_column("urls", "last_attempt_at")
