"""Monthly partitions of the per-fetch tables: created ahead, and dropped past the retention.

observations, stored_records (the WARC index) and change_events (the outbox) are partitioned
by month of ``fetched_at``. One daemon per machine runs ``keep_partitions`` as a side task;
daemons on other machines skip a round while another holds the maintenance lock. Each round,
for each table:

* it creates the partitions of the current month and the ``PARTITIONS_AHEAD`` next ones;
* it moves rows that landed in the DEFAULT partition (a clock far off, rows written while no
  daemon ran for months) into partitions of their own months: DEFAULT is only a safety net
  so that an insert never fails;
* with ``CRAWLER_OBSERVATION_RETENTION_DAYS`` > 0 it drops the partitions of observations and
  change_events whose whole month is older than the retention, except an outbox month that
  still holds events a webhook has to deliver. The WARC index is never dropped here: its rows
  are the only way to the stored versions (docs/OPERATIONS.md).

Every DDL statement runs in a short transaction with ``lock_timeout``: creating or dropping a
partition needs a brief exclusive lock on the table, and a statement waiting on a long reader
would hold every insert up behind it. A round that cannot get its lock gives up and the next
tries again (there are months of slack ahead). Per-URL estimates never read observations, so
dropping old months changes none of them.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import re
import time
from dataclasses import dataclass, field

import asyncpg

from crawler.core.partitions import Bounds, Month, to_create, to_drop
from crawler.db.errors import DB_ERRORS, raise_if_cancelling

log = logging.getLogger(__name__)

PARTITIONED_TABLES = ("observations", "stored_records", "change_events")
# Tables whose old months CRAWLER_OBSERVATION_RETENTION_DAYS drops (not the WARC index).
RETAINED_TABLES = ("observations", "change_events")
PARTITIONS_AHEAD = 2  # months after the current one
MAINTENANCE_SECONDS = 3600.0
LOCK_TIMEOUT = "2s"
# pg_try_advisory_lock key of partition maintenance ("crawler partitions", truncated).
MAINTENANCE_LOCK = 0x63727770_61727469

_PARTITION_NAME = re.compile(r"_(p\d{6}|default)$")
_BOUND = re.compile(r"FROM \((.+)\) TO \((.+)\)")


def is_partition(table: str) -> bool:
    """Whether ``table`` is named as a partition of a per-fetch table (e.g. for schema
    comparisons, which see partitions as tables of their own)."""
    return any(
        table.startswith(parent + "_") and _PARTITION_NAME.search(table) is not None
        for parent in PARTITIONED_TABLES
    )


def _bound_value(text: str) -> dt.datetime | None:
    text = text.strip()
    if text in ("MINVALUE", "MAXVALUE"):
        return None
    return dt.datetime.fromisoformat(text.strip("'"))


def parse_bound(name: str, expression: str) -> Bounds | None:
    """An existing partition's range from ``pg_get_expr(relpartbound)`` rendered in UTC;
    None for an expression this does not understand (such a partition is left alone)."""
    if expression.strip() == "DEFAULT":
        return Bounds(name, None, None, default=True)
    match = _BOUND.search(expression)
    if match is None:
        return None
    try:
        return Bounds(name, _bound_value(match.group(1)), _bound_value(match.group(2)))
    except ValueError:
        return None


async def partitions(conn: asyncpg.Connection, table: str) -> list[Bounds]:
    async with conn.transaction():
        await conn.execute("SET LOCAL TimeZone = 'UTC'")
        rows = await conn.fetch(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) AS bound "
            "FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = $1::regclass ORDER BY c.relname",
            table,
        )
    found = [parse_bound(r["relname"], r["bound"]) for r in rows]
    return [b for b in found if b is not None]


def _literal(at: dt.datetime) -> str:
    return "'" + at.astimezone(dt.UTC).isoformat() + "'"


async def _months_in_default(conn: asyncpg.Connection, default: str) -> list[Month]:
    rows = await conn.fetch(
        "SELECT DISTINCT EXTRACT(YEAR FROM fetched_at AT TIME ZONE 'UTC')::int AS y, "
        f"EXTRACT(MONTH FROM fetched_at AT TIME ZONE 'UTC')::int AS m FROM {default} "
        "WHERE isfinite(fetched_at)"
    )
    return sorted(Month(r["y"], r["m"]) for r in rows)


async def create_month(
    conn: asyncpg.Connection, table: str, month: Month, default: str | None
) -> int:
    """Create ``month``'s partition of ``table``, moving into it the rows of that month the DEFAULT
    partition holds; the number of rows moved. Built as a table of its own with a CHECK constraint
    proving its range, then attached: ATTACH PARTITION takes a weaker lock on the parent than CREATE
    TABLE ... PARTITION OF, so inserts into other months go on meanwhile."""
    name = month.partition(table)
    start, end = _literal(month.start), _literal(month.end)
    async with conn.transaction():
        await conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        await conn.execute(
            f"CREATE TABLE {name} (LIKE {table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
            "INCLUDING STORAGE)"
        )
        await conn.execute(
            f"ALTER TABLE {name} ADD CONSTRAINT {name}_range "
            f"CHECK (fetched_at >= {start} AND fetched_at < {end})"
        )
        moved = 0
        if default is not None:
            status = await conn.execute(
                f"WITH moved AS (DELETE FROM {default} "
                f"WHERE fetched_at >= {start} AND fetched_at < {end} RETURNING *) "
                f"INSERT INTO {name} SELECT * FROM moved"
            )
            moved = int(status.split()[-1])
        await conn.execute(
            f"ALTER TABLE {table} ATTACH PARTITION {name} FOR VALUES FROM ({start}) TO ({end})"
        )
        await conn.execute(f"ALTER TABLE {name} DROP CONSTRAINT {name}_range")
    return moved


async def _ddl(conn: asyncpg.Connection, statement: str) -> None:
    async with conn.transaction():
        await conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        await conn.execute(statement)


async def holds_undelivered(conn: asyncpg.Connection, name: str) -> bool:
    """Whether an outbox partition holds an event still to deliver (its pending index): one
    after the newest webhook's start, or queued again by a replay. An event from before any
    webhook was configured is never to be delivered, and keeps no month."""
    return bool(await conn.fetchval(
        f"SELECT EXISTS (SELECT 1 FROM {name} WHERE delivered_at IS NULL AND (replay OR "
        "id > (SELECT coalesce(max(start_id), 0) FROM webhooks)))"
    ))


@dataclass
class Maintenance:
    """What one round did."""

    created: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    kept_undelivered: list[str] = field(default_factory=list)
    rows_moved: int = 0
    skipped: bool = False  # another daemon held the maintenance lock


async def maintain_table(
    conn: asyncpg.Connection, table: str, now: float, *, retention_days: float,
    keep_undelivered: bool, done: Maintenance,
) -> None:
    existing = await partitions(conn, table)
    default = next((b.name for b in existing if b.default), None)
    if default is None:
        default = f"{table}_default"
        await _ddl(conn, f"CREATE TABLE {default} PARTITION OF {table} DEFAULT")
        done.created.append(default)
    months = to_create(now, PARTITIONS_AHEAD, existing)
    stray = [m for m in await _months_in_default(conn, default)
             if not any(b.overlaps(m) for b in existing)]
    for month in sorted(set(months) | set(stray)):
        done.rows_moved += await create_month(conn, table, month, default)
        done.created.append(month.partition(table))
    if table not in RETAINED_TABLES:
        return
    for name in to_drop(now, retention_days, await partitions(conn, table)):
        if keep_undelivered and table == "change_events" and await holds_undelivered(conn, name):
            done.kept_undelivered.append(name)
            continue
        await _ddl(conn, f"DROP TABLE {name}")
        done.dropped.append(name)


async def maintain(
    conn: asyncpg.Connection, now: float, *, retention_days: float, keep_undelivered: bool,
    pgbouncer: bool = False,
) -> Maintenance:
    """One round over every partitioned table (see the module's docstring). ``now`` is the
    moment it plans for (the caller's clock); ``retention_days`` 0 drops nothing;
    ``keep_undelivered``: a webhook delivers the outbox, so months with pending events stay.
    ``pgbouncer``: behind PgBouncer's transaction pooling a session-level lock would stay on
    whichever server connection took it, so each table's work is one transaction holding a
    transaction-level lock instead (a round another daemon holds is skipped, as ever).
    A round that raises leaves the session-level lock to the connection's reset or close."""
    done = Maintenance()
    if pgbouncer:
        for table in PARTITIONED_TABLES:
            async with conn.transaction():
                if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)",
                                           MAINTENANCE_LOCK):
                    done.skipped = True
                    return done
                await maintain_table(conn, table, now, retention_days=retention_days,
                                     keep_undelivered=keep_undelivered, done=done)
        return done
    if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", MAINTENANCE_LOCK):
        done.skipped = True
        return done
    # Unlocked only after a round that went through. A failed round's transaction may be
    # aborted (a cancel the server acted on late fails the ROLLBACK too), so an unlock then
    # would fail as well and replace the cause, a cancellation included. The lock is the
    # session's: the pool's reset of the connection (asyncpg runs pg_advisory_unlock_all) or
    # its close frees it.
    for table in PARTITIONED_TABLES:
        await maintain_table(conn, table, now, retention_days=retention_days,
                             keep_undelivered=keep_undelivered, done=done)
    await conn.execute("SELECT pg_advisory_unlock($1)", MAINTENANCE_LOCK)
    return done


async def maintain_once(
    pool: asyncpg.Pool, *, retention_days: float, keep_undelivered: bool, pgbouncer: bool = False
) -> Maintenance | None:
    """A round on a connection of ``pool``, logged; None when it failed (logged, retried by
    the next round: a DEFAULT partition takes every insert meanwhile)."""
    try:
        async with pool.acquire() as conn:
            done = await maintain(conn, time.time(), retention_days=retention_days,
                                  keep_undelivered=keep_undelivered, pgbouncer=pgbouncer)
    except DB_ERRORS as exc:
        raise_if_cancelling()  # a cancellation the failure replaced: stop, not retry in an hour
        log.warning("partition maintenance failed (%s: %s); retrying in %.0fs",
                    type(exc).__name__, exc, MAINTENANCE_SECONDS)
        return None
    if done.created:
        log.info("created partitions %s", ", ".join(done.created))
    if done.rows_moved:
        log.warning("moved %d rows out of DEFAULT partitions into their months", done.rows_moved)
    if done.dropped:
        log.info("dropped partitions past CRAWLER_OBSERVATION_RETENTION_DAYS=%g: %s",
                 retention_days, ", ".join(done.dropped))
    for name in done.kept_undelivered:
        log.warning("kept %s past the retention: it holds change events the webhook has not "
                    "delivered yet", name)
    return done


async def keep_partitions(
    pool: asyncpg.Pool, *, retention_days: float, keep_undelivered: bool,
    interval: float = MAINTENANCE_SECONDS, pgbouncer: bool = False,
) -> None:
    """Side task: a maintenance round every ``interval`` seconds, until cancelled."""
    while True:
        await maintain_once(pool, retention_days=retention_days, keep_undelivered=keep_undelivered,
                            pgbouncer=pgbouncer)
        await asyncio.sleep(interval)
