"""Loopback seeded without the allow-list: said once per host in the log and in status."""

from __future__ import annotations

import asyncio
import json
import sys
import time

import asyncpg
import pytest
from aiohttp import web
from daemon import daemon_env, start_daemon, stop_daemon

pytestmark = pytest.mark.timeout(180)


async def test_refused_loopback_host_is_logged_once_and_shown_in_status(db_url: str) -> None:
    env = daemon_env(db_url, log_level="WARNING", poll_interval="0.2")
    del env["CRAWLER_ALLOW_NETWORKS"]
    seed = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawler", "seed", "http://127.0.0.1:9/a", "http://127.0.0.1:9/b",
        env=env)
    assert await seed.wait() == 0
    proc = await start_daemon(env)
    conn = await asyncpg.connect(db_url)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.returncode is None:
            if await conn.fetchval("SELECT count(*) FROM hosts WHERE refused_reason IS NOT NULL"):
                break
            await asyncio.sleep(0.1)
    finally:
        await conn.close()
        output = await stop_daemon(proc)
    assert output.count("refused by the SSRF policy") == 1, output
    assert "CRAWLER_ALLOW_NETWORKS" in output
    status = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawler", "status", "--json", env=env,
        stdout=asyncio.subprocess.PIPE)
    out, _ = await status.communicate()
    refused = json.loads(out)["hosts_refused"]
    assert [h["origin"] for h in refused] == ["http://127.0.0.1:9"]
    assert "CRAWLER_ALLOW_NETWORKS" in refused[0]["reason"]


async def test_a_host_refused_after_its_robots_txt_was_cached_is_said_too(db_url: str) -> None:
    """Crawled with loopback allowed, then run without the allow-list: its robots.txt is still
    fresh, so only the page fetches meet the refusal. It is said once, and listed, as when
    robots.txt itself is refused (QA: blocked observations, no word in the log or status)."""

    async def page(_: web.Request) -> web.Response:
        return web.Response(text="<html><body>page</body></html>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/{tail:.*}", page)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    allowed = daemon_env(db_url, log_level="WARNING", poll_interval="0.2")
    refused = {k: v for k, v in allowed.items() if k != "CRAWLER_ALLOW_NETWORKS"}
    conn = await asyncpg.connect(db_url)
    try:
        seed = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "crawler", "seed", f"http://127.0.0.1:{port}/a", env=allowed)
        assert await seed.wait() == 0
        for env, done in (
            (allowed, "SELECT count(*) FROM observations WHERE status = 200"),
            (refused, "SELECT count(*) FROM hosts WHERE refused_reason IS NOT NULL"),
        ):
            await conn.execute("UPDATE urls SET next_fetch_at = now()")
            await conn.execute("UPDATE hosts SET next_due_at = now()")
            proc = await start_daemon(env)
            try:
                deadline = time.monotonic() + 90
                while time.monotonic() < deadline and proc.returncode is None:
                    if await conn.fetchval(done):
                        break
                    await asyncio.sleep(0.1)
            finally:
                output = await stop_daemon(proc)
        assert await conn.fetchval(
            "SELECT count(*) FROM observations WHERE error_kind = 'ssrf'"), output
    finally:
        await conn.close()
        await runner.cleanup()
    assert output.count("refused by the SSRF policy") == 1, output
    status = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawler", "status", "--json", env=refused,
        stdout=asyncio.subprocess.PIPE)
    out, _ = await status.communicate()
    assert [h["origin"] for h in json.loads(out)["hosts_refused"]] == [
        f"http://127.0.0.1:{port}"]
