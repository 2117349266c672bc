"""The plan the planner solves, as versioned rows every fetch process reads.

A plan is μ, the population prior, the host priors, and the settings it was solved for
(budget, objective, schedule mode, interval bounds). Fetch processes adopt the newest row at
start and whenever its version moves, so a machine's processes and a fleet's daemons all
schedule under the same plan; a daemon started with other settings sees the difference and
re-plans. Each daemon's heartbeat says which version it applies, so that "every fetch
process applies the current plan" can be checked from the database.

Revision ID: 0024_plans
Revises: 0023_observations_without_url_fk
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0024_plans"
down_revision = "0023_observations_without_url_fk"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "plans",
        sa.Column("version", sa.BigInteger, sa.Identity(always=False), primary_key=True),
        sa.Column("solved_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
        sa.Column("solved_by", sa.Text, nullable=False),
        sa.Column("mode", sa.Text, nullable=False),
        sa.Column("objective", sa.Text, nullable=False),
        sa.Column("beta_seconds", sa.Float, nullable=False),
        sa.Column("default_interval_seconds", sa.Float, nullable=False),
        sa.Column("min_interval_seconds", sa.Float, nullable=False),
        sa.Column("max_interval_seconds", sa.Float, nullable=False),
        sa.Column("budget_setting_per_day", sa.Float, nullable=True),
        sa.Column("budget_per_day", sa.Float, nullable=False),
        sa.Column("budget_source", sa.Text, nullable=False),
        sa.Column("mu", sa.Float, nullable=True),
        sa.Column("prior_shape", sa.Float, nullable=False),
        sa.Column("prior_rate", sa.Float, nullable=False),
        sa.Column("host_priors", postgresql.JSONB, nullable=False,
                  server_default=sa.text("'{}'::jsonb")),
        sa.Column("estimated_freshness", sa.Float, nullable=True),
        sa.Column("estimated_beta_currency", sa.Float, nullable=True),
        sa.Column("achieved_per_day", sa.Float, nullable=True),
        sa.Column("sampled", sa.Integer, nullable=False, server_default="0"),
        sa.Column("population", sa.Float, nullable=False, server_default="0"),
    )
    op.add_column("daemons", sa.Column("plan_version", sa.BigInteger, nullable=True))


def downgrade() -> None:
    op.drop_column("daemons", "plan_version")
    op.drop_table("plans")
