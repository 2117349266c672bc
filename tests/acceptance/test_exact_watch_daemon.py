"""Changes a watcher cares about (issue 35), through the CLI and the real daemon: a price
changed on a long page watched exactly raises an event whose diff shows both prices;
``crawler diff`` between versions whose texts differ is never empty; and a change of rule
(exact watching turned on, a new watched region) compares the next fetch with the previous
version under the new rule instead of taking it as a new baseline."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import time
from collections.abc import AsyncIterator

import asyncpg
import pytest
from aiohttp import web
from daemon import daemon_env, start_daemon, stop_daemon

pytestmark = pytest.mark.timeout(240)

WAIT_SECONDS = 60.0
# About 400 words: a price changed among them moves the simhash by fewer than 6 bits.
FILLER = " ".join(f"item{i} description{i % 37}" for i in range(200))


class Shop:
    """One product page whose price the test changes."""

    def __init__(self) -> None:
        self.price = "12.50"

    def page(self) -> str:
        return (f"<html><head><title>Shop</title></head><body>\n<p>{FILLER}</p>\n"
                f"<p>Price: <span id='price'>{self.price}</span> EUR</p>\n</body></html>")

    async def handle(self, request: web.Request) -> web.Response:
        if request.path == "/robots.txt":
            return web.Response(status=404)
        return web.Response(text=self.page(), content_type="text/html")


@pytest.fixture
async def shop() -> AsyncIterator[tuple[Shop, str]]:
    pages = Shop()
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", pages.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield pages, f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


async def cli(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    """A crawler command, run without blocking this loop (the test server lives in it)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawler", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def ok(env: dict[str, str], *args: str) -> str:
    code, out, err = await cli(env, *args)
    assert code == 0, (args, out, err)
    return out


async def observations(pool: asyncpg.Pool, url: str) -> list[asyncpg.Record]:
    return await pool.fetch(
        "SELECT o.changed, o.simhash_distance, o.content_hash FROM observations AS o "
        "JOIN urls AS u ON u.id = o.url_id WHERE u.url = $1 ORDER BY o.fetched_at", url)


async def fetched(pool: asyncpg.Pool, env: dict[str, str], url: str, shop: Shop,
                  proc: asyncio.subprocess.Process, *, after: int = 0) -> asyncpg.Record:
    """The first fetch of ``url`` that got the shop's current page, after its ``after``-th
    fetch (``crawler recheck`` makes it due now): the daemon may fetch on its own schedule
    too, so the fetch that saw a change is found by the body's hash, not by counting."""
    body = hashlib.sha1(shop.page().encode()).digest()
    await ok(env, "recheck", url)
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        rows = (await observations(pool, url))[after:]
        seen = [row for row in rows if row["content_hash"] == body]
        if seen:
            return seen[0]
        assert proc.returncode is None, "the daemon died"
        assert time.monotonic() < deadline, f"no fetch of the current {url}"
        await asyncio.sleep(0.1)


async def fetch_count(pool: asyncpg.Pool, url: str) -> int:
    return len(await observations(pool, url))


async def events(pool: asyncpg.Pool, url: str) -> list[dict[str, object]]:
    rows = await pool.fetch(
        "SELECT e.payload FROM change_events AS e JOIN urls AS u ON u.id = e.url_id "
        "WHERE u.url = $1 AND e.kind = 'changed' ORDER BY e.fetched_at", url)
    return [json.loads(r["payload"]) if isinstance(r["payload"], str) else dict(r["payload"])
            for r in rows]


def settings(db_url: str) -> dict[str, str]:
    # A day between scheduled fetches: every fetch after the first is one `crawler recheck`
    # asked for.
    return daemon_env(db_url, schedule="uniform", default_interval="86400",
                      politeness_delay="0.05", poll_interval="0.1")


async def test_a_price_change_watched_exactly_is_an_event_with_both_prices(
    db_url: str, shop: tuple[Shop, str]
) -> None:
    pages, origin = shop
    exact, plain = f"{origin}/exact", f"{origin}/plain"
    env = settings(db_url)
    await ok(env, "seed", "--exact", exact)
    await ok(env, "seed", plain)
    shown = await ok(env, "watch", exact)
    assert "changes: any change of the text (exact, the URL's own)" in shown
    assert "simhash distance of at least the threshold" in await ok(env, "watch", plain)
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=2)
    proc = await start_daemon(env)
    try:
        for url in (exact, plain):
            assert (await fetched(pool, env, url, pages, proc))["changed"] is None
        pages.price = "15.99"
        watched = await fetched(pool, env, exact, pages, proc)
        default = await fetched(pool, env, plain, pages, proc)
    finally:
        out = await stop_daemon(proc)
    assert proc.returncode == 0, out[-3000:]
    try:
        # The default rule: a few bits, under the threshold; watched exactly: a change.
        assert default["changed"] is False and default["simhash_distance"] < 6
        assert watched["changed"] is True
        assert watched["simhash_distance"] == default["simhash_distance"]
        assert await events(pool, plain) == []
        (event,) = await events(pool, exact)
    finally:
        await pool.close()
    assert event["removed"] == ["Price: 12.50 EUR"] and event["added"] == ["Price: 15.99 EUR"]
    (word,) = event["words"]  # type: ignore[misc]
    assert (word["removed"], word["added"]) == ("12.50", "15.99")
    assert word["before"].endswith("Price:") and word["after"].startswith("EUR")
    assert event["diff_truncated"] is False

    # `crawler diff`: the change, both prices, the distance in the header.
    diff = (await ok(env, "diff", exact)).splitlines()
    distance = watched["simhash_distance"]
    assert diff[0] == f"{exact}: simhash distance {distance} bits"
    assert "-Price: 12.50 EUR" in diff and "+Price: 15.99 EUR" in diff
    words = await ok(env, "diff", "--words", exact)
    assert "Price: [-12.50-]{+15.99+} EUR" in words
    # Never empty where the texts differ, even where the simhash rule saw no change.
    plain_diff = (await ok(env, "diff", plain)).splitlines()
    assert plain_diff[0] == f"{plain}: simhash distance {distance} bits"
    assert "-Price: 12.50 EUR" in plain_diff and "+Price: 15.99 EUR" in plain_diff
    # Equal texts: one line that says so.
    first = json.loads(await ok(env, "versions", "--json", plain))[0]["fetched_at"]
    same = (await ok(env, "diff", "--from", first, "--to", first, plain)).splitlines()
    assert len(same) == 1 and "visible text identical" in same[0], same


async def test_rule_changes_compare_with_the_previous_version(
    db_url: str, shop: tuple[Shop, str]
) -> None:
    pages, origin = shop
    url = f"{origin}/rules"
    env = settings(db_url)
    await ok(env, "seed", url)
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=2)
    proc = await start_daemon(env)
    try:
        await fetched(pool, env, url, pages, proc)
        # Exact watching turned on after the last fetch: that version has no text hash; it is
        # taken from the stored version, and the changed price is a change.
        assert "(exact, the URL's own)" in await ok(env, "watch", "--exact", url)
        pages.price = "15.99"
        assert (await fetched(pool, env, url, pages, proc))["changed"] is True
        # A new watched region: the previous version is fingerprinted under it, and the
        # next fetch is a change (or not), never a new baseline.
        assert "watch #price" in await ok(env, "watch", "--watch", "#price", url)
        pages.price = "16.49"
        assert (await fetched(pool, env, url, pages, proc))["changed"] is True
        assert "whole page" in await ok(env, "watch", "--clear", url)
        cleared = await fetched(pool, env, url, pages, proc, after=await fetch_count(pool, url))
        assert cleared["changed"] is False
        # Back to the simhash rule: the price alone is under its threshold again.
        assert "simhash distance" in await ok(env, "watch", "--no-exact", url)
        pages.price = "17.00"
        assert (await fetched(pool, env, url, pages, proc))["changed"] is False
        changed = [e["words"] for e in await events(pool, url)]
    finally:
        out = await stop_daemon(proc)
        await pool.close()
    assert proc.returncode == 0, out[-3000:]
    assert [[(w["removed"], w["added"]) for w in ws] for ws in changed] == [  # type: ignore[union-attr, index]
        [("12.50", "15.99")], [("15.99", "16.49")]]


async def test_a_page_joining_a_window_keeps_its_baseline(
    db_url: str, shop: tuple[Shop, str]
) -> None:
    """A page fetched alone, then made the root of a window watched exactly on ``#price``:
    its next fetch is judged against its previous version under the window's rule."""
    pages, origin = shop
    url = f"{origin}/alone"
    env = settings(db_url)
    await ok(env, "seed", url)
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=2)
    proc = await start_daemon(env)
    try:
        await fetched(pool, env, url, pages, proc)
        # Changed first: joining the window makes the page due at once.
        pages.price = "12.51"
        await ok(env, "seed", "--window", "5", "--watch", "#price", "--exact", url)
        shown = await ok(env, "watch", url)
        assert f"watch #price (window of {url})" in shown and "(exact, its window's)" in shown
        joined = await fetched(pool, env, url, pages, proc)
    finally:
        out = await stop_daemon(proc)
        await pool.close()
    assert proc.returncode == 0, out[-3000:]
    assert joined["changed"] is True
