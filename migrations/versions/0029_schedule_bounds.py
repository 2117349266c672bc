"""A watcher's own schedule (issue 35): interval bounds and fetch windows per URL or pattern.

``schedule_rules``: what ``crawler bound`` was told, one row per URL, pattern (a regular
expression, as PostgreSQL's ``~`` matches) or host origin: the shortest and longest interval
in seconds (NULL: the crawler's setting) and weekly windows when fetching is allowed
(crawler.core.url_bounds; '' for none). A small table every node needs whole.

``urls.own_min_interval_seconds`` / ``own_max_interval_seconds`` / ``fetch_windows``: the rule
in force for the URL, copied onto its row so that a claim brings it with the record and the
planner's sample reads it without a join. Nullable or constant-default columns: adding them
rewrites no rows.

``crawler_sample_strata`` (Citus' planner_sample) returns the two bounds too; its result type
changes, so it is dropped and made again.

Revision ID: 0029_schedule_bounds
Revises: 0028_storage_damage
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0029_schedule_bounds"
down_revision = "0028_storage_damage"
branch_labels = None
depends_on = None

_SAMPLE_SIGNATURE = "crawler_sample_strata(bigint[], bigint[], bigint)"


def _sample_function(with_bounds: bool) -> str:
    extra_columns = (
        ",\n               own_min_interval_seconds float8, own_max_interval_seconds float8"
        if with_bounds else ""
    )
    extra_values = (
        ",\n               u.own_min_interval_seconds, u.own_max_interval_seconds"
        if with_bounds else ""
    )
    return f"""
CREATE FUNCTION crawler_sample_strata(starts bigint[], ends bigint[], per_stratum bigint)
RETURNS TABLE (stratum bigint, id bigint, host_id bigint, importance float8,
               change_rate_per_day float8, changed_intervals_days float8[],
               unchanged_days float8, intervals_observed integer,
               crawl_delay_seconds float8{extra_columns})
LANGUAGE plpgsql ROWS 1000 AS $$
DECLARE
    s record;
BEGIN
    FOR s IN
        SELECT * FROM unnest(starts, ends) WITH ORDINALITY AS t(start_id, end_id, n)
    LOOP
        RETURN QUERY
        SELECT s.n, u.id, u.host_id, u.importance, u.change_rate_per_day,
               u.changed_intervals_days, u.unchanged_days, u.intervals_observed,
               h.crawl_delay_seconds{extra_values}
        FROM urls AS u JOIN hosts AS h ON h.id = u.host_id
        WHERE u.id >= s.start_id AND u.id < s.end_id
          AND u.state IN ('new', 'active', 'error')
          AND (u.site_id IS NULL OR u.in_window)
        ORDER BY u.id
        LIMIT per_stratum;
    END LOOP;
END
$$
"""


def upgrade() -> None:
    op.create_table(
        "schedule_rules",
        sa.Column("id", sa.BigInteger, sa.Identity(always=False), primary_key=True),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("target", sa.Text, nullable=False),
        sa.Column("min_interval_seconds", sa.Float, nullable=True),
        sa.Column("max_interval_seconds", sa.Float, nullable=True),
        sa.Column("windows", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
        sa.CheckConstraint("kind IN ('url', 'pattern', 'host')", name="schedule_rules_kind"),
        sa.UniqueConstraint("kind", "target", name="schedule_rules_kind_target_key"),
    )
    op.add_column("urls", sa.Column("own_min_interval_seconds", sa.Float, nullable=True))
    op.add_column("urls", sa.Column("own_max_interval_seconds", sa.Float, nullable=True))
    op.add_column("urls", sa.Column("fetch_windows", sa.Text, nullable=True))
    op.execute(f"DROP FUNCTION IF EXISTS {_SAMPLE_SIGNATURE}")
    op.execute(_sample_function(with_bounds=True))


def downgrade() -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {_SAMPLE_SIGNATURE}")
    op.execute(_sample_function(with_bounds=False))
    op.drop_column("urls", "fetch_windows")
    op.drop_column("urls", "own_max_interval_seconds")
    op.drop_column("urls", "own_min_interval_seconds")
    op.drop_table("schedule_rules")
