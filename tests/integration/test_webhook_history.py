"""A webhook starts from now, history goes to it only on request, and deliveries are signed.

- A receiver enabled after 100 stored events gets none of them; the first event stored after
  it started arrives (events go in id order, so anything older would have come first); then
  ``crawler changes --replay-to-webhook --since T`` (the real command) sends the 100.
- With ``CRAWLER_WEBHOOK_SECRET`` every delivery verifies against the Standard Webhooks
  reference algorithm, computed here from the specification: HMAC-SHA256 with the base64 key
  after ``whsec_``, over ``{webhook-id}.{webhook-timestamp}.{raw body}``, sent as
  ``v1,<base64>`` in ``webhook-signature``.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import hashlib
import hmac
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable

import asyncpg
import pytest
from aiohttp import web

from crawler.daemon.webhook import WebhookDelivery
from crawler.db import frontier
from crawler.metrics import Metrics
from crawler.net.fetch import new_session
from crawler.net.ssrf import AddressPolicy

pytestmark = pytest.mark.timeout(120)

HISTORY = 100
SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()


class Receiver:
    """Accepts every POST; keeps each request's raw body and headers."""

    def __init__(self) -> None:
        self.requests: list[tuple[bytes, dict[str, str]]] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append((await request.read(), dict(request.headers)))
        return web.Response(status=204)

    def ids(self) -> list[int]:
        return [int(json.loads(body)["id"]) for body, _ in self.requests]


async def serve(receiver: Receiver) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_post("/hook", receiver.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}/hook"


async def add_events(pool: asyncpg.Pool, count: int, tag: str) -> list[int]:
    """``count`` change events of one seeded URL, one second apart; their ids."""
    url = "http://127.0.0.1:1/watched"
    await frontier.seed(pool, [(url, 1.0)], time.time())
    row = await pool.fetchrow("SELECT id, host_id FROM urls WHERE url = $1", url)
    ids = []
    base = await pool.fetchval("SELECT count(*) FROM change_events")
    for n in range(count):
        ids.append(await pool.fetchval(
            "INSERT INTO change_events (url_id, fetched_at, kind, payload, host_id) "
            "VALUES ($1, now() - interval '1 hour' + $2 * interval '1 second', 'changed', "
            "$3::jsonb, $4) RETURNING id",
            row["id"], float(base + n), json.dumps({"url": url, "kind": "changed", "tag": tag}),
            row["host_id"],
        ))
    return ids


async def wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def crawler(db_url: str, *args: str, **settings: str) -> tuple[int, str, str]:
    env = {**os.environ, "CRAWLER_DATABASE_URL": db_url,
           **{f"CRAWLER_{k.upper()}": v for k, v in settings.items()}}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawler", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def delivery_for(pool: asyncpg.Pool, url: str, secret: str | None = None) -> WebhookDelivery:
    session = new_session("t", address_policy=AddressPolicy(["127.0.0.0/8"]))
    return WebhookDelivery(pool, session, url, Metrics().collection, secret=secret,
                           max_backoff_seconds=0.5)


async def with_delivery(
    pool: asyncpg.Pool, url: str, body: Callable[[WebhookDelivery], Awaitable[None]],
    secret: str | None = None,
) -> None:
    """Run ``body`` while a deliverer runs as the daemon runs it."""
    delivery = delivery_for(pool, url, secret)
    task = asyncio.create_task(delivery.run())
    try:
        await body(delivery)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await delivery.session.close()


async def test_a_new_webhook_gets_no_history_unless_replay_is_asked(db_url: str) -> None:
    pool = await asyncpg.create_pool(db_url)
    receiver = Receiver()
    runner, url = await serve(receiver)
    try:
        history = await add_events(pool, HISTORY, "history")
        before_replay = dt.datetime.now(dt.UTC)

        async def body(delivery: WebhookDelivery) -> None:
            await wait_for(lambda: delivery.start_id is not None)
            fresh = await add_events(pool, 1, "fresh")
            await wait_for(lambda: fresh[0] in receiver.ids())
            # Delivered in id order: had the history been due, it would have come first.
            assert receiver.ids() == fresh
            code, out, err = await crawler(
                db_url, "changes", "--replay-to-webhook", "--since",
                (before_replay - dt.timedelta(hours=2)).isoformat(), webhook_url=url,
            )
            assert code == 0, err
            assert f"queued {HISTORY + 1} events" in out, out
            await wait_for(lambda: set(history) <= set(receiver.ids()))

        await with_delivery(pool, url, body)
        replayed = receiver.ids()[1:]
        assert sorted(replayed) == sorted([*history, *receiver.ids()[:1]])
        assert replayed == sorted(replayed)  # in order, as any delivery
        assert await pool.fetchval(
            "SELECT count(*) FROM change_events WHERE delivered_at IS NULL") == 0
    finally:
        await runner.cleanup()
        await pool.close()


async def test_replay_needs_a_webhook_and_a_time(db_url: str) -> None:
    code, _, err = await crawler(db_url, "changes", "--replay-to-webhook", "--since", "1h")
    assert code == 2 and "CRAWLER_WEBHOOK_URL" in err, err
    code, _, err = await crawler(db_url, "changes", "--replay-to-webhook",
                                 webhook_url="http://127.0.0.1:9/hook")
    assert code == 2 and "--since" in err, err


def reference_verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """The Standard Webhooks verification, written from the specification."""
    msg_id = headers["webhook-id"]
    timestamp = headers["webhook-timestamp"]
    assert abs(time.time() - int(timestamp)) < 300  # the tolerance receivers apply
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{msg_id}.{timestamp}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    sent = [s.split(",", 1) for s in headers["webhook-signature"].split(" ")]
    return any(version == "v1" and hmac.compare_digest(sig, expected) for version, sig in sent)


async def test_deliveries_verify_with_the_standard_webhooks_algorithm(db_url: str) -> None:
    pool = await asyncpg.create_pool(db_url)
    receiver = Receiver()
    runner, url = await serve(receiver)
    try:
        async def body(delivery: WebhookDelivery) -> None:
            await wait_for(lambda: delivery.start_id is not None)
            ids = await add_events(pool, 3, "signed")
            await wait_for(lambda: len(receiver.requests) >= len(ids))

        await with_delivery(pool, url, body, secret=SECRET)
        assert len(receiver.requests) == 3
        for raw, headers in receiver.requests:
            headers = {k.lower(): v for k, v in headers.items()}
            assert reference_verify(SECRET, headers, raw)
            assert headers["webhook-id"] == str(json.loads(raw)["id"])
            # A wrong secret or an altered body does not verify.
            other = "whsec_" + base64.b64encode(b"x" * 32).decode()
            assert not reference_verify(other, headers, raw)
            assert not reference_verify(SECRET, headers, raw + b" ")
    finally:
        await runner.cleanup()
        await pool.close()


async def test_a_malformed_secret_is_refused_in_one_line(db_url: str) -> None:
    code, _, err = await crawler(db_url, "changes", webhook_secret="not a secret")
    assert code == 2, err
    assert "CRAWLER_WEBHOOK_SECRET" in err and "whsec_" in err, err
    assert len(err.strip().splitlines()) == 1, err
