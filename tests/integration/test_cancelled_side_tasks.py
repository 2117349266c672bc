"""A side task cancelled at shutdown stops, even when its cancellation comes back as a
database error: asyncpg rolls back a cancelled transaction, the server may act on the cancel
request late and fail that ROLLBACK, and the next statement fails with "current transaction is
aborted". A loop that caught that as a passing condition swallowed its own cancellation and
slept through the exit (a daemon of test_daemon_signals killed after 30 s, retrying partition
maintenance "in 3600s")."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import asyncpg
import pytest

from crawler.db import partitions
from crawler.db.errors import retried_later

LOG = logging.getLogger("test.cancelled_side_tasks")


async def _cancel_and_wait(task: asyncio.Task[object]) -> None:
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=30)
    assert done, "the task went on after its cancellation"
    assert task.cancelled()


async def test_a_cancellation_turned_database_error_is_not_retried(db_url: str) -> None:
    conn = await asyncpg.connect(db_url)
    rounds = 0
    in_round = asyncio.Event()

    async def side_task() -> None:  # the shape of the heartbeat and the frontier sampler
        nonlocal rounds
        while True:
            with retried_later("a side task", LOG):
                rounds += 1
                transaction = conn.transaction()
                await transaction.start()
                try:
                    # What a cancel the server acted on late leaves: an aborted transaction.
                    with contextlib.suppress(asyncpg.DivisionByZeroError):
                        await conn.execute("SELECT 1 / 0")
                    in_round.set()
                    await asyncio.sleep(3600)  # cancelled here
                finally:
                    try:
                        # Fails: "current transaction is aborted", replacing the cancellation.
                        await conn.execute("SELECT pg_advisory_unlock_all()")
                    finally:
                        await transaction.rollback()
            await asyncio.sleep(3600)

    try:
        task = asyncio.create_task(side_task())
        await asyncio.wait_for(in_round.wait(), 30)
        await _cancel_and_wait(task)  # type: ignore[arg-type]
        assert rounds == 1
    finally:
        await conn.close()


async def _waiting_on_a_lock(pool: asyncpg.Pool) -> bool:
    return bool(await pool.fetchval(
        "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock')"
    ))


@pytest.mark.parametrize("pgbouncer", [False, True])
async def test_a_maintenance_round_cancelled_midway_stops_and_frees_its_lock(
    db_url: str, pgbouncer: bool
) -> None:
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=3)
    blocker = await asyncpg.connect(db_url)
    try:
        async with pool.acquire() as conn:
            ahead = [b for b in await partitions.partitions(conn, "observations")
                     if not b.default]
            await conn.execute(f"DROP TABLE {max(ahead, key=lambda b: b.start).name}")
        # Hold the table so that the round waits (on it, or on its DEFAULT partition).
        transaction = blocker.transaction()
        await transaction.start()
        await blocker.execute("LOCK TABLE observations IN ACCESS EXCLUSIVE MODE")
        task = asyncio.create_task(partitions.maintain_once(
            pool, retention_days=0, keep_undelivered=False, pgbouncer=pgbouncer))
        deadline = time.monotonic() + 30
        while not await _waiting_on_a_lock(pool):
            assert time.monotonic() < deadline and not task.done()
            await asyncio.sleep(0.02)
        await _cancel_and_wait(task)  # type: ignore[arg-type]
        await transaction.rollback()
        # Nobody holds the maintenance lock: the next round (here, another session) runs.
        other = await asyncpg.connect(db_url)
        try:
            assert await other.fetchval("SELECT pg_try_advisory_lock($1)",
                                        partitions.MAINTENANCE_LOCK)
        finally:
            await other.close()
        done = await partitions.maintain_once(pool, retention_days=0, keep_undelivered=False,
                                              pgbouncer=pgbouncer)
        assert done is not None and done.created == [max(ahead, key=lambda b: b.start).name]
    finally:
        await blocker.close()
        await pool.close()
