"""A daemon that shows its work (issue 35): `crawler run` logs a line of figures as Scrapy's
LogStats does, a line per change it finds, and its crawl log names a 404 on a page fetched
before by its outcome: `first` is a page's first content only."""

from __future__ import annotations

import asyncio
import re
import sys
import time

import pytest
from aiohttp import web
from daemon import daemon_env, start_daemon, stop_daemon

pytestmark = pytest.mark.timeout(180)

VERSIONS = [
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima",
    "mike november oscar papa quebec romeo sierra tango uniform victor whiskey xray",
]


async def read_until(proc: asyncio.subprocess.Process, seen: list[str],
                     wanted: list[re.Pattern[str]], seconds: float) -> None:
    """Read the daemon's lines into ``seen`` until each pattern has matched one."""
    assert proc.stdout is not None
    deadline = time.monotonic() + seconds
    while not all(any(p.search(line) for line in seen) for p in wanted):
        remaining = deadline - time.monotonic()
        assert remaining > 0, "\n".join(seen)
        line = await asyncio.wait_for(proc.stdout.readline(), remaining)
        assert line, "\n".join(seen)  # the daemon exited
        seen.append(line.decode().rstrip())


async def test_run_shows_its_work(db_url: str) -> None:
    served = {"/": 0}

    async def page(_: web.Request) -> web.Response:
        served["/"] += 1
        if served["/"] > len(VERSIONS):  # the page goes away after two versions
            return web.Response(status=404, text="gone")
        text = VERSIONS[served["/"] - 1]
        return web.Response(text=f"<html><body><p>{text}</p></body></html>",
                            content_type="text/html")

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
    env = daemon_env(db_url, log_fetches="true", log_level="INFO", poll_interval="0.1",
                     default_interval="0.3", min_interval="0.2", politeness_delay="0",
                     detect_periods="false", schedule="uniform", log_stats_interval="0.5",
                     store_versions="false")
    seen: list[str] = []
    try:
        seed = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "crawler", "seed", url, env=env)
        assert await seed.wait() == 0
        proc = await start_daemon(env)
        try:
            await read_until(proc, seen, [
                re.compile(rf"Crawled \(200\) <GET {url}> .* first$"),
                re.compile(rf"crawler.changes: changed: {url} \(simhash distance \d+ bits\)"),
                re.compile(rf"Crawled \(404\) <GET {url}> .* gone$"),
                re.compile(r"crawler.stats: crawled [1-9]\d* pages? \(\d+/min\), \d+ "
                           r"changes?, [1-9]\d* errors? in the last \d+ s; (-|\d+) URLs due, "
                           r"most overdue "),
            ], 120)
        finally:
            seen += (await stop_daemon(proc)).splitlines()
    finally:
        await runner.cleanup()
    stats = [re.search(r"crawled (\d+) pages? .*, (\d+) changes?, (\d+) errors?", line)
             for line in seen if "crawler.stats:" in line]
    totals = [sum(int(m.group(i)) for m in stats if m) for i in (1, 2, 3)]
    assert totals[1] >= 1 and totals[0] >= totals[1] + totals[2], "\n".join(seen)
    crawled = [line for line in seen if f"<GET {url}>" in line]
    assert crawled[1].endswith(" changed"), crawled
    # 404s after the first keep the outcome's word, never "first".
    assert all(line.endswith(" gone") for line in crawled[2:]), crawled
