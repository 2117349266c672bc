"""Damaged records marked in the index, and each daemon's storage fault.

``stored_records.damaged``: why the row's record cannot be read back as indexed (``missing``,
``truncated``, ``corrupt``, ``digest``: crawler.store.damage), set by ``crawler verify
--repair`` or by the recovery of a file left open by a crash; NULL for a sound record. A
marked row is never the original of a revisit nor the base of a diff, so that the URL's next
fetch stores a full response.

``daemons.storage_fault``: why the daemon cannot write its collection now (disk full, read-only
or vanished directory), NULL while it can: what ``crawler status`` shows for live daemons.

Nullable columns without a default: adding them rewrites no rows. The partial index holds the
damaged rows only (none, normally): ``crawler status`` counts them without a scan.

Revision ID: 0028_storage_damage
Revises: 0027_webhook_alerts
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0028_storage_damage"
down_revision = "0027_webhook_alerts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("stored_records", sa.Column("damaged", sa.Text(), nullable=True))
    op.add_column("daemons", sa.Column("storage_fault", sa.Text(), nullable=True))
    op.create_index("stored_records_damaged_idx", "stored_records", ["id"],
                    postgresql_where=sa.text("damaged IS NOT NULL"))


def downgrade() -> None:
    op.drop_index("stored_records_damaged_idx", table_name="stored_records")
    op.drop_column("daemons", "storage_fault")
    op.drop_column("stored_records", "damaged")
