"""A re-read robots.txt's new ``Sitemap:`` lines join the host's sitemaps (issue 37): the
daemon's fetch loop and its sitemap reader both pass each re-read to
``crawler.db.sitemaps.follow_robots``, which registers the lines the new body adds, due at
once, for a host read through its sitemaps, and leaves a host crawled from its URLs alone."""

from __future__ import annotations

import asyncpg

from crawler.core.hostid import host_id
from crawler.db import sitemaps as db

SITE = "https://a.example"
OTHER = "https://b.example"
BEFORE = f"User-agent: *\nDisallow: /private\nSitemap: {SITE}/sitemap.xml\n"
AFTER = BEFORE + f"Sitemap: {SITE}/news.xml\nSitemap: {SITE}/sitemap.xml\n"


async def test_a_new_sitemap_line_joins_a_host_read_through_its_sitemaps(db_url: str) -> None:
    conn = await asyncpg.connect(db_url)
    try:
        await db.ensure_hosts(conn, [SITE, OTHER])
        await db.register(conn, [f"{SITE}/sitemap.xml"], robots_origin=SITE, depth=0,
                          source=db.ROBOTS, found_on=None)

        # The line the new body adds, once; the one it kept is no news.
        assert await db.follow_robots(conn, host_id(SITE), SITE, BEFORE, AFTER) == [
            f"{SITE}/news.xml"]
        row = await conn.fetchrow(
            "SELECT robots_origin, depth, source, found_on, next_read_at <= now() AS due "
            "FROM sitemaps WHERE host_id = $1 AND url = $2", host_id(SITE), f"{SITE}/news.xml")
        assert row is not None
        assert dict(row) == {"robots_origin": SITE, "depth": 0, "source": db.ROBOTS,
                             "found_on": None, "due": True}
        # Read again (a daemon that had not stored the body in between): nothing new.
        assert await db.follow_robots(conn, host_id(SITE), SITE, BEFORE, AFTER) == []
        # The first body a host is seen with counts whole.
        assert await db.follow_robots(conn, host_id(SITE), SITE, None, AFTER) == []
        assert await conn.fetchval("SELECT count(*) FROM sitemaps WHERE host_id = $1",
                                   host_id(SITE)) == 2

        # A host crawled from its URLs (no sitemap of it known) does not start reading them.
        other = f"Sitemap: {OTHER}/sitemap.xml\n"
        assert await db.follow_robots(conn, host_id(OTHER), OTHER, None, other) == []
        assert await conn.fetchval("SELECT count(*) FROM sitemaps WHERE host_id = $1",
                                   host_id(OTHER)) == 0
    finally:
        await conn.close()
