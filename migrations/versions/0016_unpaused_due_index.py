"""The earliest due time of the hosts not paused, indexed: the backlog gauges without paused
hosts.

``crawler_urls_due``, ``crawler_most_overdue_seconds`` and `crawler status` counted the URLs of
paused hosts, which fall due and are never fetched: a pause looked like a growing backlog and
fired CrawlerOverdueBacklogGrowing (QA). The most overdue URL of a host not paused is now read
from ``hosts.next_due_at`` (the earliest ``next_fetch_at`` of the host's URLs) through this
partial index, one entry, however many URLs paused hosts hold; skipping paused hosts in
``urls_next_fetch_idx`` instead would walk their whole backlog first.

Cost: one more index entry per non-HOT update of a host not paused: a claim and a release,
which move indexed columns (the lease owner, ``ready_at``) anyway. A fetch's own update of its
host leaves ``next_due_at`` alone, so it stays as HOT as it was.

Revision ID: 0016_unpaused_due_index
Revises: 0015_last_attempt
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016_unpaused_due_index"
down_revision = "0015_last_attempt"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "hosts_unpaused_due_idx", "hosts", ["next_due_at"],
        postgresql_where=sa.text("NOT paused"),
    )


def downgrade() -> None:
    op.drop_index("hosts_unpaused_due_idx", table_name="hosts")
