"""Gone window pages parked with no next fetch time are due again.

A window page that answered 404/410 left its window and was parked (next fetch 'infinity')
like a page pushed beyond the window: the only fetch that could find it back never came. The
window now keeps a gone page's recheck (queries.sql, ``apply_window``); the pages parked that
way before are due now, and their hosts with them, so that their rechecks resume.

Revision ID: 0025_gone_rechecked
Revises: 0024_plans
Create Date: 2026-11-27
"""

from __future__ import annotations

from alembic import op

revision = "0025_gone_rechecked"
down_revision = "0024_plans"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The hosts first, while the parked rows still say which hosts they are on.
    op.execute(
        "UPDATE hosts SET next_due_at = now() "
        "WHERE (next_due_at IS NULL OR next_due_at > now()) AND id IN ("
        "    SELECT host_id FROM urls WHERE state = 'gone' AND next_fetch_at = 'infinity')"
    )
    op.execute(
        "UPDATE urls SET next_fetch_at = now() "
        "WHERE state = 'gone' AND next_fetch_at = 'infinity'"
    )


def downgrade() -> None:
    # Nothing to undo: the schema is unchanged, and a gone page that is due is a valid row
    # under every revision.
    pass
