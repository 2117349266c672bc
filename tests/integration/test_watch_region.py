"""The watched region end to end (issue 15): regions set with ``crawler seed`` and
``crawler watch``, pages served over real HTTP on loopback, fetched by the real worker, and the
change decisions read back from PostgreSQL."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg
import pytest
from aiohttp import web

from crawler.daemon.worker import Worker
from crawler.db import queries
from crawler.net.fetch import new_session
from crawler.net.ssrf import AddressPolicy
from crawler.settings import Settings

# Each test with the plain statements and with the Citus variants (conftest.statements).
pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("statements")]

WAIT_SECONDS = 90.0
# Two unrelated paragraphs: swapping one for the other moves the simhash far past the threshold.
TEXT_A = ("river mountain forest lake valley meadow canyon glacier island desert prairie "
          "tundra marsh delta plateau ridge summit harbour lagoon reef")
TEXT_B = ("violin trumpet cello flute oboe clarinet bassoon trombone harp piano organ "
          "guitar banjo mandolin ukulele accordion harmonica tuba drum cymbal")


class NullEvents:
    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


def crawler(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CRAWLER_DATABASE_URL": db_url}
    return subprocess.run([sys.executable, "-m", "crawler", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def noise(count: int) -> str:
    """Forty words that share nothing with the previous request's."""
    return " ".join(hashlib.sha256(f"{count}-{i}".encode()).hexdigest()[:10] for i in range(40))


class Site:
    """Pages whose parts the test changes; ``/noisy`` has an advert new at every request.
    Answers If-None-Match with 304 when the body is unchanged, as a real server would."""

    def __init__(self) -> None:
        self.main = TEXT_A
        self.other = TEXT_A
        self.requests = 0

    def page(self, path: str) -> str:
        advert = noise(self.requests) if path == "/noisy" else "Our sponsor"
        return (f"<html><head><title>Page</title></head><body>"
                f"<nav class='ad'>{advert}</nav><div id='main'><p>{self.main}</p></div>"
                f"<div id='other'><p>{self.other}</p></div></body></html>")

    async def handle(self, request: web.Request) -> web.Response:
        if request.path == "/robots.txt":
            return web.Response(status=404)
        self.requests += 1
        body = self.page(request.path)
        etag = '"' + hashlib.sha256(body.encode()).hexdigest()[:16] + '"'
        if request.headers.get("If-None-Match") == etag:
            return web.Response(status=304, headers={"ETag": etag})
        return web.Response(text=body, content_type="text/html", headers={"ETag": etag})


@pytest.fixture
async def site() -> AsyncIterator[tuple[Site, str]]:
    pages = Site()
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", pages.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    server = web.TCPSite(runner, "127.0.0.1", 0)
    await server.start()
    port = runner.addresses[0][1]
    yield pages, f"http://127.0.0.1:{port}"
    await runner.cleanup()


@pytest.fixture
async def pool(db_url: str) -> AsyncIterator[asyncpg.Pool]:
    connections = await asyncpg.create_pool(db_url, min_size=1, max_size=4)
    yield connections
    await connections.close()


@pytest.fixture
async def worker(pool: asyncpg.Pool) -> AsyncIterator[Worker]:
    session = new_session("watch-test", address_policy=AddressPolicy(["127.0.0.0/8"]))
    settings = Settings(concurrency=4, lease_seconds=30.0, poll_interval=0.05,
                        politeness_delay=0.01, total_timeout=5.0, default_interval=3600.0)
    running = Worker(settings, "watch-test", pool, session, NullEvents())  # type: ignore[arg-type]
    task = asyncio.create_task(running.run())
    yield running
    running.stop()
    await task
    await asyncio.gather(*running.host_tasks, return_exceptions=True)
    await session.close()


async def wait_for(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not await condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def fetch_now(pool: asyncpg.Pool, url: str) -> asyncpg.Record:
    """Make ``url`` due, wait for the worker to record one more fetch; its observation."""
    before = await pool.fetchval("SELECT fetch_count FROM urls WHERE url = $1", url)
    host_id = await pool.fetchval(
        "UPDATE urls SET next_fetch_at = now() WHERE url = $1 RETURNING host_id", url
    )
    # refresh_host_due skips a host the worker holds locked (its record or release is being
    # written); like the planner, retry until it took.
    while not await queries.fetch(pool, "refresh_host_due", [host_id]):
        await asyncio.sleep(0.05)

    async def fetched() -> bool:
        count = await pool.fetchval("SELECT fetch_count FROM urls WHERE url = $1", url)
        return bool(count > before)

    await wait_for(fetched, f"a fetch of {url}")
    row = await pool.fetchrow(
        "SELECT o.* FROM observations AS o JOIN urls AS u ON u.id = o.url_id "
        "WHERE u.url = $1 ORDER BY o.fetched_at DESC LIMIT 1", url
    )
    assert row is not None
    return row


async def change_count(pool: asyncpg.Pool, url: str) -> int:
    return int(await pool.fetchval("SELECT change_count FROM urls WHERE url = $1", url))


async def test_an_ignored_element_changing_at_every_fetch_is_no_change(
    db_url: str, pool: asyncpg.Pool, site: tuple[Site, str], worker: Worker
) -> None:
    _, origin = site
    plain, ignoring = f"{origin}/noisy", f"{origin}/noisy?v=ignoring"
    assert crawler(db_url, "seed", plain).returncode == 0
    seeded = crawler(db_url, "seed", "--ignore", "nav.ad", ignoring)
    assert seeded.returncode == 0, seeded.stderr
    for url in (plain, ignoring):
        await fetch_now(pool, url)
    for _ in range(3):
        assert (await fetch_now(pool, plain))["changed"] is True  # the advert alone is a change
        observed = await fetch_now(pool, ignoring)
        assert observed["changed"] is False and observed["content_changed"] is True
    assert await change_count(pool, ignoring) == 0
    shown = crawler(db_url, "show", ignoring)
    assert "ignore nav.ad (the URL's own)" in shown.stdout


async def test_a_watched_element_counts_and_the_rest_of_the_page_does_not(
    db_url: str, pool: asyncpg.Pool, site: tuple[Site, str], worker: Worker
) -> None:
    pages, origin = site
    url = f"{origin}/watched"
    seeded = crawler(db_url, "seed", "--window", "5", "--watch", "#main", url)
    assert seeded.returncode == 0, seeded.stderr
    await fetch_now(pool, url)
    pages.other = TEXT_B  # outside the watched region
    outside = await fetch_now(pool, url)
    assert outside["changed"] is False and outside["content_changed"] is True
    pages.main = TEXT_B  # inside it
    inside = await fetch_now(pool, url)
    assert inside["changed"] is True
    assert await change_count(pool, url) == 1
    shown = crawler(db_url, "show", url)
    assert f"watch #main (window of {url})" in shown.stdout


async def test_changing_the_region_takes_a_baseline_not_a_change(
    db_url: str, pool: asyncpg.Pool, site: tuple[Site, str], worker: Worker
) -> None:
    pages, origin = site
    url = f"{origin}/page"
    pages.other = TEXT_B
    assert crawler(db_url, "seed", url).returncode == 0
    await fetch_now(pool, url)
    assert (await fetch_now(pool, url))["outcome"] == "not_modified"  # validators in use
    bad = crawler(db_url, "watch", url, "--watch", "div[")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "not a valid CSS selector" in bad.stderr
    changed = crawler(db_url, "watch", url, "--watch", "#other")
    assert changed.returncode == 0, changed.stderr
    assert "watch #other" in changed.stdout
    # Same bytes, another region: fetched in full (no 304), a new baseline, not a change.
    baseline = await fetch_now(pool, url)
    assert baseline["outcome"] == "ok" and baseline["changed"] is False
    assert baseline["simhash_distance"] is None
    assert await change_count(pool, url) == 0
    stored = await pool.fetchval("SELECT fingerprint_region FROM urls WHERE url = $1", url)
    assert "#other" in stored
    pages.main = TEXT_B  # outside the new region
    assert (await fetch_now(pool, url))["changed"] is False
    pages.other = TEXT_A  # inside it
    assert (await fetch_now(pool, url))["changed"] is True
    cleared = crawler(db_url, "watch", url, "--clear")
    assert cleared.returncode == 0 and "whole page" in cleared.stdout
    assert (await fetch_now(pool, url))["changed"] is False
    assert await change_count(pool, url) == 1
