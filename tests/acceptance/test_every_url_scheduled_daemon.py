"""The real daemon through every failure outcome (issue 33): timeouts, refused connections,
404 and 410 then 200, robots.txt errors, TLS errors, a 5xx, and a window page that answers
404, leaves its window and re-enters it when it is linked again. Afterwards every URL that
was not removed has a next fetch time (tests/invariants.py), no later than the maximum
interval, and each page that came back emitted a `back` event."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import time
from pathlib import Path
from urllib.parse import quote

import asyncpg
import pytest
from aiohttp import web
from daemon import daemon_env, start_daemon, stop_daemon
from hostile import HostileServer
from invariants import assert_every_url_scheduled, unscheduled_urls
from tls import TestCA, serve, server_context

from crawler.db import frontier

pytestmark = pytest.mark.timeout(300)

MAX_INTERVAL = 3600.0
WINDOW = 3


class Flipping:
    """Pages whose answer the test changes: a site's window pages and pages that are gone
    for a while. ``gone`` paths answer their status (404 or 410); the root links to
    ``links`` in order."""

    def __init__(self) -> None:
        self.gone: dict[str, int] = {}
        self.links = ["/a", "/b", "/c"]

    def app(self) -> web.Application:
        async def page(request: web.Request) -> web.Response:
            status = self.gone.get(request.path)
            if status is not None:
                return web.Response(status=status, text="not here")
            anchors = "".join(f'<p><a href="{link}">{link}</a></p>' for link in self.links)
            body = (f"<html><body><h1>{request.path}</h1><p>{'words ' * 40}</p>"
                    f"{anchors if request.path == '/' else ''}</body></html>")
            return web.Response(text=body, content_type="text/html")

        app = web.Application()
        app.router.add_get("/{tail:.*}", page)
        return app


def closed_port(host: str) -> int:
    """A port on ``host`` where nothing listens: connections to it are refused."""
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
    return port


async def wait_until(pool: asyncpg.Pool, query: str, *args: object,
                     seconds: float = 90.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if await pool.fetchval(query, *args):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"not within {seconds} s: {query} {args}")


OUTCOMES = """
SELECT count(*) FILTER (WHERE o.outcome = $2) >= $3
FROM observations AS o JOIN urls AS u ON u.id = o.url_id WHERE u.url = $1
"""
IN_WINDOW = "SELECT in_window AND state = 'active' FROM urls WHERE url = $1"
LINKED = """
SELECT EXISTS (SELECT 1 FROM links AS l JOIN urls AS f ON f.id = l.from_url_id
               JOIN urls AS t ON t.id = l.to_url_id WHERE f.url = $1 AND t.url = $2)
"""


async def test_every_url_keeps_a_next_fetch_time_through_every_failure(
    db_url: str, tmp_path: Path
) -> None:
    flipping, site = Flipping(), Flipping()
    ca = TestCA()
    hostile = {name: HostileServer(f"127.0.0.{n}") for name, n in (
        ("timeout", 81), ("robots503", 82), ("robots_timeout", 83), ("redirects", 84),
        ("status500", 85),
    )}
    hostile["robots503"].robots_mode = "status-503"
    hostile["robots_timeout"].robots_mode = "timeout"
    refused = f"http://127.0.0.86:{closed_port('127.0.0.86')}"
    async with contextlib.AsyncExitStack() as stack:
        for server in hostile.values():
            await server.start()
            stack.push_async_callback(server.stop)
        flips = await stack.enter_async_context(serve(host="127.0.0.87", app=flipping.app()))
        root = await stack.enter_async_context(serve(host="127.0.0.88", app=site.app())) + "/"
        # A certificate no one trusts: every TLS handshake with this host fails.
        untrusted = await stack.enter_async_context(serve(
            server_context(*ca.issue(["127.0.0.89"], self_signed=True), tmp_path),
            host="127.0.0.89",
        ))
        redirects = hostile["redirects"]
        gone_pages = {flips + "/p404": 404, flips + "/p410": 410}
        for url, status in gone_pages.items():
            flipping.gone[url.removeprefix(flips)] = status
        failing = {
            hostile["timeout"].url("/silent"): "timeout",
            redirects.url("/redirect?to=" + quote(refused + "/hop")): "network_error",
            redirects.url("/redirect?to=" + quote(untrusted + "/hop")): "network_error",
            hostile["status500"].url("/status/500"): "http_error",
        }
        unreachable_robots = {  # origin -> a URL of it, never requested
            hostile["robots503"].origin: hostile["robots503"].url("/page"),
            hostile["robots_timeout"].origin: hostile["robots_timeout"].url("/page"),
            refused: refused + "/page",
            untrusted: untrusted + "/page",
        }
        env = daemon_env(
            db_url, schedule="uniform", default_interval="1", min_interval="0.2",
            max_interval=str(MAX_INTERVAL), gone_checks="3", politeness_delay="0.05",
            poll_interval="0.1", total_timeout="2", first_byte_timeout="1",
            connect_timeout="0.5", max_crawl_delay="1", backoff_base_seconds="0.2",
        )
        seeded = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "crawler", "seed", "--window", str(WINDOW), root, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )
        said, _ = await asyncio.wait_for(seeded.communicate(), 60)
        assert seeded.returncode == 0, said.decode()
        pool = await asyncpg.create_pool(db_url)
        stack.push_async_callback(pool.close)
        urls = [*gone_pages, *failing, *unreachable_robots.values()]
        await frontier.seed(pool, [(u, 1.0) for u in urls], time.time())
        proc = await start_daemon(env)
        try:
            # 404 and 410, then 200: each page is found back by its gone recheck.
            for url in gone_pages:
                await wait_until(pool, OUTCOMES, url, "gone", 1)
                del flipping.gone[url.removeprefix(flips)]
            for url in gone_pages:
                await wait_until(pool, OUTCOMES, url, "ok", 1)

            # A window page answers 404 (twice: its next gone recheck is a minute away) and
            # leaves the window; the next page takes its place.
            a, c = root + "a", root + "c"
            await wait_until(pool, IN_WINDOW, a)
            site.gone["/a"] = 404
            await wait_until(pool, OUTCOMES, a, "gone", 2)
            await wait_until(pool, IN_WINDOW, c)
            assert await unscheduled_urls(db_url) == []  # gone, out of the window: scheduled
            # Its link goes, and comes back with the page: the new link has it fetched now,
            # long before its gone recheck, and found back it re-enters the window.
            site.links = ["/b", "/c"]
            await wait_until(pool, f"SELECT NOT ({LINKED})", root, a)
            del site.gone["/a"]
            site.links = ["/a", "/b", "/c"]
            await wait_until(pool, IN_WINDOW, a, seconds=30)
            await wait_until(pool, "SELECT NOT in_window FROM urls WHERE url = $1", c)

            for url, outcome in failing.items():
                await wait_until(pool, OUTCOMES, url, outcome, 1)
            await wait_until(
                pool, "SELECT count(*) = $2 FROM hosts WHERE origin = ANY($1::text[]) "
                "AND robots_fetched_at IS NOT NULL", list(unreachable_robots),
                len(unreachable_robots))
            assert proc.returncode is None, "the daemon died"
        finally:
            out = await stop_daemon(proc)
        assert proc.returncode == 0, out[-3000:]

        await assert_every_url_scheduled(db_url)
        late = await pool.fetch(
            "SELECT url, next_fetch_at FROM urls WHERE isfinite(next_fetch_at) "
            "AND next_fetch_at > now() + make_interval(secs => $1)", MAX_INTERVAL)
        assert late == [], late
        errors = {r["url"]: r["error_kind"] for r in await pool.fetch(
            "SELECT u.url, o.error_kind FROM observations AS o JOIN urls AS u "
            "ON u.id = o.url_id WHERE o.outcome = 'network_error'")}
        assert any(kind and kind.startswith("tls") for kind in errors.values()), errors
        assert await pool.fetchval(
            "SELECT last_error_kind FROM hosts WHERE origin = $1", untrusted) is not None
        backs = {r["url"] for r in await pool.fetch(
            "SELECT u.url FROM change_events AS e JOIN urls AS u ON u.id = e.url_id "
            "WHERE e.kind = 'back'")}
        assert backs == {*gone_pages, a}
