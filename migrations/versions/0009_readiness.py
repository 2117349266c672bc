"""One indexed readiness time per host (issue 13, "A hot path independent of size").

hosts.ready_at: when the host next may and should be claimed, folding in its due work
(next_due_at, the earliest next_fetch_at of its URLs), its politeness clock (next_request_at),
its backoff (backoff_until) and a live lease (lease_expires_at: a leased host is ready again
when its lease runs out). NULL, and so outside the partial index, for a paused host and for a
host without URLs. A stored generated column: PostgreSQL recomputes it in every statement
that writes one of those columns (claim, record, release, backoff, pause and resume, seeding,
the planner's rescheduling, an operator's UPDATE), so it cannot drift from them.

hosts_ready_at_idx replaces hosts_next_due_at_idx: the claim and the idle wake walk it in
order and stop after the batch, however many hosts are leased, backing off or waiting.

hosts is rewritten with room on each page (fillfactor 80): record_fetch moves a leased host's
politeness clock once per fetch and leaves its indexed columns (ready_at is the lease's expiry
meanwhile) unchanged, so the update can stay on its page (HOT) and add no index entry. The
readiness index takes a new entry at each claim and release; autovacuum visits hosts after 2%
of its rows changed rather than 20%, so dead entries at the index's head do not pile up.

Adding the column rewrites hosts once (every row keeps its data; ready_at is computed from
it). Revision ID: 0009_readiness. Revises: 0007_watch. Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_readiness"
down_revision = "0008_patterns"
branch_labels = None
depends_on = None

# Kept identical to crawler/db/schema.py's Computed(...) (GREATEST ignores NULLs).
READY_AT = (
    "CASE WHEN paused OR next_due_at IS NULL THEN NULL "
    "ELSE GREATEST(next_due_at, next_request_at, backoff_until, lease_expires_at) END"
)


def upgrade() -> None:
    op.execute(
        "ALTER TABLE hosts SET (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.02)"
    )
    op.add_column(
        "hosts",
        sa.Column(
            "ready_at", sa.DateTime(timezone=True), sa.Computed(READY_AT, persisted=True),
            nullable=True,
        ),
    )
    op.create_index(
        "hosts_ready_at_idx", "hosts", ["ready_at"],
        postgresql_where=sa.text("ready_at IS NOT NULL"),
    )
    op.drop_index("hosts_next_due_at_idx", table_name="hosts")


def downgrade() -> None:
    op.create_index("hosts_next_due_at_idx", "hosts", ["next_due_at"])
    op.drop_index("hosts_ready_at_idx", table_name="hosts")
    op.drop_column("hosts", "ready_at")
    op.execute("ALTER TABLE hosts RESET (fillfactor, autovacuum_vacuum_scale_factor)")
