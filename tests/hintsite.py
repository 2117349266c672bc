"""A loopback web whose sitemaps tell the truth, lie, or say nothing, crawled in rounds by an
in-process worker and sitemap reader (issue 38's tests: hint trust and ``crawler explain``).

Four hosts at one port, each with ``PAGES`` pages:

- ``truthful``: its sitemap's ``lastmod`` is each page's last change (or, once ``silent``,
  stays where it was while the pages keep changing);
- ``now``: ``lastmod`` is the moment the sitemap is read, on every read;
- ``random``: ``lastmod`` is a random date of the past year, drawn anew at every read;
- ``plain``: no sitemap; its pages are seeded by hand and have no hints at all.

A round is explicit: the test changes pages (``change``), has the sitemaps read
(``read_sitemaps``: every file made due, then the reader run until none is), and has every
page fetched once more (``fetch_all``: made due, then the worker run until each has one more
observation). No fixed sleeps: each step waits for what it needs.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import random
import time
from collections.abc import Iterable
from types import TracebackType

import asyncpg
from aiohttp import web
from inprocess import NullEvents, quick_settings, wait_for
from loopback import ManyAddressServer, declare_crawler

from crawler.core.schedule import SchedulePolicy
from crawler.daemon.sitemaps import SitemapKeeper
from crawler.daemon.worker import Worker
from crawler.db import frontier
from crawler.db import sitemaps as db
from crawler.net.fetch import new_session
from crawler.net.ssrf import AddressPolicy
from crawler.settings import default_settings

ADDRESSES = {"truthful": "127.0.0.91", "now": "127.0.0.92", "random": "127.0.0.93",
             "plain": "127.0.0.94"}
PAGES = 8
DELAY = 0.01  # politeness, seconds
USER_AGENT = "hintbot/1.0"
YEAR = 365 * 86400.0


def _words(seed: str) -> str:
    rng = random.Random(seed)
    return " ".join(f"w{rng.randrange(2000)}" for _ in range(120))


def _w3c(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat()


class HintSite(ManyAddressServer):
    """The four hosts (module docstring); ``versions`` and ``changed_at`` per (host, page)."""

    def __init__(self, seed: int = 38) -> None:
        super().__init__(list(ADDRESSES.values()))
        self.rng = random.Random(seed)
        start = time.time() - 30 * 86400.0
        self.versions = {(name, p): 0 for name in ADDRESSES for p in range(PAGES)}
        self.changed_at = {(name, p): start for name in ADDRESSES for p in range(PAGES)}
        self.lastmod = dict(self.changed_at)  # what the truthful sitemap says
        self.silent = False  # the truthful site stops dating its changes

    def origin(self, name: str) -> str:
        return f"http://{ADDRESSES[name]}:{self.port}"

    def url(self, name: str, page: int) -> str:
        return f"{self.origin(name)}/p{page}"

    def urls(self, name: str) -> list[str]:
        return [self.url(name, p) for p in range(PAGES)]

    def change(self, names: Iterable[str], pages: Iterable[int]) -> None:
        now = time.time()
        for name in names:
            for p in pages:
                self.versions[(name, p)] += 1
                self.changed_at[(name, p)] = now
                if not (name == "truthful" and self.silent):
                    self.lastmod[(name, p)] = now

    async def handle(self, request: web.Request) -> web.StreamResponse:
        address = request.host.rsplit(":", 1)[0]
        name = next(n for n, a in ADDRESSES.items() if a == address)
        if request.path == "/sitemap.xml" and name != "plain":
            return web.Response(text=self.sitemap(name), content_type="application/xml")
        if request.path.startswith("/p") and request.path[2:].isdigit():
            page = int(request.path[2:])
            if page < PAGES:
                version = self.versions[(name, page)]
                body = (f"<html><head><title>{name} {page}</title></head><body><p>"
                        f"{_words(f'{name}/{page}/{version}')}</p></body></html>")
                return web.Response(text=body, content_type="text/html")
        return web.Response(status=404)

    def sitemap(self, name: str) -> str:
        now = time.time()
        entries = []
        for p in range(PAGES):
            if name == "truthful":
                lastmod = self.lastmod[(name, p)]
            elif name == "now":
                lastmod = now
            else:
                lastmod = now - self.rng.uniform(30 * 86400.0, YEAR)
            entries.append(f"<url><loc>{self.url(name, p)}</loc>"
                           f"<lastmod>{_w3c(lastmod)}</lastmod></url>")
        return ('<?xml version="1.0" encoding="UTF-8"?>'
                '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                + "".join(entries) + "</urlset>")


class Crawl:
    """The site, a pool, a worker's configuration and a sitemap reader, for rounds."""

    def __init__(self, db_url: str) -> None:
        self.db_url = db_url
        self.site = HintSite()
        limits = {"connect_timeout": 2.0, "first_byte_timeout": 5.0, "total_timeout": 10.0}
        self.settings = default_settings(politeness_delay=DELAY, user_agent=USER_AGENT,
                                         **limits)
        self.worker_settings = quick_settings(concurrency=4, **limits)
        # The worker's policy (no plan solved), which the sitemap reader shares.
        self.schedule = SchedulePolicy(self.worker_settings)
        self.pool: asyncpg.Pool
        self.keeper: SitemapKeeper

    async def __aenter__(self) -> Crawl:
        declare_crawler(DELAY, USER_AGENT)
        await self.site.start()
        pool = await asyncpg.create_pool(self.db_url, min_size=1, max_size=6)
        assert pool is not None
        self.pool = pool
        self.session = new_session(USER_AGENT, address_policy=AddressPolicy(["127.0.0.0/8"]))
        self.keeper = SitemapKeeper(pool, self.session, self.settings, NullEvents(),  # type: ignore[arg-type]
                                    "hints-test", lambda: self.schedule)
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.session.close()
        await self.pool.close()
        await self.site.stop()

    async def start(self) -> None:
        """The sitemaps of the three hosts that have one, read (their URLs seeded by the
        reader), and the plain host's pages seeded by hand; then every page fetched once."""
        for name in ("truthful", "now", "random"):
            await db.register(self.pool, [f"{self.site.origin(name)}/sitemap.xml"],
                              robots_origin=self.site.origin(name), depth=0, source=db.SEED,
                              found_on=None)
        await frontier.seed(self.pool, [(u, 1.0) for u in self.site.urls("plain")],
                            time.time())
        await self.read_sitemaps()
        assert await self.pool.fetchval("SELECT count(*) FROM urls") == 4 * PAGES
        await self.fetch_all()

    async def read_sitemaps(self) -> None:
        """Every sitemap made due, then the reader run until each has been read again."""
        started = await self.pool.fetchval(
            "UPDATE sitemaps SET next_read_at = now() RETURNING now()")
        while await self.pool.fetchval(
                "SELECT count(*) FROM sitemaps WHERE read_at IS NULL OR read_at < $1",
                started):
            await self.keeper.read_due()

    async def fetch_all(self, names: Iterable[str] = tuple(ADDRESSES)) -> None:
        """Every page of ``names`` made due and fetched once more."""
        urls = [u for name in names for u in self.site.urls(name)]
        before = await self.fetches(urls)
        await self.make_due(urls)
        worker = Worker(self.worker_settings, "hints-test", self.pool, self.session,
                        NullEvents())  # type: ignore[arg-type]
        task = asyncio.create_task(worker.run())

        async def fetched() -> bool:
            now = await self.fetches(urls)
            return all(now[u] > before[u] for u in urls)

        try:
            await wait_for(fetched, "one more fetch of every page", 90.0)
        finally:
            worker.stop()
            await task
            await asyncio.gather(*worker.host_tasks, return_exceptions=True)

    async def fetches(self, urls: list[str]) -> dict[str, int]:
        rows = await self.pool.fetch("SELECT url, fetch_count FROM urls WHERE url = ANY($1)",
                                     urls)
        return {r["url"]: r["fetch_count"] for r in rows}

    async def make_due(self, urls: list[str]) -> None:
        hosts = await self.pool.fetch(
            "UPDATE urls SET next_fetch_at = now() WHERE url = ANY($1) RETURNING host_id", urls)
        waiting = {r["host_id"] for r in hosts}
        while waiting:
            await frontier.refresh_hosts(self.pool, waiting)

    async def rows(self, name: str) -> dict[str, asyncpg.Record]:
        """The URL rows of host ``name``, with their hint state, by URL."""
        rows = await self.pool.fetch(
            "SELECT u.*, s.planned_at, s.hints_since FROM urls AS u "
            "LEFT JOIN url_hint_state AS s ON s.host_id = u.host_id AND s.url_id = u.id "
            "WHERE u.url = ANY($1)", self.site.urls(name))
        return {r["url"]: r for r in rows}

    async def trust(self, name: str, source: str = "lastmod") -> asyncpg.Record | None:
        row: asyncpg.Record | None = await self.pool.fetchrow(
            "SELECT * FROM hint_trust WHERE host_id = crawler_host_id($1) AND source = $2",
            self.site.origin(name), source)
        return row
