"""The daemon keeps up with a site's sitemaps and feeds (issue 37): a loopback site whose
robots.txt lists a sitemap index leading to a gzipped sitemap, a plain-text one and an Atom
feed (2,000 URLs, 300 of them linked from no page) is seeded with `crawler seed --sitemaps`
and crawled whole by `crawler run` (the default process count: one per CPU) and nothing
outside it; then 50 URLs added to the gzipped sitemap and 50 removed show in the collection
at the sitemap's next read (the new ones fetched, the removed ones flagged unlisted in
`crawler urls` and `crawler show`), unchanged files answer the conditional GET with 304, and
every request to the site kept the politeness delay. A feed a page announces is found and its
entries join with their dates.

The sitemaps' longest interval is cut to a few seconds (CRAWLER_SITEMAP_MAX_INTERVAL) so that
the next read comes within the test; everything else is as deployed.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import re
import signal
import sys
import time
from collections.abc import Callable

import aiohttp
import asyncpg
import pytest
from aiohttp import web
from daemon import daemon_env, start_daemon
from invariants import assert_every_url_scheduled, assert_polite

pytestmark = pytest.mark.timeout(600)
PAGES = 2000
UNLINKED = 300  # the Atom feed's, the last 300: no page links to them
DELAY = 0.02
SITEMAP_INTERVAL = 3.0
NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
SITEMAPS = ("/sitemap_index.xml", "/maps/pages.xml.gz", "/maps/more.txt", "/maps/news.atom")


class Site:
    """One loopback site whose sitemaps can change under the daemon; it logs every request
    (path, status, arrival on the monotonic and the wall clock) and honours If-None-Match."""

    def __init__(self) -> None:
        self.runner: web.AppRunner | None = None
        self.origin = ""
        self.log: list[tuple[str, int, float, float]] = []
        self.gzipped = list(range(1000))
        self.text = list(range(1000, 1700))
        self.atom = list(range(1700, PAGES))
        self.pages: Callable[[int], str] = self.page

    def url(self, i: int) -> str:
        return f"{self.origin}/p/{i}"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        tcp = web.TCPSite(self.runner, "127.0.0.1", 0)
        await tcp.start()
        port = tcp._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.origin = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()

    def page(self, i: int) -> str:
        link = f"<a href='/p/{i + 1}'>next</a>" if i + 1 < PAGES - UNLINKED else ""
        return f"<html><head><title>{i}</title></head><body><p>page {i}</p>{link}</body></html>"

    def sitemap(self, path: str) -> tuple[bytes, str] | None:
        """A sitemap's body and content type, as the site serves it now."""
        o = self.origin
        if path == "/sitemap_index.xml":
            body = (f"<?xml version='1.0' encoding='UTF-8'?><sitemapindex xmlns='{NS}'>"
                    + "".join(f"<sitemap><loc>{o}{p}</loc></sitemap>" for p in SITEMAPS[1:])
                    + "</sitemapindex>")
            return body.encode(), "application/xml"
        if path == "/maps/pages.xml.gz":
            body = (f"<?xml version='1.0' encoding='UTF-8'?><urlset xmlns='{NS}'>"
                    + "".join(f"<url><loc>{self.url(i)}</loc><lastmod>2024-0{1 + i % 9}-01"
                              "</lastmod></url>" for i in self.gzipped) + "</urlset>")
            return gzip.compress(body.encode(), mtime=0), "application/x-gzip"
        if path == "/maps/more.txt":
            return "\n".join(self.url(i) for i in self.text).encode(), "text/plain"
        if path == "/maps/news.atom":
            entries = "".join(
                f"<entry><title>{i}</title><link href='/p/{i}'/><id>tag:x,{i}</id>"
                f"<updated>2024-05-0{1 + i % 9}T10:00:00Z</updated></entry>" for i in self.atom)
            body = (f"<?xml version='1.0' encoding='utf-8'?><feed xmlns='http://www.w3.org/"
                    f"2005/Atom'><title>news</title>{entries}</feed>")
            return body.encode(), "application/atom+xml"
        return None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        arrived, wall = time.monotonic(), time.time()
        response = self.answer(request)
        self.log.append((request.path, response.status, arrived, wall))
        return response

    def answer(self, request: web.Request) -> web.Response:
        path = request.path
        if path == "/robots.txt":
            return web.Response(text=f"User-agent: *\nSitemap: {self.origin}/sitemap_index.xml\n")
        served = self.sitemap(path)
        if served is not None:
            body, content_type = served
            etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
            if request.headers.get("If-None-Match") == etag:
                return web.Response(status=304, headers={"ETag": etag})
            return web.Response(body=body, content_type=content_type, headers={"ETag": etag})
        match = re.fullmatch(r"/p/(\d+)", path)
        if match is not None:
            return web.Response(text=self.pages(int(match[1])), content_type="text/html")
        return web.Response(status=404)


async def run_cli(env: dict[str, str], *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawler", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 240)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


def deployed_env(db_url: str, **settings: str) -> dict[str, str]:
    """The test daemon's environment with the default process count (one per CPU)."""
    env = daemon_env(db_url, politeness_delay=str(DELAY),
                     sitemap_max_interval=str(SITEMAP_INTERVAL), **settings)
    del env["CRAWLER_PROCESSES"]
    return env


async def started(env: dict[str, str], seen: list[str]) -> tuple[asyncio.subprocess.Process,
                                                                  int, asyncio.Task[None]]:
    """The daemon, its metrics port, and the task reading what it prints."""
    proc = await start_daemon(env)
    assert proc.stdout is not None
    while True:
        line = (await asyncio.wait_for(proc.stdout.readline(), 120)).decode()
        assert line, "daemon exited: " + "".join(seen)
        seen.append(line)
        match = re.search(r"metrics at http://[\d.]+:(\d+)/metrics", line)
        if match:
            break

    async def drain() -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            seen.append(raw.decode())

    return proc, int(match.group(1)), asyncio.create_task(drain())


async def stopped(proc: asyncio.subprocess.Process, drained: asyncio.Task[None]) -> None:
    """SIGTERM, then what it prints read to its end, then its exit: clean."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
    await asyncio.wait_for(drained, 90)
    assert await asyncio.wait_for(proc.wait(), 30) == 0


async def until(check: Callable[[], object], what: str, seconds: float = 240.0) -> None:
    """Wait for ``check()`` (awaited if it is a coroutine) to be true."""
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


async def test_a_sitemapped_site_is_kept_up_with_by_the_daemon(db_url: str) -> None:
    site = Site()
    await site.start()
    env = deployed_env(db_url)
    seen: list[str] = []
    try:
        code, out = await run_cli(env, "seed", "--sitemaps", site.origin)
        assert code == 0, out
        assert "seeded 2000 new URLs" in out, out
        pool = await asyncpg.create_pool(db_url, min_size=1, max_size=2)
        assert pool is not None
        daemon, port, drained = await started(env, seen)
        try:
            async def fetched(first: int, end: int) -> bool:
                done = await pool.fetchval(
                    "SELECT count(*) FROM urls WHERE fetch_count > 0 AND url = ANY($1)",
                    [site.url(i) for i in range(first, end)])
                return bool(done == end - first)

            await until(lambda: fetched(0, PAGES), "every listed page fetched", 400)
            assert await pool.fetchval("SELECT count(*) FROM urls") == PAGES

            # The gzipped sitemap loses URLs 0-49 and gains 2000-2049.
            changed_at = time.time()
            site.gzipped = list(range(50, 1000)) + list(range(PAGES, PAGES + 50))
            gz = site.origin + "/maps/pages.xml.gz"

            async def read_since() -> bool:
                return await pool.fetchval("SELECT changed_at IS NOT NULL FROM sitemaps "
                                           "WHERE url = $1", gz) is True

            await until(read_since, "the gzipped sitemap read after its change", 120)
            # The first read that reached the site after the change was answered in full (its
            # ETag changed) and is the read that changed the collection; a later one, if any
            # came meanwhile, was answered 304.
            reads = [(status, wall) for path, status, _, wall in site.log
                     if path == "/maps/pages.xml.gz" and wall > changed_at]
            assert reads[0][0] == 200 and all(status == 304 for status, _ in reads[1:]), reads
            row = await pool.fetchrow("SELECT * FROM sitemaps WHERE url = $1", gz)
            assert row["changed_at"].timestamp() <= reads[0][1]
            assert len(reads) == 1 or row["changed_at"].timestamp() < reads[1][1]
            assert (row["listed"], row["added"], row["dropped"]) == (1000, 50, 50)
            flagged = {r["url"] for r in await pool.fetch(
                "SELECT url FROM urls WHERE unlisted_at IS NOT NULL")}
            assert flagged == {site.url(i) for i in range(50)}
            assert await pool.fetchval("SELECT count(*) FROM urls") == PAGES + 50
            assert await pool.fetchval(
                "SELECT count(*) FROM url_hints WHERE source = $1 AND url_id IN "
                "(SELECT id FROM urls WHERE url = ANY($2))", gz,
                [site.url(i) for i in range(PAGES, PAGES + 50)]) == 50
            await until(lambda: fetched(PAGES, PAGES + 50), "the 50 new URLs fetched")

            # Unchanged files answer the conditional GET.
            await until(lambda: any(status == 304 and path in SITEMAPS
                                    for path, status, _, _ in site.log), "a 304", 60)

            # Sitemap and feed reads count in the fetch metrics with their own kind.
            async with aiohttp.ClientSession() as http, \
                    http.get(f"http://127.0.0.1:{port}/metrics") as response:
                exposition = await response.text()
            kinds: dict[str, float] = {}
            for line in exposition.splitlines():
                match = re.match(r'crawler_fetches_total\{.*kind="(\w+)".*\} (\S+)', line)
                if match:
                    kinds[match[1]] = kinds.get(match[1], 0.0) + float(match[2])
            assert kinds.get("page", 0) >= PAGES + 50, kinds
            assert kinds.get("sitemap", 0) >= 3 and kinds.get("feed", 0) >= 1, kinds
        finally:
            await stopped(daemon, drained)
            await pool.close()

        # `crawler urls` and `crawler show` show the flag; `crawler sites` each file.
        code, listed = await run_cli(env, "urls", "--host", site.origin, "--limit", "5000",
                                     "--json")
        assert code == 0, listed
        rows = {r["url"]: r for r in json.loads(listed[listed.index("["):])}
        assert {u for u, r in rows.items() if r["unlisted_at"]} == {site.url(i)
                                                                   for i in range(50)}
        code, shown = await run_cli(env, "show", site.url(7))
        assert code == 0 and re.search(r"unlisted_at\s+\d{4}-\d\d-\d\d", shown), shown
        code, shown = await run_cli(env, "show", site.url(70))
        assert code == 0 and re.search(r"unlisted_at\s+-", shown), shown
        code, sites = await run_cli(env, "sites")
        assert code == 0 and f"sitemaps of {site.origin} (50 URLs no longer listed)" in sites
        code, sites = await run_cli(env, "sites", "--json")
        files = {s["url"].removeprefix(site.origin): s
                 for s in json.loads(sites)[0]["sitemaps"]}
        assert set(files) == set(SITEMAPS)
        assert (files["/maps/pages.xml.gz"]["added"], files["/maps/pages.xml.gz"]["dropped"]) \
            == (50, 50)
        assert files["/maps/news.atom"]["kind"] == "atom"
        assert all(f["read_at"] and f["next_read_at"] for f in files.values())

        # Nothing outside the site was requested, and the site was asked politely.
        allowed = {"/robots.txt", *SITEMAPS, *(f"/p/{i}" for i in range(PAGES + 50))}
        assert {path for path, *_ in site.log} <= allowed
        assert_polite([(site.origin, arrived) for _, _, arrived, _ in site.log], DELAY)
        await assert_every_url_scheduled(db_url)
    finally:
        await site.stop()
        if any("Traceback" in line for line in seen):
            pytest.fail("".join(seen)[-5000:])


class BlogSite(Site):
    """A site whose sitemap lists three pages; the first announces an Atom feed listing
    posts the sitemap does not."""

    def sitemap(self, path: str) -> tuple[bytes, str] | None:
        if path == "/sitemap.xml":
            body = (f"<urlset xmlns='{NS}'>" + "".join(
                f"<url><loc>{self.url(i)}</loc></url>" for i in range(3)) + "</urlset>")
            return body.encode(), "application/xml"
        if path == "/blog/feed.atom":
            entries = "".join(
                f"<entry><title>{i}</title><link href='/p/{100 + i}'/><id>tag:b,{i}</id>"
                f"<updated>2024-06-0{1 + i}T08:00:00Z</updated>"
                f"<published>2024-05-01T08:00:00Z</published></entry>" for i in range(5))
            return (f"<feed xmlns='http://www.w3.org/2005/Atom'><title>b</title>{entries}"
                    "</feed>").encode(), "application/atom+xml"
        return None

    def page(self, i: int) -> str:
        head = ("<link rel='alternate' type='application/atom+xml' title='Posts' "
                "href='/blog/feed.atom'>" if i == 0 else "")
        return f"<html><head><title>{i}</title>{head}</head><body>page {i}</body></html>"

    def answer(self, request: web.Request) -> web.Response:
        if request.path == "/robots.txt":
            return web.Response(text="User-agent: *\nAllow: /\n")
        return super().answer(request)


async def test_a_feed_a_page_announces_joins_with_its_entries(db_url: str) -> None:
    site = BlogSite()
    await site.start()
    env = deployed_env(db_url)
    seen: list[str] = []
    try:
        code, out = await run_cli(env, "seed", "--sitemaps", site.origin)
        assert code == 0 and "seeded 3 new URLs" in out, out
        daemon, _, drained = await started(env, seen)
        pool = await asyncpg.create_pool(db_url, min_size=1, max_size=2)
        assert pool is not None
        feed = site.origin + "/blog/feed.atom"
        posts = [site.url(100 + i) for i in range(5)]
        try:
            async def posts_fetched() -> bool:
                done = await pool.fetchval(
                    "SELECT count(*) FROM urls WHERE fetch_count > 0 AND url = ANY($1)", posts)
                return bool(done == len(posts))

            await until(posts_fetched, "the feed's entries fetched", 180)
            row = await pool.fetchrow("SELECT * FROM sitemaps WHERE url = $1", feed)
            assert (row["kind"], row["source"], row["found_on"]) == ("atom", "page",
                                                                    site.url(0))
            hints = await pool.fetch(
                "SELECT u.url, h.kind, h.claimed_at FROM url_hints AS h JOIN urls AS u "
                "ON u.id = h.url_id AND u.host_id = h.host_id WHERE h.source = $1", feed)
            assert {(r["url"], r["kind"]) for r in hints} == {
                (u, k) for u in posts for k in ("updated", "published")}
        finally:
            await stopped(daemon, drained)
            await pool.close()
        assert [path for path, *_ in site.log].count("/blog/feed.atom") >= 1
        assert {path for path, *_ in site.log} <= {
            "/robots.txt", "/sitemap.xml", "/blog/feed.atom",
            *(f"/p/{i}" for i in (0, 1, 2, 100, 101, 102, 103, 104))}
        assert_polite([(site.origin, arrived) for _, _, arrived, _ in site.log], DELAY)
        await assert_every_url_scheduled(db_url)
    finally:
        await site.stop()
        if any("Traceback" in line for line in seen):
            pytest.fail("".join(seen)[-5000:])
