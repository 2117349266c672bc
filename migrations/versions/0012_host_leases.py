"""Leases on hosts only (issue 13: claim + record at tens of thousands of URLs a second).

A host is the unit of work: while a daemon holds its lease no other daemon claims it, and
every write for its URLs is fenced by that lease (owner, epoch, expiry by the database's
clock). A lease on each URL as well added nothing to that, and cost a second write of every
fetched URL row: the claim set urls.lease_owner, an indexed column, so each claimed URL got a
new row version and a new entry in every index of ``urls`` before the fetch's record wrote it
again. The claim now writes one row per host and only reads the URLs.

Downgrade restores the columns (empty: no URL is leased) and their index.

Revision ID: 0012_host_leases
Revises: 0011_fetch_record
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_host_leases"
down_revision = "0011_fetch_record"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("urls_lease_owner_idx", table_name="urls")
    op.drop_column("urls", "lease_expires_at")
    op.drop_column("urls", "lease_owner")


def downgrade() -> None:
    op.add_column("urls", sa.Column("lease_owner", sa.Text(), nullable=True))
    op.add_column("urls", sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index(
        "urls_lease_owner_idx", "urls", ["lease_owner"],
        postgresql_where=sa.text("lease_owner IS NOT NULL"),
    )
