"""A host whose URLs are gone is never contacted again: `crawler remove` recomputes its due
time, and a daemon that claims a host with no due URL left (URLs deleted by hand) gives it back
without a request, not even for robots.txt. Before, the removed hosts stayed due and the next
`crawler run` fetched robots.txt from every one of them."""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter

import asyncpg
import pytest
from aiohttp import web
from daemon import daemon_env, start_daemon, stop_daemon

from crawler.core.hostid import host_id

pytestmark = pytest.mark.timeout(240)


async def counting_server(address: str, hits: Counter[str]) -> tuple[web.AppRunner, str]:
    """A site on ``address`` that counts every request it gets, by path."""

    async def any_path(request: web.Request) -> web.Response:
        hits[request.path] += 1
        if request.path == "/robots.txt":
            return web.Response(text="User-agent: *\nAllow: /\n")
        return web.Response(text="<html><body>page</body></html>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/{tail:.*}", any_path)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, address, 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://{address}:{port}"


async def crawler(env: dict[str, str], *args: str) -> int:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "crawler", *args, env=env)
    return await proc.wait()


async def test_removed_and_emptied_hosts_are_never_contacted(db_url: str) -> None:
    kept_hits: Counter[str] = Counter()
    removed_hits: Counter[str] = Counter()
    emptied_hits: Counter[str] = Counter()
    servers = [await counting_server("127.0.0.1", kept_hits),
               await counting_server("127.0.0.2", removed_hits),
               await counting_server("127.0.0.3", emptied_hits)]
    (_, kept), (_, removed), (_, emptied) = servers
    env = daemon_env(db_url, poll_interval="0.2")
    conn = await asyncpg.connect(db_url)
    try:
        assert await crawler(env, "seed", f"{kept}/k", f"{removed}/r1", f"{removed}/r2",
                             f"{emptied}/e") == 0
        due = "SELECT next_due_at IS NOT NULL FROM hosts WHERE id = $1"
        assert await crawler(env, "remove", f"{removed}/r1") == 0
        assert await conn.fetchval(due, host_id(removed))  # one URL left: still due
        assert await crawler(env, "remove", f"{removed}/r2") == 0
        assert not await conn.fetchval(due, host_id(removed))
        # By hand, as an operator might: the host row still says it is due.
        await conn.execute("DELETE FROM urls WHERE host_id = $1", host_id(emptied))
        assert await conn.fetchval(due, host_id(emptied))

        proc = await start_daemon(env)
        try:
            deadline = time.monotonic() + 150
            while time.monotonic() < deadline and proc.returncode is None:
                fetched = await conn.fetchval("SELECT count(*) FROM observations")
                if fetched and not await conn.fetchval(due, host_id(emptied)):
                    break
                await asyncio.sleep(0.2)
        finally:
            output = await stop_daemon(proc)
        assert kept_hits["/k"] == 1, output
        assert not await conn.fetchval(due, host_id(emptied)), output
    finally:
        await conn.close()
        for runner, _ in servers:
            await runner.cleanup()
    assert removed_hits == Counter(), output
    assert emptied_hits == Counter(), output
