"""The planner's rescheduling walk never waits for a lock a fetcher holds: it skips locked
URLs and retries locked hosts, so it can never be in a lock cycle with the fetch loop (before,
its chunk transaction deadlocked with record_fetch and stalled fetching for a second each time)."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest

from crawler.core.schedule import SchedulePolicy
from crawler.db import frontier, planning
from crawler.db.frontier import refresh_hosts
from crawler.db.planning import reschedule
from crawler.settings import default_settings

# Each test with the plain statements and with the Citus variants (conftest.statements).
pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("statements")]

POLICY = SchedulePolicy(default_settings(min_interval=60.0, max_interval=30 * 86400.0),
                        mu=1e-3)
PER_HOST = 20


async def poll(pool: asyncpg.Pool, query: str, expected: object, *args: object) -> None:
    deadline = time.monotonic() + 30.0
    while (value := await pool.fetchval(query, *args)) != expected:
        assert time.monotonic() < deadline, (query, value, expected)
        await asyncio.sleep(0.05)


async def test_reschedule_skips_locked_rows_and_retries_locked_hosts(db_url: str) -> None:
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=4)
    fetcher = await asyncpg.connect(db_url)
    try:
        urls = [(f"http://127.0.0.{h + 2}:8000/p{i}", 1.0)
                for h in range(2) for i in range(PER_HOST)]
        await frontier.seed(pool, urls, time.time())
        await pool.execute(
            """UPDATE urls SET state = 'active', last_fetched_at = now() - interval '1 hour',
                      next_fetch_at = now() + interval '20 days', change_rate_per_day = 2.0,
                      fetch_rate_per_day = 1.0, intervals_observed = 3, unchanged_days = 2.0,
                      changed_intervals_days = '{0.5}'""")
        await pool.execute("UPDATE hosts SET next_due_at = now() + interval '20 days'")
        host_a, host_b = [r[0] for r in await pool.fetch("SELECT id FROM hosts ORDER BY id")]
        locked_url = await pool.fetchval(
            "SELECT min(id) FROM urls WHERE host_id = $1", host_b)
        # A fetcher in the middle of a transaction: host A's row and one URL of host B locked.
        transaction = fetcher.transaction()
        await transaction.start()
        await fetcher.execute("SELECT 1 FROM hosts WHERE id = $1 FOR UPDATE", host_a)
        await fetcher.execute("SELECT 1 FROM urls WHERE id = $1 FOR UPDATE", locked_url)

        walk = asyncio.create_task(reschedule(pool, POLICY))
        # Every URL but the locked one is rescheduled while the locks are held, and host B's
        # due time follows: nothing waited.
        moved = "SELECT count(*) FROM urls WHERE fetch_rate_per_day <> 1.0"
        await poll(pool, moved, 2 * PER_HOST - 1)
        due_b = ("SELECT next_due_at = (SELECT min(next_fetch_at) FROM urls WHERE host_id = $1) "
                 "FROM hosts WHERE id = $1")
        await poll(pool, due_b, True, host_b)
        assert await pool.fetchval(due_b, host_a) is False  # locked: left for a retry
        assert not walk.done()
        await transaction.rollback()
        assert await asyncio.wait_for(walk, 30.0) == 2 * PER_HOST - 1
        assert await pool.fetchval(due_b, host_a) is True
        assert await pool.fetchval(
            "SELECT fetch_rate_per_day FROM urls WHERE id = $1", locked_url) == 1.0
    finally:
        await fetcher.close()
        await pool.close()


async def test_a_host_locked_past_the_walk_is_refreshed_by_the_next_round(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(planning, "HOST_REFRESH_PATIENCE_SECONDS", 0.3)
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=4)
    fetcher = await asyncpg.connect(db_url)
    try:
        await frontier.seed(pool, [(f"http://127.0.0.2:8000/p{i}", 1.0)
                                   for i in range(PER_HOST)], time.time())
        await pool.execute(
            """UPDATE urls SET state = 'active', last_fetched_at = now() - interval '1 hour',
                      next_fetch_at = now() + interval '20 days', change_rate_per_day = 2.0,
                      fetch_rate_per_day = 1.0, intervals_observed = 3, unchanged_days = 2.0,
                      changed_intervals_days = '{0.5}'""")
        await pool.execute("UPDATE hosts SET next_due_at = now() + interval '20 days'")
        host = await pool.fetchval("SELECT id FROM hosts")
        due = ("SELECT next_due_at = (SELECT min(next_fetch_at) FROM urls WHERE host_id = $1) "
               "FROM hosts WHERE id = $1")
        stale: set[int] = set()
        async with fetcher.transaction():
            await fetcher.execute("SELECT 1 FROM hosts WHERE id = $1 FOR UPDATE", host)
            assert await reschedule(pool, POLICY, stale) == PER_HOST
            assert stale == {host}
            assert await pool.fetchval(due, host) is False
        await refresh_hosts(pool, stale)  # what the next round does first
        assert stale == set()
        assert await pool.fetchval(due, host) is True
    finally:
        await fetcher.close()
        await pool.close()
