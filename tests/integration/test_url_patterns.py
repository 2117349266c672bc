"""URL patterns end to end (issue 15): `crawler seed` filters by CRAWLER_INCLUDE /
CRAWLER_EXCLUDE and counts what it rejected, a window stores its own --include / --exclude,
and window discovery by the real worker over real HTTP on loopback skips excluded links."""

from __future__ import annotations

import asyncio
import io
import json
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from unittest.mock import patch

import asyncpg
import pytest
from aiohttp import web

from crawler.cli import main
from crawler.daemon.worker import Worker
from crawler.net.fetch import new_session
from crawler.net.ssrf import AddressPolicy
from crawler.settings import Settings

pytestmark = pytest.mark.timeout(120)

WAIT_SECONDS = 60.0


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


_ENV_LOCK = threading.Lock()


def crawler(db_url: str, *args: str, **env: str) -> Ran:
    """`crawler ARGS` with ``env`` set, in this process (a subprocess costs seconds here)."""
    environment = {"CRAWLER_DATABASE_URL": db_url, **env}
    out, err = io.StringIO(), io.StringIO()
    with _ENV_LOCK, patch.dict(os.environ, environment), redirect_stdout(out), \
            redirect_stderr(err):
        code = main(list(args))
    return Ran(code, out.getvalue(), err.getvalue())


async def seeded_urls(db_url: str) -> set[str]:
    conn = await asyncpg.connect(db_url)
    try:
        return {r["url"] for r in await conn.fetch("SELECT url FROM urls")}
    finally:
        await conn.close()


def test_seed_rejects_urls_the_global_patterns_refuse_and_counts_them(db_url: str) -> None:
    result = crawler(
        db_url, "seed", "http://a.test/doc.pdf", "http://a.test/page", "http://b.test/x.pdf",
        "http://a.test/tmp/1", "http://c.test/", "not a url",
        CRAWLER_EXCLUDE=r"\.pdf$", CRAWLER_INCLUDE=r'["^http://a\\.test/", "^http://b"]',
    )
    assert result.returncode == 1, result.stderr  # the malformed line, as before
    assert ("seeded 2 new URLs (0 already known, 1 malformed, 2 rejected by CRAWLER_EXCLUDE, "
            "1 rejected by CRAWLER_INCLUDE)") in result.stdout, result.stdout
    assert asyncio.run(seeded_urls(db_url)) == {"http://a.test/page", "http://a.test/tmp/1"}
    # Every URL passing: exit 0, nothing said about patterns.
    ok = crawler(db_url, "seed", "http://a.test/other", CRAWLER_EXCLUDE=r"\.pdf$")
    assert ok.returncode == 0 and "rejected by" not in ok.stdout, ok.stdout


def test_bad_patterns_are_one_line_and_exit_2_before_touching_the_database(
    db_url: str
) -> None:
    for args, env, expected in [
        (("seed", "http://a.test/"), {"CRAWLER_EXCLUDE": "(oops"},
         "crawler: invalid CRAWLER_EXCLUDE: pattern '(oops' is not a regular expression"),
        (("seed", "http://a.test/"), {"CRAWLER_INCLUDE": '["ok", "[a-"]'},
         "crawler: invalid CRAWLER_INCLUDE: pattern '[a-' is not a regular expression"),
        (("seed", "--window", "5", "--include", "*x", "http://a.test/"), {},
         "crawler: --include pattern '*x' is not a regular expression"),
        (("seed", "--exclude", "x", "http://a.test/"), {},
         "crawler: --include and --exclude are a windowed site's own patterns"),
        (("seed", "--window", "5", "--exclude", "a\\.test", "http://a.test/"), {},
         "crawler: the window's root http://a.test/ is rejected by --exclude"),
    ]:
        result = crawler(db_url, *args, **env)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.startswith(expected), (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert asyncio.run(seeded_urls(db_url)) == set()


class NullEvents:
    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


LINKS = ["/blog/a", "/blog/b.pdf", "/blog/draft-1", "/about", "/blog/c"]


@pytest.fixture
async def site() -> AsyncIterator[str]:
    """A root page linking to LINKS; every other page is a leaf."""

    async def handle(request: web.Request) -> web.Response:
        if request.path == "/robots.txt":
            return web.Response(status=404)
        anchors = "".join(f'<a href="{h}">{h}</a>' for h in LINKS) if request.path == "/" else ""
        return web.Response(text=f"<html><body><p>page {request.path}</p>{anchors}</body>"
                                 "</html>", content_type="text/html")

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    server = web.TCPSite(runner, "127.0.0.1", 0)
    await server.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


async def test_window_discovery_skips_links_the_global_and_site_patterns_reject(
    db_url: str, site: str
) -> None:
    origin = site
    root = f"{origin}/"
    include = f"^{origin.replace('.', '[.]')}/(blog/|$)"
    seeded = await asyncio.to_thread(
        crawler, db_url, "seed", "--window", "20", "--include", include, "--exclude", "draft",
        root,
    )
    assert seeded.returncode == 0, seeded.stderr
    assert f"URL patterns +{include} -draft" in seeded.stdout, seeded.stdout

    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=4)
    session = new_session("patterns-test", address_policy=AddressPolicy(["127.0.0.0/8"]))
    settings = Settings(concurrency=2, lease_seconds=30.0, poll_interval=0.05,  # type: ignore[arg-type]
                        politeness_delay=0.01, total_timeout=5.0, exclude=r"\.pdf$")
    worker = Worker(settings, "patterns-test", pool, session, NullEvents())  # type: ignore[arg-type]
    task = asyncio.create_task(worker.run())
    try:
        deadline = time.monotonic() + WAIT_SECONDS
        while not await pool.fetchval(
            "SELECT fetch_count > 0 FROM urls WHERE url = $1", root
        ):
            assert time.monotonic() < deadline, "timed out waiting for the root's fetch"
            await asyncio.sleep(0.05)
        discovered = {
            r["url"] for r in await pool.fetch(
                "SELECT u.url FROM urls AS u JOIN sites AS s ON s.id = u.site_id"
            )
        }
    finally:
        worker.stop()
        await task
        await asyncio.gather(*worker.host_tasks, return_exceptions=True)
        await session.close()
        await pool.close()
    # b.pdf: CRAWLER_EXCLUDE (the daemon's); draft-1: the site's --exclude; about: --include.
    assert discovered == {root, f"{origin}/blog/a", f"{origin}/blog/c"}, discovered

    sites = json.loads((await asyncio.to_thread(crawler, db_url, "sites", "--json")).stdout)
    assert (sites[0]["include"], sites[0]["exclude"]) == ([include], ["draft"])
    table = (await asyncio.to_thread(crawler, db_url, "sites")).stdout
    assert f"+{include} -draft" in table
    shown = (await asyncio.to_thread(crawler, db_url, "show", root)).stdout
    assert f"site_patterns            +{include} -draft (window of {root})" in shown
    # Re-seeding the root with new patterns replaces the old ones; a resize alone keeps them.
    again = await asyncio.to_thread(crawler, db_url, "seed", "--window", "30", root)
    assert again.returncode == 0, again.stderr
    sites = json.loads((await asyncio.to_thread(crawler, db_url, "sites", "--json")).stdout)
    assert (sites[0]["include"], sites[0]["exclude"]) == ([include], ["draft"])
    replaced = await asyncio.to_thread(
        crawler, db_url, "seed", "--window", "30", "--exclude", "about", root
    )
    assert replaced.returncode == 0, replaced.stderr
    sites = json.loads((await asyncio.to_thread(crawler, db_url, "sites", "--json")).stdout)
    assert (sites[0]["include"], sites[0]["exclude"]) == ([], ["about"])
