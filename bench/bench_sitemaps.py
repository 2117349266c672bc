"""Seeding from sitemaps against seeding from a file: ``crawler seed --sitemaps ORIGIN`` for a
loopback site listing 10^6 URLs, and ``crawler seed --file`` for the same URLs.

    python bench/bench_sitemaps.py [--urls 1000000] [--per-file 50000] [--runs 1]
                                   [--database-url postgresql://...]

The site is an aiohttp server in this process: its robots.txt names a sitemap index, which
lists ``--urls / --per-file`` gzipped urlsets (20 of the protocol's 50,000 URLs each by
default), every URL with a ``lastmod``. The bodies are made and compressed before the clock
starts, so the server costs the seeder no more than serving bytes does. Each command runs as a
subprocess, as a user runs it, into a scratch database of its own (cold tables), created,
migrated and dropped here; without ``--database-url`` (or ``CRAWLER_TEST_DATABASE_URL``) the
embedded PostgreSQL is started for the run.

URLs/s is the URLs seeded over the command's wall time, start-up included. The sitemap run
does more than the file run (the HTTP requests, gunzip, the XML, a date hint stored per URL,
and what each sitemap lists); the ratio says what that costs. The target is within 2x.

Both commands are bound by CPU, so on a machine doing other work the ratio moves with what
else runs meanwhile: ``--runs N`` runs the pair N times, each command after the other on
fresh databases, and reports every pair's ratio and their median.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import asyncpg
from aiohttp import web
from scratch import add_database_url, server_url, with_database

from crawler.db import migrate

SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"


def page_url(origin: str, i: int) -> str:
    return f"{origin}/section-{i % 97}/page-{i}.html"


def make_site(origin: str, n_urls: int, per_file: int) -> dict[str, bytes]:
    """Path -> body of every file the site serves: robots.txt, the index, the urlsets."""
    files: dict[str, bytes] = {}
    names = []
    for k, start in enumerate(range(0, n_urls, per_file)):
        rows = "".join(
            f"<url><loc>{page_url(origin, i)}</loc>"
            f"<lastmod>2024-{1 + i % 12:02d}-{1 + i % 28:02d}T10:00:00+00:00</lastmod></url>\n"
            for i in range(start, min(start + per_file, n_urls)))
        body = f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="{SITEMAP_NS}">\n'
        # Level 1 of 9: these files are made once, and the seeder's gunzip is what is timed.
        files[f"/sitemaps/pages-{k}.xml.gz"] = gzip.compress(
            (body + rows + "</urlset>\n").encode(), compresslevel=1)
        names.append(f"/sitemaps/pages-{k}.xml.gz")
    files["/sitemap_index.xml"] = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex xmlns="{SITEMAP_NS}">\n'
        + "".join(f"<sitemap><loc>{origin}{name}</loc></sitemap>\n" for name in names)
        + "</sitemapindex>\n").encode()
    files["/robots.txt"] = (f"User-agent: *\nAllow: /\n"
                            f"Sitemap: {origin}/sitemap_index.xml\n").encode()
    return files


class Site:
    """The loopback site: serves ``files`` (built once its port is known)."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.origin = ""
        self.runner: web.AppRunner | None = None
        self.requests = 0

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
        if self.runner is not None:
            await self.runner.cleanup()

    async def handle(self, request: web.Request) -> web.Response:
        self.requests += 1
        body = self.files.get(request.path)
        if body is None:
            return web.Response(status=404)
        kind = ("application/x-gzip" if request.path.endswith(".gz")
                else "text/plain" if request.path.endswith(".txt") else "application/xml")
        return web.Response(body=body, content_type=kind)


async def command(db_url: str, n_urls: int, label: str, *args: str) -> float:
    """Runs ``crawler seed ARGS`` (the event loop keeps serving the site meanwhile); returns
    URLs/s."""
    env = {**os.environ, "CRAWLER_DATABASE_URL": db_url,
           # The site is on loopback, which the address policy refuses unless allowed; and the
           # bench measures the seeder, not the politeness delay between its 21 requests.
           "CRAWLER_ALLOW_NETWORKS": '["127.0.0.0/8"]', "CRAWLER_POLITENESS_DELAY": "0"}
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawler", "seed", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"crawler seed {args[0]} failed ({proc.returncode}): "
                         f"{err.decode()[-2000:]}")
    conn = await asyncpg.connect(db_url)
    try:
        seeded = await conn.fetchval("SELECT count(*) FROM urls")
    finally:
        await conn.close()
    if seeded != n_urls:
        raise SystemExit(f"{label}: {seeded:,} URLs seeded, not {n_urls:,}: {out.decode()}")
    print(f"{label}: {n_urls:,} URLs in {seconds:.2f} s = {n_urls / seconds:,.0f} URLs/s; "
          f"{out.decode().strip().splitlines()[-1]}", flush=True)
    return n_urls / seconds


async def pair(admin: asyncpg.Connection, url: str, site: Site, n_urls: int,
               path: Path) -> float:
    """One run of each command, each into a fresh database; returns file/sitemaps."""
    names = [f"crawler_bench_sitemaps_{uuid.uuid4().hex[:8]}" for _ in range(2)]
    try:
        for name in names:
            await admin.execute(f'CREATE DATABASE "{name}"')
            await migrate.upgrade(with_database(url, name))
        by_sitemaps = await command(with_database(url, names[0]), n_urls,
                                    "crawler seed --sitemaps", "--sitemaps", site.origin)
        by_file = await command(with_database(url, names[1]), n_urls,
                                "crawler seed --file", "--file", str(path))
    finally:
        for name in names:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print(f"seed --sitemaps at {by_sitemaps / by_file:.2f}x the rate of seed --file "
          f"(file/sitemaps = {by_file / by_sitemaps:.2f}; target: within 2x); "
          f"{site.requests} requests served", flush=True)
    return by_file / by_sitemaps


async def main(url: str, n_urls: int, per_file: int, runs: int) -> None:
    site = Site()
    await site.start()
    admin = await asyncpg.connect(url)
    try:
        made = time.perf_counter()
        site.files = make_site(site.origin, n_urls, per_file)
        gz = sum(len(b) for p, b in site.files.items() if p.endswith(".gz"))
        print(f"{n_urls:,} URLs on one loopback host in {len(site.files) - 2} gzipped sitemaps "
              f"({gz / 2**20:.1f} MiB) behind an index named in robots.txt; made in "
              f"{time.perf_counter() - made:.1f} s", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp, "urls.txt")
            with path.open("w") as f:
                f.writelines(page_url(site.origin, i) + "\n" for i in range(n_urls))
            ratios = []
            for _ in range(runs):
                site.requests = 0
                ratios.append(await pair(admin, url, site, n_urls, path))
        if runs > 1:
            print(f"file/sitemaps over {runs} runs: "
                  f"{', '.join(f'{r:.2f}' for r in ratios)}; median "
                  f"{statistics.median(ratios):.2f} (target: within 2x)")
    finally:
        await admin.close()
        await site.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--urls", type=int, default=1_000_000)
    parser.add_argument("--per-file", type=int, default=50_000,
                        help="URLs per sitemap (the protocol allows at most 50,000)")
    parser.add_argument("--runs", type=int, default=1,
                        help="Runs of each command, alternating (the median ratio is reported)")
    add_database_url(parser)
    ns = parser.parse_args()
    if not 0 < ns.per_file <= 50_000:
        parser.error("--per-file must be between 1 and 50,000")
    if ns.runs < 1:
        parser.error("--runs must be at least 1")
    with server_url(ns.database_url) as server:
        asyncio.run(main(server, ns.urls, ns.per_file, ns.runs))
