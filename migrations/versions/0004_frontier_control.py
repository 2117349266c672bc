"""Frontier control: why a host is refused, and paused hosts.

hosts.refused_reason: set when the SSRF policy refuses the host's address (status shows it,
with the setting that opens it), cleared when a fetch gets through. hosts.paused: an
operator's `crawler pause --host`; the claim statement skips paused hosts (issue 15).

Revision ID: 0004_frontier_control
Revises: 0003_host_errors
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_frontier_control"
down_revision = "0003_host_errors"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("hosts", sa.Column("refused_reason", sa.Text(), nullable=True))
    op.add_column(
        "hosts",
        sa.Column("paused", sa.Boolean(), nullable=False, server_default=sa.text("false")),
    )
    op.create_index("hosts_paused_idx", "hosts", ["origin"], postgresql_where=sa.text("paused"))


def downgrade() -> None:
    op.drop_index("hosts_paused_idx", table_name="hosts")
    op.drop_column("hosts", "paused")
    op.drop_column("hosts", "refused_reason")
