"""Shorthand IPv4 seeds end to end: one URL, one host named by its address, and the SSRF
policy refusing it without a request unless the allow-list opens it (QA: ``127.1``,
``0x7f.0.0.1`` and ``2130706433`` were three hosts, none shown as 127.0.0.1)."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest
from aiohttp import web
from inprocess import NullEvents, quick_settings, wait_for
from test_cli_errors import crawler

from crawler.daemon.worker import Worker
from crawler.net.fetch import new_session
from crawler.net.ssrf import AddressPolicy
from crawler.settings import default_settings

pytestmark = pytest.mark.timeout(120)

SPELLINGS = ["127.1", "0x7f.0.0.1", "2130706433", "0177.0.0.01", "127.0.0.1.", "%31%32%37.1",
             "127.0.0.1"]


async def serve(requests: list[str]) -> tuple[web.AppRunner, int]:
    async def page(request: web.Request) -> web.Response:
        requests.append(request.path)
        if request.path == "/robots.txt":
            return web.Response(status=404)
        return web.Response(text="<html><body>page</body></html>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/{tail:.*}", page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


async def crawl(db_url: str, allow: list[str], done: str) -> None:
    """Run a worker with ``allow`` as CRAWLER_ALLOW_NETWORKS until the query ``done`` holds."""
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=4)
    limits = default_settings(connect_timeout=2.0, first_byte_timeout=5.0,
                          total_timeout=10.0)
    session = new_session("testbot/1.0", address_policy=AddressPolicy(allow))
    config = quick_settings(limits, concurrency=2)
    worker = Worker(config, "ipv4-test", pool, session, NullEvents())  # type: ignore[arg-type]
    task = asyncio.create_task(worker.run())
    try:
        await wait_for(lambda: pool.fetchval(done), done)
    finally:
        worker.stop()
        await task
        await asyncio.gather(*worker.host_tasks, return_exceptions=True)
        await session.close()
        await pool.close()


def test_shorthand_ipv4_seeds_are_one_host_refused_unless_allowed(db_url: str) -> None:
    requests: list[str] = []
    loop = asyncio.new_event_loop()
    try:
        runner, port = loop.run_until_complete(serve(requests))
        seeded = crawler("seed", *(f"http://{s}:{port}/p" for s in SPELLINGS), db_url=db_url)
        assert seeded.returncode == 0, seeded.stderr
        assert "seeded 1 new URL " in seeded.stdout and "6 duplicate" in seeded.stdout
        origin = f"http://127.0.0.1:{port}"
        [url] = json.loads(crawler("urls", "--json", db_url=db_url).stdout)
        assert (url["url"], url["origin"]) == (f"{origin}/p", origin)

        # Without the allow-list: refused before any request, and said under its address.
        loop.run_until_complete(crawl(
            db_url, [], "SELECT count(*) > 0 FROM hosts WHERE refused_reason IS NOT NULL"))
        assert requests == []
        status = json.loads(crawler("status", "--json", db_url=db_url).stdout)
        assert [h["origin"] for h in status["hosts_refused"]] == [origin]
        # Any spelling names that one host.
        paused = crawler("pause", "--host", f"http://0x7f.1:{port}", db_url=db_url)
        assert paused.returncode == 0 and origin in paused.stdout, paused.stderr
        assert crawler("resume", "--host", f"2130706433:{port}", db_url=db_url).returncode == 0

        # Opened: fetched, once, at the address.
        loop.run_until_complete(asyncpg_execute(
            db_url, "UPDATE urls SET next_fetch_at = now() - interval '1 second'; "
                    "UPDATE hosts SET robots_expires_at = NULL, backoff_until = NULL, "
                    "consecutive_failures = 0, next_due_at = now() - interval '1 second'"))
        loop.run_until_complete(crawl(
            db_url, ["127.0.0.0/8"],
            "SELECT count(*) > 0 FROM observations WHERE outcome = 'ok'"))
        assert "/p" in requests
        shown = json.loads(crawler("show", f"http://127.1:{port}/p", "--json",
                                   db_url=db_url).stdout)
        assert shown["last_status"] == 200
        loop.run_until_complete(runner.cleanup())
    finally:
        loop.close()


async def asyncpg_execute(db_url: str, sql: str) -> None:
    conn = await asyncpg.connect(db_url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()
