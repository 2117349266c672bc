"""Webhook delivery from the outbox to a loopback receiver that is down, then answers 500 to
some requests, then accepts: every event arrives, at least once, in order per URL; the target
passes the SSRF policy like any fetch. Each test records the webhook's start (``start``)
before it fills the outbox: a webhook gets only the events after its start."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections import defaultdict

import asyncpg
from aiohttp import web

from crawler.daemon.webhook import WebhookDelivery
from crawler.db import frontier
from crawler.metrics import Metrics
from crawler.net.fetch import new_session
from crawler.net.ssrf import AddressPolicy

URLS = 4
EVENTS_PER_URL = 5


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def fill_outbox(pool: asyncpg.Pool) -> None:
    urls = [f"http://127.0.0.1:1/u{k}" for k in range(URLS)]
    await frontier.seed(pool, [(u, 1.0) for u in urls], time.time())
    ids = {r["url"]: r["id"] for r in await pool.fetch("SELECT id, url FROM urls")}
    for n in range(EVENTS_PER_URL):
        for url in urls:
            await pool.execute(
                "INSERT INTO change_events (url_id, fetched_at, kind, payload, host_id) "
                "VALUES ($1, now() + $2 * interval '1 second', 'changed', $3::jsonb, "
                "(SELECT host_id FROM urls WHERE id = $1))",
                ids[url], float(n), json.dumps({"url": url, "n": n}),
            )


class Receiver:
    """Answers 500 to the first ``failures`` requests, then 200; records what it accepted."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.requests = 0
        self.accepted: list[dict[str, object]] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.requests += 1
        event = await request.json()
        if self.requests <= self.failures or (self.requests % 3 == 0 and self.requests < 30):
            return web.Response(status=500)
        self.accepted.append(event)
        return web.Response(status=204)


async def wait_for(condition, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def test_down_then_500s_then_accepting_delivers_everything_in_order(db_url: str) -> None:
    pool = await asyncpg.create_pool(db_url)
    port = free_port()
    metrics = Metrics()
    session = new_session(
        "t", address_policy=AddressPolicy(["127.0.0.0/8"])
    )
    delivery = WebhookDelivery(pool, session, f"http://127.0.0.1:{port}/hook",
                               metrics.collection, timeout_seconds=2.0, max_backoff_seconds=0.3)
    await delivery.start()
    task = asyncio.create_task(delivery.run())
    runner: web.AppRunner | None = None
    try:
        await fill_outbox(pool)
        total = URLS * EVENTS_PER_URL
        # Down: nothing listens. Attempts fail, nothing is lost.
        await wait_for(lambda: metrics.collection.delivery_failures._value.get() >= 3)
        assert await pool.fetchval(
            "SELECT count(*) FROM change_events WHERE delivered_at IS NULL") == total
        await wait_for(lambda: metrics.collection.events_pending._value.get() == total)
        assert metrics.collection.oldest_pending_age._value.get() > 0
        # Up, answering 500 to some requests, then accepting.
        receiver = Receiver(failures=4)
        app = web.Application()
        app.router.add_post("/hook", receiver.handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        await wait_for(lambda: len({e["id"] for e in receiver.accepted}) == total)
        await wait_for(lambda: metrics.collection.events_pending._value.get() == 0)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await session.close()
        if runner is not None:
            await runner.cleanup()
    assert await pool.fetchval(
        "SELECT count(*) FROM change_events WHERE delivered_at IS NULL") == 0
    await pool.close()
    per_url: dict[str, list[int]] = defaultdict(list)
    for event in receiver.accepted:
        per_url[str(event["url"])].append(int(event["n"]))  # type: ignore[call-overload]
    assert len(per_url) == URLS
    for ns in per_url.values():
        assert ns == sorted(ns) and sorted(set(ns)) == list(range(EVENTS_PER_URL)), ns
    assert metrics.collection.events_delivered._value.get() >= total


async def test_webhook_target_is_subject_to_the_ssrf_policy(db_url: str) -> None:
    pool = await asyncpg.create_pool(db_url)
    receiver = Receiver(failures=0)
    app = web.Application()
    app.router.add_post("/hook", receiver.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    metrics = Metrics()
    session = new_session(  # no loopback
        "t", address_policy=AddressPolicy()
    )
    delivery = WebhookDelivery(pool, session, f"http://127.0.0.1:{port}/hook",
                               metrics.collection, max_backoff_seconds=0.3)
    try:
        await delivery.start()
        assert await delivery.take()
        await fill_outbox(pool)
        assert await delivery.deliver_round() == 0
        errors = await pool.fetch("SELECT DISTINCT last_error FROM change_events "
                                  "WHERE last_error IS NOT NULL")
        assert [r["last_error"] for r in errors] == ["ssrf"]
        assert receiver.requests == 0
    finally:
        await session.close()
        await runner.cleanup()
        await pool.close()


async def test_two_daemons_share_one_deliverer(db_url: str) -> None:
    pool = await asyncpg.create_pool(db_url)
    accepted: list[dict[str, object]] = []

    async def handle(request: web.Request) -> web.Response:
        accepted.append(await request.json())
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/hook", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    session = new_session(
        "t", address_policy=AddressPolicy(["127.0.0.0/8"])
    )
    deliveries = [
        WebhookDelivery(pool, session, f"http://127.0.0.1:{port}/hook", Metrics().collection)
        for _ in range(2)
    ]
    await deliveries[0].start()
    tasks = [asyncio.create_task(delivery.run()) for delivery in deliveries]
    try:
        await fill_outbox(pool)
        await wait_for(lambda: len(accepted) >= URLS * EVENTS_PER_URL)
        # Once every event is marked delivered nothing sends it again: what arrived is all.
        deadline = time.monotonic() + 30
        while await pool.fetchval(
                "SELECT count(*) FROM change_events WHERE delivered_at IS NULL"):
            assert time.monotonic() < deadline, "events left unmarked"
            await asyncio.sleep(0.05)
        holder = await pool.fetchrow("SELECT owner FROM delivery_lease")
        assert holder is not None and holder["owner"] in {d.owner for d in deliveries}
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await session.close()
        await runner.cleanup()
        await pool.close()
    ids = [event["id"] for event in accepted]
    assert len(ids) == len(set(ids)) == URLS * EVENTS_PER_URL
