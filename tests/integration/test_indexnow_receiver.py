"""The IndexNow receiver in-process (crawler.daemon.indexnow), on a real database and a
loopback site: a key check waits for a host a daemon holds, the ping is answered 202 (the
protocol's "key validation pending") and its URL taken once the key file confirms the key;
the key file's request moves the host's politeness clock; addresses the SSRF policy refuses
are never asked."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest
from aiohttp import web
from inprocess import serve_loopback

from crawler.core.indexnow import Ping, read_get
from crawler.daemon import indexnow
from crawler.daemon.indexnow import IndexNowReceiver
from crawler.db import frontier
from crawler.metrics import Metrics
from crawler.settings import Settings

pytestmark = pytest.mark.timeout(120)

KEY = "0123456789abcdef-key"
DELAY = 1.5


def ping(url: str, key: str = KEY) -> Ping:
    read = read_get({"url": url, "key": key})
    assert isinstance(read, Ping), read
    return read


async def wait_for_value(pool: asyncpg.Pool, query: str, *args: object,
                         seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not await pool.fetchval(query, *args):
        assert time.monotonic() < deadline, query
        await asyncio.sleep(0.05)


async def test_a_key_check_waits_for_a_held_host_and_answers_202(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(indexnow, "ANSWER_WAIT_SECONDS", 0.5)
    requests: list[tuple[float, str]] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        requests.append((time.time(), request.path))
        if request.path == "/robots.txt":
            return web.Response(text="User-agent: *\nAllow: /\n")
        if request.path == f"/{KEY}.txt":
            return web.Response(text=KEY)
        return web.Response(text="<html><body>page</body></html>", content_type="text/html")

    settings = Settings(database_url=db_url, allow_networks=["127.0.0.0/8"],
                        politeness_delay=DELAY)
    metrics = Metrics()
    receiver = IndexNowReceiver(settings, metrics.pings)
    pool = await asyncpg.create_pool(db_url)
    try:
        async with serve_loopback(handle, "127.0.0.85") as origin:
            page = origin + "/page"
            await frontier.seed(pool, [(page, 1.0)], time.time() + 86400)
            # A daemon holds the host for 2 more seconds.
            held_until = time.time() + 2.0
            await pool.execute(
                "UPDATE hosts SET lease_owner = 'a-daemon', "
                "lease_expires_at = now() + interval '2 seconds'")
            await receiver.start(db_url)
            answer = await receiver.receive(ping(page))
            assert (answer.outcome, answer.status) == ("pending", 202), answer
            assert requests == []
            # Once the lease is over: robots.txt (never fetched for this host), the key file a
            # politeness delay later, and the URL due with its hint.
            await wait_for_value(pool, "SELECT next_fetch_at <= now() FROM urls")
            assert [path for _, path in requests] == ["/robots.txt", f"/{KEY}.txt"]
            assert requests[0][0] >= held_until - 0.05
            assert requests[1][0] - requests[0][0] >= DELAY - 0.01
            # The key file's request moved the host's clock: the page waits its turn.
            row = await pool.fetchrow(
                "SELECT date_part('epoch', next_request_at) AS next_request, lease_owner, "
                "date_part('epoch', next_due_at) AS due FROM hosts")
            assert row["next_request"] >= requests[1][0] + DELAY - 0.05
            assert row["lease_owner"] is None
            assert row["due"] <= time.time()
            assert await pool.fetchval(
                "SELECT count(*) FROM url_hints WHERE source = 'indexnow' AND kind = 'ping'"
            ) == 1
            # The key is trusted now: the next ping is taken at once, with no request.
            answer = await receiver.receive(ping(page))
            assert answer.outcome == "accepted", answer
            assert len(requests) == 2
    finally:
        await receiver.close()
        await pool.close()
    assert metrics.registry.get_sample_value(
        "crawler_indexnow_key_fetches_total", {"result": "valid"}) == 1


async def test_an_address_the_policy_refuses_is_never_asked(db_url: str) -> None:
    requests: list[str] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        requests.append(request.path)
        return web.Response(text=KEY)

    settings = Settings(database_url=db_url, allow_networks=[])  # loopback refused
    metrics = Metrics()
    receiver = IndexNowReceiver(settings, metrics.pings)
    pool = await asyncpg.create_pool(db_url)
    try:
        async with serve_loopback(handle, "127.0.0.85") as origin:
            await frontier.seed(pool, [(origin + "/page", 1.0)], time.time() + 86400)
            await receiver.start(db_url)
            answer = await receiver.receive(ping(origin + "/page"))
            assert (answer.outcome, answer.status) == ("wrong_key", 403), answer
            # A second key within the interval is refused without a check.
            answer = await receiver.receive(ping(origin + "/page", "another-key-0"))
            assert (answer.outcome, answer.status) == ("wrong_key", 403), answer
    finally:
        await receiver.close()
        await pool.close()
    assert requests == []
    assert metrics.registry.get_sample_value(
        "crawler_indexnow_key_fetches_total", {"result": "failed"}) == 1
