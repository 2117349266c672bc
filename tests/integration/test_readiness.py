"""One indexed readiness time per host (issue 13): claim and idle wake read O(batch) entries.

The guard is EXPLAIN (ANALYZE, BUFFERS) on a frontier of 10^5 hosts of which 90% are overdue
but leased, backed off or politeness-waiting, and sort ahead of the ready ones by due time:
a claim that filters those on the heap reads them all, one that walks hosts.ready_at stops
after the batch.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest
from alembic import command

from crawler.db import frontier, migrate
from crawler.db.queries import PLAIN_QUERIES, QUERIES

# Each test with the plain statements and with the Citus variants (conftest.statements).
pytestmark = pytest.mark.usefixtures("statements")

HOSTS = 100_000
BATCH = 16


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from nodes(child)


async def explain(conn: asyncpg.Connection, query: str, *args: object) -> dict[str, Any]:
    """The executed plan (rolled back: EXPLAIN ANALYZE runs the claim's updates)."""
    tx = conn.transaction()
    await tx.start()
    try:
        raw = await conn.fetchval("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query, *args)
    finally:
        await tx.rollback()
    parsed = json.loads(raw) if isinstance(raw, str) else raw
    return dict(parsed[0]["Plan"])


def host_rows_read(plan: dict[str, Any]) -> int:
    """Rows the plan read from hosts: index entries returned and heap rows filtered away."""
    return sum(
        (n.get("Actual Rows", 0) + n.get("Rows Removed by Filter", 0)) * n.get("Actual Loops", 1)
        for n in nodes(plan)
        if n.get("Relation Name") == "hosts" or "hosts" in str(n.get("Index Name", ""))
    )


def buffers(plan: dict[str, Any]) -> int:
    return int(plan["Shared Hit Blocks"] + plan["Shared Read Blocks"])


async def build_busy_frontier(conn: asyncpg.Connection) -> None:
    """10^5 hosts, one URL each, bulk-inserted: by i % 10, 0-2 leased by another daemon, 3-5
    backed off, 6-8 waiting for their politeness delay (all three overdue by two days), 9
    ready (overdue by one hour, so behind the others in due order)."""
    await conn.execute(
        """
        INSERT INTO hosts (id, origin, next_due_at, next_request_at, lease_owner,
                           lease_expires_at, lease_epoch, backoff_until, consecutive_failures)
        SELECT crawler_host_id('http://h' || i || '.example'), 'http://h' || i || '.example',
               CASE WHEN i % 10 = 9 THEN now() - interval '1 hour'
                    ELSE now() - interval '2 days' END,
               CASE WHEN i % 10 BETWEEN 6 AND 8 THEN now() + interval '1 hour'
                    ELSE '-infinity' END,
               CASE WHEN i % 10 <= 2 THEN 'other' END,
               CASE WHEN i % 10 <= 2 THEN now() + interval '1 hour' END,
               CASE WHEN i % 10 <= 2 THEN 1 ELSE 0 END,
               CASE WHEN i % 10 BETWEEN 3 AND 5 THEN now() + interval '1 hour' END,
               CASE WHEN i % 10 BETWEEN 3 AND 5 THEN 3 ELSE 0 END
        FROM generate_series(1, $1::int) AS i
        """,
        HOSTS,
    )
    await conn.execute(
        "INSERT INTO urls (url, host_id, next_fetch_at) SELECT origin || '/', id, next_due_at "
        "FROM hosts"
    )
    await conn.execute("VACUUM ANALYZE hosts")
    await conn.execute("VACUUM ANALYZE urls")


async def test_claim_and_idle_wake_read_o_batch_on_a_busy_frontier(db_url: str) -> None:
    conn = await asyncpg.connect(db_url)
    try:
        started = time.monotonic()
        await build_busy_frontier(conn)
        # The frontier is adversarial: 90% of hosts are overdue yet not claimable.
        blocked = await conn.fetchval(
            "SELECT count(*) FROM hosts WHERE next_due_at <= now() "
            "AND (ready_at IS NULL OR ready_at > now())"
        )
        assert blocked >= 0.9 * HOSTS

        claim = await explain(conn, PLAIN_QUERIES["claim_due_work"], BATCH, "probe", 4, 60.0)
        assert claim["Actual Rows"] == BATCH, claim  # 16 hosts, one due URL each
        assert host_rows_read(claim) <= 10 * BATCH, json.dumps(claim, indent=1)
        # Finding the ready hosts: a few index and heap pages per host of the batch.
        [walk] = [n for n in nodes(claim) if n.get("Subplan Name") == "CTE ready_hosts"]
        assert buffers(walk) <= 10 * BATCH, json.dumps(walk, indent=1)
        # The whole claim, leases written (a new entry in each index of hosts per leased
        # host; URLs are only read) included: a constant per host and URL of the batch.
        assert buffers(claim) <= 100 * BATCH, json.dumps(claim, indent=1)
        assert "hosts_ready_at_idx" in json.dumps(claim)

        wake = await explain(conn, QUERIES["earliest_due"])
        assert host_rows_read(wake) <= 10, json.dumps(wake, indent=1)
        assert buffers(wake) <= 10, json.dumps(wake, indent=1)
        assert await frontier.earliest_due(conn) is not None

        # Control: the same walk by due time, filtering leases, backoff and politeness on the
        # heap (the claim before readiness), reads O(hosts) here; the measure above tells them
        # apart.
        tx = conn.transaction()
        await tx.start()
        try:
            await conn.execute("CREATE INDEX old_due_idx ON hosts (next_due_at)")
            raw = await conn.fetchval(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT id FROM hosts "
                "WHERE next_due_at <= now() AND next_request_at <= now() "
                "AND (lease_expires_at IS NULL OR lease_expires_at < now()) "
                "AND (backoff_until IS NULL OR backoff_until <= now()) AND NOT paused "
                "ORDER BY next_due_at LIMIT $1 FOR UPDATE SKIP LOCKED",
                BATCH,
            )
        finally:
            await tx.rollback()
        old = dict((json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"])
        assert host_rows_read(old) > 0.5 * HOSTS, json.dumps(old, indent=1)
        assert buffers(old) > 100 * BATCH, json.dumps(old, indent=1)
        assert time.monotonic() - started < 15.0
    finally:
        await conn.close()


async def ready_at(pool: asyncpg.Pool, host_id: int) -> float | None:
    return frontier.to_seconds(
        await pool.fetchval("SELECT ready_at FROM hosts WHERE id = $1", host_id)
    )


async def test_ready_at_follows_claim_backoff_release_pause_and_reschedule(db_url: str) -> None:
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=2)
    try:
        now = time.time()
        await frontier.seed(pool, [("http://a.example/1", 1.0), ("http://a.example/2", 1.0)],
                            now - 10)
        host_id = await pool.fetchval("SELECT id FROM hosts")
        due = await ready_at(pool, host_id)
        assert due is not None and abs(due - (now - 10)) < 1.0  # seeded: due work
        assert await frontier.earliest_due(pool) == due

        # Claimed: ready again when the lease runs out, not before.
        [claim] = await frontier.claim(pool, "me", max_hosts=4, urls_per_host=4,
                                       lease_seconds=60.0)
        expiry = await pool.fetchval("SELECT lease_expires_at FROM hosts")
        assert await ready_at(pool, host_id) == expiry.timestamp()
        assert await frontier.claim(pool, "other", max_hosts=4, urls_per_host=4,
                                    lease_seconds=60.0) == []

        # Backed off, then released: ready when the backoff ends, not back in the past.
        await frontier.set_host_backoff(pool, claim.lease, now + 600)
        assert await frontier.release_host(pool, claim.lease)
        assert abs((await ready_at(pool, host_id) or 0) - (now + 600)) < 1e-3
        assert await frontier.claim(pool, "other", max_hosts=4, urls_per_host=4,
                                    lease_seconds=60.0) == []
        assert abs((await frontier.earliest_due(pool) or 0) - (now + 600)) < 1e-3

        # Paused: out of the index (never claimed, no wake); resumed: back.
        await pool.execute(QUERIES["set_host_paused"], "http://a.example", True)
        assert await ready_at(pool, host_id) is None
        assert await frontier.earliest_due(pool) is None
        await pool.execute(QUERIES["set_host_paused"], "http://a.example", False)
        await pool.execute("UPDATE hosts SET backoff_until = NULL")
        assert abs((await ready_at(pool, host_id) or 0) - (now - 10)) < 1.0

        # The planner moves every URL a day later, then refreshes the host.
        await pool.execute("UPDATE urls SET next_fetch_at = now() + interval '1 day'")
        await frontier.refresh_hosts(pool, {host_id})
        later = await ready_at(pool, host_id)
        assert later is not None and later > now + 86000
        assert await frontier.claim(pool, "other", max_hosts=4, urls_per_host=4,
                                    lease_seconds=60.0) == []
    finally:
        await pool.close()


async def test_migration_computes_readiness_from_existing_hosts(empty_db_url: str) -> None:
    """0009_readiness on a database with hosts in every state keeps their data and derives
    ready_at from it; downgrading gives the due-time index back."""
    await migrate.upgrade(empty_db_url, "0007_watch")
    conn = await asyncpg.connect(empty_db_url)
    try:
        await conn.execute(
            """
            INSERT INTO hosts (origin, next_due_at, next_request_at, lease_owner,
                               lease_expires_at, backoff_until, paused) VALUES
            ('http://due.example', '2026-01-01Z', '-infinity', NULL, NULL, NULL, false),
            ('http://polite.example', '2026-01-01Z', '2026-01-02Z', NULL, NULL, NULL, false),
            ('http://backoff.example', '2026-01-01Z', '-infinity', NULL, NULL, '2026-01-03Z',
             false),
            ('http://leased.example', '2026-01-01Z', '-infinity', 'd', '2026-01-04Z', NULL,
             false),
            ('http://paused.example', '2026-01-01Z', '-infinity', NULL, NULL, NULL, true),
            ('http://empty.example', NULL, '-infinity', NULL, NULL, NULL, false)
            """
        )
        await conn.execute("INSERT INTO urls (url, host_id, next_fetch_at) "
                           "SELECT origin || '/', id, next_due_at FROM hosts "
                           "WHERE next_due_at IS NOT NULL")
        await migrate.upgrade(empty_db_url)
        rows = {r["origin"]: r["ready_at"] for r in await conn.fetch(
            "SELECT origin, ready_at FROM hosts")}
        day = {d: dt.datetime(2026, 1, d, tzinfo=dt.UTC) for d in range(1, 5)}
        assert rows == {
            "http://due.example": day[1],
            "http://polite.example": day[2],
            "http://backoff.example": day[3],
            "http://leased.example": day[4],
            "http://paused.example": None,
            "http://empty.example": None,
        }
        assert await conn.fetchval("SELECT count(*) FROM urls") == 5
        indexes = {r["indexname"] for r in await conn.fetch(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'hosts'")}
        assert "hosts_ready_at_idx" in indexes and "hosts_next_due_at_idx" not in indexes
        options = await conn.fetchval("SELECT reloptions FROM pg_class WHERE relname = 'hosts'")
        assert "fillfactor=80" in options
        await asyncio.to_thread(
            command.downgrade, migrate.alembic_config(empty_db_url), "0007_watch")
        indexes = {r["indexname"] for r in await conn.fetch(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'hosts'")}
        assert "hosts_next_due_at_idx" in indexes and "hosts_ready_at_idx" not in indexes
        assert await conn.fetchval(
            "SELECT reloptions FROM pg_class WHERE relname = 'hosts'") is None
        assert await conn.fetchval("SELECT count(*) FROM hosts") == 6
    finally:
        await conn.close()
