"""Scale: a heartbeat row per live daemon, so a fleet's planner counts every daemon's capacity.

Revision ID: 0006_scale
Revises: 0002_collection
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_scale"
down_revision = "0002_collection"
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "daemons",
        sa.Column("owner", sa.Text(), primary_key=True),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("started_at", TZ, nullable=False, server_default=sa.text("now()")),
        sa.Column("heartbeat_at", TZ, nullable=False, server_default=sa.text("now()")),
    )


def downgrade() -> None:
    op.drop_table("daemons")
