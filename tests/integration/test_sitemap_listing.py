"""What a sitemap lists, read after read (crawler.db.sitemaps): URLs it adds join the
collection, a URL no sitemap of its host lists any more is flagged unlisted (and the flag goes
when one lists it again), a partial read drops nothing, an index's forgotten files take their
URLs with them, and a page's feeds join only a host read through its sitemaps."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import asyncpg
import pytest

from crawler.core.hostid import host_id
from crawler.core.model import FetchResult, Outcome, UrlRecord
from crawler.core.sitemap_schedule import SitemapState
from crawler.core.transition import HostContext, transition
from crawler.db import frontier
from crawler.db import sitemaps as db
from crawler.db.frontier import HostClaim, Lease
from crawler.db.queries import QUERIES

ORIGIN = "http://site.example"
KEY = host_id(ORIGIN)


@pytest.fixture
async def pool(db_url: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=4)
    assert pool is not None
    try:
        await frontier.seed(pool, [(f"{ORIGIN}/a{i}", 1.0) for i in range(1, 5)], time.time())
        yield pool
    finally:
        await pool.close()


async def sitemap(pool: asyncpg.Pool, path: str, source: str = db.ROBOTS,
                  found_on: str | None = None) -> db.SitemapRow:
    await db.register(pool, [ORIGIN + path], robots_origin=ORIGIN, depth=1 if found_on else 0,
                      source=source, found_on=found_on)
    row = await db.sitemap_state(pool, ORIGIN + path)
    assert row is not None
    return row


async def unlisted(pool: asyncpg.Pool) -> set[str]:
    rows = await pool.fetch("SELECT url FROM urls WHERE unlisted_at IS NOT NULL")
    return {r["url"].removeprefix(ORIGIN) for r in rows}


def urls(*names: str) -> list[str]:
    return [ORIGIN + "/" + n for n in names]


async def test_a_url_no_sitemap_lists_any_more_is_flagged_until_one_does(
    pool: asyncpg.Pool,
) -> None:
    one, two = await sitemap(pool, "/one.xml"), await sitemap(pool, "/two.xml")
    now = time.time()
    change = await db.apply_listing(pool, one, urls("a1", "a2", "a3"), whole=True, now=now,
                                    seed_new=True)
    assert (change.seeded, change.added, change.dropped) == (0, 3, 0)
    change = await db.apply_listing(pool, two, urls("a3", "a4"), whole=True, now=now,
                                    seed_new=True)
    assert (change.added, change.dropped) == (2, 0)
    # one drops a2 and a3 and adds a5, a URL the collection did not have.
    change = await db.apply_listing(pool, one, urls("a1", "a5"), whole=True, now=now + 1,
                                    seed_new=True)
    assert (change.seeded, change.added, change.dropped, change.unlisted) == (1, 1, 2, 1)
    assert await unlisted(pool) == {"/a2"}  # a3 is still two's
    assert await pool.fetchval("SELECT count(*) FROM urls WHERE url = $1", ORIGIN + "/a5") == 1
    # A read cut short (or invalid) lists what it got; it drops nothing.
    change = await db.apply_listing(pool, two, [], whole=False, now=now + 2, seed_new=True)
    assert (change.added, change.dropped) == (0, 0)
    # Listed again: the flag goes.
    change = await db.apply_listing(pool, two, urls("a2", "a3", "a4"), whole=True,
                                    now=now + 3, seed_new=True)
    assert (change.added, change.relisted) == (1, 1)
    assert await unlisted(pool) == set()
    # The flag is shown: the row, as `crawler show` reads it.
    await db.apply_listing(pool, two, urls("a3"), whole=True, now=now + 4, seed_new=True)
    await db.apply_listing(pool, one, urls("a1"), whole=True, now=now + 4, seed_new=True)
    assert await unlisted(pool) == {"/a2", "/a4", "/a5"}
    # A URL removed (as `crawler remove` removes it) takes its listing with it.
    removed = await pool.fetch("DELETE FROM urls WHERE url = $1 RETURNING id, host_id",
                               ORIGIN + "/a3")
    await pool.execute(QUERIES["remove_sitemap_urls"], [r["id"] for r in removed],
                       [r["host_id"] for r in removed])
    assert await pool.fetchval("SELECT count(*) FROM sitemap_urls") == 1


async def test_an_index_that_no_longer_names_a_file_forgets_it_and_what_it_listed(
    pool: asyncpg.Pool,
) -> None:
    index = await sitemap(pool, "/index.xml")
    one = await sitemap(pool, "/one.xml", db.INDEX, index.url)
    two = await sitemap(pool, "/two.xml", db.INDEX, index.url)
    now = time.time()
    await db.apply_listing(pool, one, urls("a1", "a2"), whole=True, now=now, seed_new=False)
    await db.apply_listing(pool, two, urls("a2", "a3"), whole=True, now=now, seed_new=False)
    forgotten, flagged = await db.forget_children(pool, index, [two.url], now + 1)
    assert (forgotten, flagged) == (1, 1)
    assert await unlisted(pool) == {"/a1"}
    assert {r["url"] for r in await pool.fetch("SELECT url FROM sitemaps")} == {index.url,
                                                                                two.url}


async def test_a_pages_feeds_join_a_host_read_through_its_sitemaps(pool: asyncpg.Pool) -> None:
    record = UrlRecord(url_id=1, url=ORIGIN + "/a1", host_id=KEY)
    body = (b'<html><head><link rel="alternate" type="application/atom+xml" href="/feed">'
            b'<link rel="alternate" type="application/rss+xml" '
            b'href="http://other.example/rss"></head><body>x</body></html>')
    from crawler.core.backoff import HostHealth
    from crawler.core.patterns import EVERY_URL
    from crawler.core.schedule import SchedulePolicy
    from crawler.settings import default_settings

    done = transition(record, FetchResult(time.time(), 0.1, Outcome.OK, status=200, body=body,
                                          content_type="text/html"),
                      HostContext(HostHealth(), 1.0, 0.0),
                      SchedulePolicy(default_settings()), url_filter=EVERY_URL,
                      now=time.time(), rng_value=0.5)
    claim = HostClaim(KEY, ORIGIN, None, Lease(KEY, "me", 1, time.monotonic() + 60))
    write = db.page_feeds(claim, done)
    assert write is not None
    async with pool.acquire() as conn:
        await write(conn, done)
    # Not a host read through sitemaps: nothing registered (and not asked again soon).
    assert await pool.fetchval("SELECT count(*) FROM sitemaps") == 0
    assert db.page_feeds(claim, done) is None
    db._known_feeds.seen.clear()
    await sitemap(pool, "/sitemap.xml", db.SEED)
    write = db.page_feeds(claim, done)
    assert write is not None
    async with pool.acquire() as conn:
        await write(conn, done)
    rows = await pool.fetch("SELECT url, source, found_on, robots_origin FROM sitemaps "
                            "WHERE source = 'page'")
    assert [dict(r) for r in rows] == [{"url": ORIGIN + "/feed", "source": "page",
                                        "found_on": ORIGIN + "/a1", "robots_origin": None}]
    row = await db.sitemap_state(pool, ORIGIN + "/feed")
    assert row is not None and row.vouching_origin == ORIGIN  # the page's site vouches for it
    assert row.state == SitemapState(host_id=KEY)
