"""A daemon frozen while it delivers webhooks delays events by at most the delivery lease.

Two real daemons (`crawler run`) share a database and a webhook receiver. The one holding the
delivery lease is frozen with SIGSTOP; events stored meanwhile reach the receiver through the
other daemon once the lease expires, while the first is still frozen. Resumed (SIGCONT), the
first daemon delivers nothing twice: every event arrives once. The daemons fetch nothing (their
one host is paused): the events are stored by the test.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time

import asyncpg
import pytest
from aiohttp import web
from daemon import daemon_env, start_daemon, stop_daemon

from crawler.db import frontier
from crawler.db.queries import QUERIES

pytestmark = pytest.mark.timeout(120)

LEASE_SECONDS = 3.0
URL = "http://127.0.0.1:1/watched"


async def store_events(pool: asyncpg.Pool, count: int) -> list[int]:
    row = await pool.fetchrow("SELECT id, host_id FROM urls WHERE url = $1", URL)
    return [
        await pool.fetchval(
            "INSERT INTO change_events (url_id, fetched_at, kind, payload, host_id) "
            "VALUES ($1, clock_timestamp(), 'changed', $2::jsonb, $3) RETURNING id",
            row["id"], json.dumps({"url": URL, "kind": "changed"}), row["host_id"],
        )
        for _ in range(count)
    ]


async def until(condition, what: str, seconds: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not await condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_a_frozen_deliverer_is_taken_over_within_the_lease(db_url: str) -> None:
    received: list[int] = []

    async def handle(request: web.Request) -> web.Response:
        received.append(int((await request.json())["id"]))
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    pool = await asyncpg.create_pool(db_url)
    await frontier.seed(pool, [(URL, 1.0)], time.time())
    await pool.execute(QUERIES["set_host_paused"], "http://127.0.0.1:1", True)
    env = daemon_env(db_url, webhook_url=f"http://127.0.0.1:{port}/hook",
                     webhook_lease=str(LEASE_SECONDS), webhook_timeout="1",
                     webhook_max_backoff="1", log_level="WARNING")
    daemons = [await start_daemon(env), await start_daemon(env)]
    frozen: asyncio.subprocess.Process | None = None
    try:
        async def holder() -> asyncpg.Record | None:
            row = await pool.fetchrow(
                "SELECT owner, epoch, expires_at, expires_at > now() AS live "
                "FROM delivery_lease WHERE name = 'outbox'")
            return row if row is not None and row["live"] else None

        await until(lambda: holder(), "a daemon to take the delivery lease")
        # Both deliverers started (each recorded the start, or found it recorded).
        first = await store_events(pool, 2)
        await until(lambda: _has(received, first), "the first events")
        row = await holder()
        assert row is not None
        pid = int(row["owner"].split(":")[1])  # owner: host:pid:nonce (crawler.daemon.run)
        frozen = next(d for d in daemons if d.pid == pid)
        frozen.send_signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        during = await store_events(pool, 5)
        await until(lambda: _has(received, during), "delivery while the holder is frozen")
        delay = time.monotonic() - stopped_at
        taken = await holder()
        assert taken is not None and taken["owner"] != row["owner"]
        assert taken["epoch"] > row["epoch"]
        # At most the lease, plus the taker's poll and a round of delivery.
        assert delay < LEASE_SECONDS + 4.0, delay
        frozen.send_signal(signal.SIGCONT)
        after = await store_events(pool, 3)
        await until(lambda: _has(received, after), "delivery after the resume")
        await until(lambda: _undelivered(pool), "every event marked delivered")
    finally:
        if frozen is not None:
            frozen.send_signal(signal.SIGCONT)
        outputs = [await stop_daemon(d) for d in daemons]
        await pool.close()
        await runner.cleanup()
    assert sorted(received) == sorted(set(received)), "an event was delivered twice"
    assert set(first) | set(during) | set(after) == set(received)
    for out in outputs:
        assert "Traceback" not in out, out


async def _has(received: list[int], ids: list[int]) -> bool:
    return set(ids) <= set(received)


async def _undelivered(pool: asyncpg.Pool) -> bool:
    return not await pool.fetchval(
        "SELECT count(*) FROM change_events WHERE delivered_at IS NULL")
