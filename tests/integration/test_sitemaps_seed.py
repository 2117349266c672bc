"""`crawler seed --sitemaps ORIGIN` / `--sitemap URL` against a loopback site (issue 37): its
robots.txt lists a sitemap index leading to a gzipped sitemap, a plain-text one and an Atom
feed, 2,000 URLs in all, 300 of them linked from no page; then `crawler run` fetches every
one of them and nothing else. Hostile sitemaps are each cut at their bound."""

from __future__ import annotations

import asyncio
import gzip
import sys
import time
import zlib

import asyncpg
import pytest
from aiohttp import web
from daemon import daemon_env, start_daemon, stop_daemon

pytestmark = pytest.mark.timeout(300)
PAGES = 2000
UNLINKED = 300  # the last 300 pages: no page links to them
MiB = 1024 * 1024


class Site:
    """One loopback site: its pages, robots.txt, sitemaps and some hostile files."""

    def __init__(self) -> None:
        self.runner: web.AppRunner | None = None
        self.origin = ""
        self.requests: list[str] = []

    def url(self, i: int) -> str:
        return f"{self.origin}/p/{i}"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.origin = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        self.requests.append(path)
        o = self.origin
        if path == "/robots.txt":
            return web.Response(text=f"User-agent: *\nDisallow: /private/\n"
                                     f"Sitemap: {o}/sitemap_index.xml\n")
        if path == "/sitemap_index.xml":
            return xml("<sitemapindex xmlns='http://www.sitemaps.org/schemas/sitemap/0.9'>"
                       + "".join(f"<sitemap><loc>{o}/maps/{n}</loc></sitemap>"
                                 for n in ("pages.xml.gz", "more.txt", "news.atom",
                                           "../sitemap_index.xml"))
                       + "</sitemapindex>")
        if path == "/maps/pages.xml.gz":  # URLs 0..999, with their lastmod
            body = ("<urlset xmlns='http://www.sitemaps.org/schemas/sitemap/0.9'>"
                    + "".join(f"<url><loc>{self.url(i)}</loc><lastmod>2024-0{1 + i % 9}-01"
                              "</lastmod></url>" for i in range(1000))
                    + "<url><loc>http://elsewhere.example/x</loc></url></urlset>")
            return web.Response(body=gzip.compress(body.encode()),
                                content_type="application/x-gzip")
        if path == "/maps/more.txt":  # URLs 1000..1699, and one on another host
            lines = [self.url(i) for i in range(1000, 1700)] + ["http://elsewhere.example/y"]
            return web.Response(text="\n".join(lines))
        if path == "/maps/news.atom":  # URLs 1700..1999: the unlinked ones
            entries = "".join(
                f"<entry><title>{i}</title><link href='/p/{i}'/><id>tag:x,{i}</id>"
                f"<updated>2024-05-0{1 + i % 9}T10:00:00Z</updated>"
                f"<published>2024-04-01T10:00:00+02:00</published></entry>"
                for i in range(1700, PAGES))
            return xml(f"<feed xmlns='http://www.w3.org/2005/Atom'><title>n</title>{entries}"
                       "</feed>")
        if path.startswith("/p/"):
            i = int(path[3:])
            link = f"<a href='/p/{i + 1}'>next</a>" if i + 1 < PAGES - UNLINKED else ""
            return web.Response(text=f"<html><body><p>page {i}</p>{link}</body></html>",
                                content_type="text/html")
        return await self.hostile(request)

    async def hostile(self, request: web.Request) -> web.StreamResponse:
        path, o = request.path, self.origin
        if path == "/h/bomb.xml.gz":  # inflates to 10 GB, made on the fly
            response = web.StreamResponse(headers={"Content-Type": "application/x-gzip"})
            await response.prepare(request)
            compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
            await response.write(compressor.compress(
                f"<urlset><url><loc>{o}/h/b1</loc></url>".encode())
                + compressor.flush(zlib.Z_FULL_FLUSH))
            compressor.compress(b" " * MiB)
            block = compressor.compress(b" " * MiB) + compressor.flush(zlib.Z_FULL_FLUSH)
            try:
                for _ in range(10 * 1024):
                    await response.write(block)
            except (ConnectionResetError, RuntimeError):
                pass  # the reader stopped at its cap
            return response
        if path == "/h/self.xml":
            return xml(f"<sitemapindex><sitemap><loc>{o}/h/self.xml</loc></sitemap>"
                       "</sitemapindex>")
        if path.startswith("/h/deep/"):
            level = int(path.rsplit("/", 1)[1].split(".")[0])
            if level < 20:
                return xml(f"<sitemapindex><sitemap><loc>{o}/h/deep/{level + 1}.xml</loc>"
                           "</sitemap></sitemapindex>")
            return xml(f"<urlset><url><loc>{o}/h/deep/page</loc></url></urlset>")
        if path == "/h/others.xml":
            return xml("<urlset>" + "".join(f"<url><loc>http://other{i}.example/</loc></url>"
                                            for i in range(100)) + "</urlset>")
        if path == "/h/broken.xml":
            return xml(f"<urlset><url><loc>{o}/h/ok</loc></url><url><loc>{o}/h/x</url>")
        if path == "/h/million.xml":
            response = web.StreamResponse(headers={"Content-Type": "application/xml"})
            await response.prepare(request)
            await response.write(b"<urlset>")
            try:
                for start in range(0, 10**6, 10_000):
                    await response.write("".join(
                        f"<url><loc>{o}/h/m/{i}</loc></url>"
                        for i in range(start, start + 10_000)).encode())
                await response.write(b"</urlset>")
            except (ConnectionResetError, RuntimeError):
                pass
            return response
        return web.Response(status=404)


def xml(text: str) -> web.Response:
    return web.Response(text='<?xml version="1.0" encoding="UTF-8"?>' + text,
                        content_type="application/xml")


async def run_cli(env: dict[str, str], *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawler", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 240)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_a_site_seeded_from_its_sitemaps_is_fetched_whole(db_url: str) -> None:
    site = Site()
    await site.start()
    env = daemon_env(db_url, politeness_delay="0")
    try:
        code, out = await run_cli(env, "seed", "--sitemaps", site.origin)
        assert code == 0, out
        assert "seeded 2000 new URLs" in out, out
        assert "2 outside their sitemap's location" in out, out
        assert "1 repeated sitemap" in out, out
        conn = await asyncpg.connect(db_url)
        try:
            assert await conn.fetchval("SELECT count(*) FROM urls") == PAGES
            assert await conn.fetchval(
                "SELECT count(*) FROM urls WHERE url NOT LIKE $1", site.origin + "/p/%") == 0
            kinds = dict(await conn.fetch("SELECT url, kind FROM sitemaps"))
            assert kinds == {f"{site.origin}/sitemap_index.xml": "sitemapindex",
                             f"{site.origin}/maps/pages.xml.gz": "urlset",
                             f"{site.origin}/maps/more.txt": "text",
                             f"{site.origin}/maps/news.atom": "atom"}
            counts = dict(await conn.fetch("SELECT kind, count(*) FROM url_hints GROUP BY 1"))
            assert counts == {"lastmod": 1000, "updated": UNLINKED, "published": UNLINKED}
            # Politeness: robots.txt first, then one sitemap at a time (the seeder's lease
            # was released).
            assert site.requests[:2] == ["/robots.txt", "/sitemap_index.xml"]
            assert await conn.fetchval("SELECT count(*) FROM hosts WHERE lease_owner IS NOT "
                                       "NULL") == 0
        finally:
            await conn.close()

        code, shown = await run_cli(env, "show", site.url(1999))
        assert code == 0 and "published" in shown and "news.atom" in shown, shown

        site.requests.clear()
        daemon = await start_daemon(env)
        try:
            conn = await asyncpg.connect(db_url)
            try:
                deadline = time.monotonic() + 200
                fetched = 0
                while time.monotonic() < deadline:
                    fetched = await conn.fetchval(
                        "SELECT count(*) FROM urls WHERE fetch_count > 0")
                    if fetched == PAGES:
                        break
                    await asyncio.sleep(0.2)
                assert fetched == PAGES
                assert await conn.fetchval("SELECT count(*) FROM urls") == PAGES
            finally:
                await conn.close()
        finally:
            await stop_daemon(daemon)
        pages = {p for p in site.requests if p.startswith("/p/")}
        assert len(pages) == PAGES
        assert set(site.requests) - pages <= {"/robots.txt"}
    finally:
        await site.stop()


async def test_hostile_sitemaps_are_each_cut_at_their_bound(db_url: str) -> None:
    site = Site()
    await site.start()
    env = daemon_env(db_url, politeness_delay="0")
    try:
        o = site.origin
        started = time.monotonic()
        code, out = await run_cli(
            env, "seed", *(a for p in ("bomb.xml.gz", "self.xml", "deep/0.xml", "others.xml",
                                       "broken.xml", "million.xml")
                           for a in ("--sitemap", f"{o}/h/{p}")))
        seconds = time.monotonic() - started
        print(out, f"{seconds:.1f} s")
        assert code == 0, out
        conn = await asyncpg.connect(db_url)
        try:
            rows = {r["url"].removeprefix(o): r for r in await conn.fetch(
                "SELECT url, kind, listed, added, rejected, cut, error FROM sitemaps")}
            assert rows["/h/bomb.xml.gz"]["cut"] == "max_bytes"
            assert rows["/h/bomb.xml.gz"]["added"] == 1
            assert rows["/h/million.xml"]["cut"] == "max_urls"
            assert rows["/h/million.xml"]["added"] == 50_000
            assert rows["/h/others.xml"]["rejected"] == 100
            assert rows["/h/broken.xml"]["error"].startswith("invalid_xml")
            assert rows["/h/broken.xml"]["added"] == 1
            assert rows["/h/deep/3.xml"]["cut"] == "max_depth"  # followed 3 levels, no more
            assert "/h/deep/4.xml" not in rows
            assert "1 repeated sitemap" in out  # the index that lists itself
            assert await conn.fetchval("SELECT count(*) FROM urls") == 50_000 + 2
            assert await conn.fetchval("SELECT count(*) FROM hosts") == 1
        finally:
            await conn.close()
    finally:
        await site.stop()
