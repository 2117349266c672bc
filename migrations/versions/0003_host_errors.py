"""Hosts remember their last connection-level error (TLS, DNS, timeout...), so that a host
whose certificate fails is visible as such in ``crawler status`` even when it failed on
robots.txt and no URL row records the failure.

Revision ID: 0003_host_errors
Revises: 0005_fencing
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_host_errors"
down_revision = "0005_fencing"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("hosts", sa.Column("last_error_kind", sa.Text(), nullable=True))
    op.add_column("hosts", sa.Column("last_error_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("hosts", "last_error_at")
    op.drop_column("hosts", "last_error_kind")
