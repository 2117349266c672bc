"""A URL that answered 404, 500 or nothing at all shows that it was fetched, and how it went.

``last_fetched_at`` is the last fetch that brought content (the change estimator measures its
intervals from it), so a failed fetch leaves it alone; ``last_attempt_at`` and
``last_outcome`` are the last request whatever its answer, shown by ``crawler urls`` and
``crawler show`` (QA: after a 404 nothing said the URL had been fetched at all).
"""

from __future__ import annotations

import asyncio
import json
import time

import asyncpg
import pytest
from aiohttp import web
from inprocess import NullEvents, quick_settings, wait_for
from test_cli_errors import crawler

from crawler.daemon.worker import Worker
from crawler.db import frontier
from crawler.net.fetch import new_session
from crawler.net.ssrf import AddressPolicy
from crawler.settings import default_settings

pytestmark = pytest.mark.timeout(120)


async def answer(request: web.Request) -> web.Response:
    statuses = {"/ok": 200, "/missing": 404, "/broken": 500}
    if request.path not in statuses:
        return web.Response(status=404)
    return web.Response(status=statuses[request.path], text="<html><body>page</body></html>",
                        content_type="text/html")


async def fetch_each_once(db_url: str) -> str:
    """Serve /ok, /missing and /broken on loopback and let a worker fetch each once."""
    app = web.Application()
    app.router.add_get("/{tail:.*}", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    origin = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=4)
    limits = default_settings(connect_timeout=2.0, first_byte_timeout=5.0,
                          total_timeout=10.0)
    session = new_session("testbot/1.0", address_policy=AddressPolicy(["127.0.0.0/8"]))
    config = quick_settings(limits, concurrency=2)
    worker = Worker(config, "attempt-test", pool, session, NullEvents())  # type: ignore[arg-type]
    try:
        await frontier.seed(pool, [(f"{origin}{p}", 1.0) for p in ("/ok", "/missing", "/broken")],
                            time.time() - 1)
        task = asyncio.create_task(worker.run())

        async def all_fetched() -> bool:
            return await pool.fetchval("SELECT count(DISTINCT url_id) FROM observations") == 3

        try:
            await wait_for(all_fetched, "one fetch of each URL")
        finally:
            worker.stop()
            await task
            await asyncio.gather(*worker.host_tasks, return_exceptions=True)
    finally:
        await session.close()
        await pool.close()
        await runner.cleanup()
    return origin


def test_a_failed_fetch_shows_when_it_was_attempted_and_how_it_went(
    db_url: str, statements: str
) -> None:
    origin = asyncio.run(fetch_each_once(db_url))
    listed = crawler("urls", "--json", db_url=db_url)
    assert listed.returncode == 0, listed.stderr
    rows = {r["url"]: r for r in json.loads(listed.stdout)}
    ok, missing, broken = (rows[f"{origin}{p}"] for p in ("/ok", "/missing", "/broken"))
    assert (ok["last_status"], ok["last_outcome"]) == (200, "ok")
    assert ok["last_attempt_at"] == ok["last_fetched_at"] is not None
    assert (missing["last_status"], missing["last_outcome"]) == (404, "gone")
    assert (broken["last_status"], broken["last_outcome"]) == (500, "http_error")
    for row in (missing, broken):
        assert row["last_attempt_at"] is not None, row
        # No content observed: the estimator's interval still starts at the last content.
        assert row["last_fetched_at"] is None, row
    table = crawler("urls", db_url=db_url).stdout
    assert "last_attempt_at" in table.splitlines()[0] and "gone" in table

    shown = crawler("show", f"{origin}/missing", "--json", db_url=db_url)
    assert shown.returncode == 0, shown.stderr
    url = json.loads(shown.stdout)
    assert url["last_attempt_at"] == missing["last_attempt_at"]
    assert url["last_attempt_at"] == url["observations"][0]["fetched_at"]
    assert url["last_outcome"] == "gone" and url["last_fetched_at"] is None
    text = crawler("show", f"{origin}/missing", db_url=db_url).stdout
    [attempt_line] = [line for line in text.splitlines() if line.startswith("last_attempt_at")]
    assert attempt_line.split()[1] == url["last_attempt_at"], text
