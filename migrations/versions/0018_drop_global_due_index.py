"""Drop urls_next_fetch_idx: no frontier statement reads it, and every fetch paid for it.

The claim, the record, the idle wake and the backlog gauges go through the host
(``hosts_ready_at_idx``, ``hosts_unpaused_due_idx``, ``urls_host_next_fetch_idx``); the global
index on ``next_fetch_at`` served only `crawler status`'s exact due count, which counts the
whole table in the same statement anyway (now one scan for both counts). Yet a fetch's update
of its URL moves ``next_fetch_at``, so it is never HOT, and every one, like every seeded URL,
inserted an entry into this index too: one B-tree descent in four of a record's URL update.

Revision ID: 0018_drop_global_due_index
Revises: 0017_stored_target_uri
Create Date: 2026-11-24
"""

from __future__ import annotations

from alembic import op

revision = "0018_drop_global_due_index"
down_revision = "0017_stored_target_uri"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("urls_next_fetch_idx", table_name="urls")


def downgrade() -> None:
    op.create_index("urls_next_fetch_idx", "urls", ["next_fetch_at"])
