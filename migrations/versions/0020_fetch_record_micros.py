"""A fetch_record's times travel as integer microseconds, and its empty histories as NULL.

The client spent more CPU encoding each ``fetch_record`` than building it: asyncpg turns a
timestamptz parameter into a Python ``datetime`` first and then takes it apart again (about
0.8 µs a value against 0.2 for a bigint), and encodes every float8[] through its generic
array path (about 0.7 µs even when empty). A record carries up to seven times and three
histories. Now:

- the time fields are ``bigint`` microseconds since the Unix epoch, renamed with a ``_us``
  suffix. ``crawler_micros_time`` turns them back into timestamptz in the statement. The client
  rounds POSIX seconds to microseconds exactly as ``datetime.fromtimestamp`` does
  (crawler.db.frontier.to_micros), so a time sent this way equals the same time sent as a
  datetime by any other statement (an observation's ``fetched_at`` is also written into the
  collection's index and the change outbox). The largest and smallest bigint stand for
  ±infinity (a parked URL's next fetch).
- an empty history is sent as NULL and stored as ``'{}'`` (the columns are NOT NULL).

Revision ID: 0020_fetch_record_micros
Revises: 0019_url_collation
Create Date: 2026-11-24
"""

from __future__ import annotations

from alembic import op

revision = "0020_fetch_record_micros"
down_revision = "0019_url_collation"
branch_labels = None
depends_on = None

TIMES = ("fetched_at", "obs_last_modified", "next_fetch_at", "last_fetched_at", "last_modified",
         "next_request_at", "backoff_until")


def upgrade() -> None:
    # STABLE, not IMMUTABLE (timestamptz + interval is STABLE): the planner inlines it as the
    # expression itself. Exact: a bigint below 2^53 is an exact float8, and interval_mul of one
    # microsecond by it is that many microseconds.
    op.execute(
        """
        CREATE FUNCTION crawler_micros_time(us bigint) RETURNS timestamptz
        LANGUAGE sql STABLE PARALLEL SAFE AS $$
            SELECT CASE us
                WHEN 9223372036854775807 THEN 'infinity'::timestamptz
                WHEN -9223372036854775808 THEN '-infinity'::timestamptz
                ELSE timestamptz '1970-01-01 00:00:00+00' + us * interval '1 microsecond'
            END
        $$
        """
    )
    for name in TIMES:
        op.execute(f"ALTER TYPE fetch_record RENAME ATTRIBUTE {name} TO {name}_us")
        op.execute(f"ALTER TYPE fetch_record ALTER ATTRIBUTE {name}_us TYPE bigint")


def downgrade() -> None:
    for name in TIMES:
        op.execute(f"ALTER TYPE fetch_record ALTER ATTRIBUTE {name}_us TYPE timestamptz")
        op.execute(f"ALTER TYPE fetch_record RENAME ATTRIBUTE {name}_us TO {name}")
    op.execute("DROP FUNCTION crawler_micros_time(bigint)")
