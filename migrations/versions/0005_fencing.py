"""Fenced leases and Last-Modified evidence.

hosts.lease_epoch: incremented at every claim; a daemon's writes for a host or its URLs carry
the epoch it was granted and apply only while it is current and the lease unexpired by the
database's clock (issue 11). urls.lm_*: Cho & Garcia-Molina's Last-Modified statistics and the
recent (Last-Modified, fetched at) pairs of the credibility test (crawler.core.last_modified).

Revision ID: 0005_fencing
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005_fencing"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "hosts",
        sa.Column("lease_epoch", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
    )
    op.add_column(
        "urls", sa.Column("lm_fetches", sa.Integer(), nullable=False, server_default=sa.text("0"))
    )
    op.add_column(
        "urls", sa.Column("lm_changes", sa.Integer(), nullable=False, server_default=sa.text("0"))
    )
    op.add_column(
        "urls",
        sa.Column("lm_observed_days", sa.Float(), nullable=False, server_default=sa.text("0")),
    )
    op.add_column(
        "urls",
        sa.Column(
            "lm_evidence_days",
            postgresql.ARRAY(postgresql.DOUBLE_PRECISION()),
            nullable=False,
            server_default=sa.text("'{}'"),
        ),
    )


def downgrade() -> None:
    for column in ("lm_evidence_days", "lm_observed_days", "lm_changes", "lm_fetches"):
        op.drop_column("urls", column)
    op.drop_column("hosts", "lease_epoch")
