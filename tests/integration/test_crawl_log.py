"""One Scrapy-like crawl log line per fetch, at INFO with CRAWLER_LOG_FETCHES (issue 15)."""

from __future__ import annotations

import asyncio
import sys
import time

import asyncpg
import pytest
from aiohttp import web
from daemon import daemon_env, start_daemon, stop_daemon

pytestmark = pytest.mark.timeout(180)


async def test_crawled_line_per_fetch(db_url: str) -> None:
    async def page(_: web.Request) -> web.Response:
        return web.Response(text="<html><body>hello</body></html>", content_type="text/html")

    async def robots(_: web.Request) -> web.Response:
        return web.Response(text="User-agent: *\nAllow: /\n")

    app = web.Application()
    app.router.add_get("/", page)
    app.router.add_get("/robots.txt", robots)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    url = f"http://127.0.0.1:{port}/"
    env = daemon_env(db_url, log_fetches="true", log_level="INFO", poll_interval="0.2")
    try:
        seed = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "crawler", "seed", url, env=env)
        assert await seed.wait() == 0
        proc = await start_daemon(env)
        conn = await asyncpg.connect(db_url)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.returncode is None:
                if await conn.fetchval("SELECT count(*) FROM observations"):
                    break
                await asyncio.sleep(0.1)
        finally:
            await conn.close()
            output = await stop_daemon(proc)
    finally:
        await runner.cleanup()
    assert f"Crawled (200) <GET {url}> 31 bytes" in output, output
    assert " first" in output.split(f"<GET {url}>", 1)[1].splitlines()[0]
