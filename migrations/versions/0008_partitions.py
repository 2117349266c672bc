"""Per-fetch tables partitioned by month of fetched_at (issue 13, "Observations partitioned").

observations, stored_records (the WARC index) and change_events (the outbox) each gain a row
per fetch. Each becomes a table PARTITION BY RANGE (fetched_at) with one partition per calendar
month (UTC), named <table>_pYYYYMM, and a DEFAULT partition <table>_default that catches a row
no month partition covers (the daemon moves such rows into their month's partition:
crawler.db.partitions). Whole months can then be dropped past CRAWLER_OBSERVATION_RETENTION_DAYS
instead of deleting rows.

The primary key becomes (id, fetched_at): a partitioned table's unique keys must hold the
partition key. The unique (url_id, fetched_at) keys, which the ON CONFLICT clauses of
record_fetch and collection_rows rely on, already do. ids still come from the same sequence,
so they stay unique and increasing (the outbox delivers in id order).

Conversion keeps every row: the table is renamed, a partitioned table with the same columns,
defaults and CHECK constraints is created under the old name, with a partition for every month
that holds rows plus the current month and the two after it, the rows are copied, the old
table's indexes and foreign keys are recreated on the new one (by their definitions read from
the catalog, so that none is forgotten), the id sequence is handed over, and the old table is
dropped. It runs in the migration's transaction: it all happens or nothing does. It reads and
writes every row of these tables once: on a large database expect minutes.

Revision ID: 0008_partitions
Revises: 0007_watch
Create Date: 2026-11-22
"""

from __future__ import annotations

import datetime as dt
import re
from typing import NamedTuple

from alembic import op
from sqlalchemy import text

revision = "0008_partitions"
down_revision = "0007_watch"
branch_labels = None
depends_on = None

TABLES = ("observations", "stored_records", "change_events")
MONTHS_AHEAD = 2


def _month_start(year: int, month: int) -> dt.datetime:
    index = year * 12 + month - 1
    return dt.datetime(index // 12, index % 12 + 1, 1, tzinfo=dt.UTC)


def _scalar(sql: str) -> object:
    return op.get_bind().execute(text(sql)).scalar()


def _rows(sql: str) -> list[tuple[object, ...]]:
    return [tuple(r) for r in op.get_bind().execute(text(sql)).fetchall()]


def _index_definitions(table: str) -> list[tuple[str, str]]:
    """(name, CREATE INDEX ...) of the table's indexes other than its primary key's."""
    return [
        (str(name), str(definition))
        for name, definition in _rows(
            "SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid "
            f"WHERE i.indrelid = '{table}'::regclass AND NOT i.indisprimary ORDER BY c.relname"
        )
    ]


def _foreign_keys(table: str) -> list[tuple[str, str]]:
    return [
        (str(name), str(definition))
        for name, definition in _rows(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
            f"WHERE conrelid = '{table}'::regclass AND contype = 'f' ORDER BY conname"
        )
    ]


def _retarget(definition: str, old: str, new: str) -> str:
    """The index definition read from ``old`` made to build on ``new`` (on a partitioned
    table, on every partition: no ONLY), in whatever schema it was."""
    retargeted, found = re.subn(
        rf" ON (ONLY )?((?:\S+\.)?){re.escape(old)} ", rf" ON \g<2>{new} ", definition, count=1
    )
    if not found:
        raise RuntimeError(f"cannot retarget index definition {definition!r}")
    return retargeted


def _primary_key(table: str) -> str:
    return str(_scalar(
        f"SELECT conname FROM pg_constraint WHERE conrelid = '{table}'::regclass "
        "AND contype = 'p'"
    ))


class _SetAside(NamedTuple):
    """A table renamed out of the way with its indexes and foreign keys dropped, to be copied
    into its replacement and then dropped."""

    old: str
    indexes: list[tuple[str, str]]
    foreign_keys: list[tuple[str, str]]
    sequence: object


def _set_aside(table: str, suffix: str) -> _SetAside:
    old = f"{table}_{suffix}"
    op.execute(f"ALTER TABLE {table} RENAME TO {old}")
    indexes = _index_definitions(old)
    foreign_keys = _foreign_keys(old)
    for name, _ in indexes:
        op.execute(f"DROP INDEX {name}")
    for name, _ in foreign_keys:
        op.execute(f"ALTER TABLE {old} DROP CONSTRAINT {name}")
    sequence = _scalar(f"SELECT pg_get_serial_sequence('{old}', 'id')")
    return _SetAside(old, indexes, foreign_keys, sequence)


def _replace(table: str, aside: _SetAside, primary_key: str) -> None:
    """Copy the set-aside rows into ``table`` (already created), then give it the old table's
    keys, indexes, foreign keys and id sequence, and drop the old one."""
    op.execute(f"INSERT INTO {table} SELECT * FROM {aside.old}")
    op.execute(f"ALTER TABLE {table} ADD CONSTRAINT {table}_pkey PRIMARY KEY ({primary_key})")
    for _, definition in aside.indexes:
        op.execute(_retarget(definition, aside.old, table))
    for name, definition in aside.foreign_keys:
        op.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} {definition}")
    if aside.sequence is not None:
        op.execute(f"ALTER SEQUENCE {aside.sequence} OWNED BY {table}.id")
    op.execute(f"DROP TABLE {aside.old}")  # and its partitions, when it had any


def _partition(table: str) -> None:
    aside = _set_aside(table, "unpartitioned")
    old = aside.old
    op.execute(f"ALTER TABLE {old} RENAME CONSTRAINT {_primary_key(old)} TO {old}_pkey")
    op.execute(
        f"CREATE TABLE {table} (LIKE {old} INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
        f"INCLUDING STORAGE INCLUDING COMMENTS) PARTITION BY RANGE (fetched_at)"
    )
    months = {
        (int(y), int(m))  # type: ignore[call-overload]
        for y, m in _rows(
            "SELECT DISTINCT EXTRACT(YEAR FROM fetched_at AT TIME ZONE 'UTC'), "
            "EXTRACT(MONTH FROM fetched_at AT TIME ZONE 'UTC') "
            f"FROM {old} WHERE isfinite(fetched_at)"
        )
    }
    now = dt.datetime.now(dt.UTC)
    months |= {
        ((now.year * 12 + now.month - 1 + i) // 12, (now.month - 1 + i) % 12 + 1)
        for i in range(MONTHS_AHEAD + 1)
    }
    for year, month in sorted(months):
        start, end = _month_start(year, month), _month_start(year, month + 1)
        op.execute(
            f"CREATE TABLE {table}_p{year:04d}{month:02d} PARTITION OF {table} "
            f"FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
        )
    op.execute(f"CREATE TABLE {table}_default PARTITION OF {table} DEFAULT")
    _replace(table, aside, "id, fetched_at")
    op.execute(f"ANALYZE {table}")


def _unpartition(table: str) -> None:
    aside = _set_aside(table, "partitioned")
    old = aside.old
    op.execute(f"ALTER TABLE {old} DROP CONSTRAINT {_primary_key(old)}")
    op.execute(
        f"CREATE TABLE {table} (LIKE {old} INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
        f"INCLUDING STORAGE INCLUDING COMMENTS)"
    )
    _replace(table, aside, "id")


def upgrade() -> None:
    for table in TABLES:
        _partition(table)


def downgrade() -> None:
    for table in TABLES:
        _unpartition(table)
