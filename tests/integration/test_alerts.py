"""Alerts from a real worker against real loopback servers.

- A site that answers 500 raises ``failing`` after the threshold of consecutive failures,
  listed by ``crawler status`` and ``crawler show`` while it lasts; when it answers again it
  raises ``recovered`` and leaves the lists. ``crawler changes`` filters them by kind, URL
  and host.
- A TLS failure on robots.txt is counted in ``crawler_fetch_errors_total`` under its kind and
  raises ``failing`` for the host; ``crawler status`` lists it after its backoff ends.
- A watched selector that stops matching raises ``region_missing``, once.

The worker is driven by making its URLs due again (``make_due``) rather than by waiting for
their schedule.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from aiohttp import web
from inprocess import NullEvents, quick_settings, serve_loopback
from tls import TestCA, serve, server_context

from crawler.daemon.alerts import Alerts
from crawler.daemon.worker import Worker
from crawler.db import frontier
from crawler.db.queries import QUERIES
from crawler.metrics import Metrics
from crawler.net.fetch import new_session
from crawler.net.ssrf import AddressPolicy
from crawler.settings import default_settings

pytestmark = pytest.mark.timeout(120)

THRESHOLD = 3


async def make_due(pool: asyncpg.Pool, robots: bool = False) -> None:
    """Every URL due now, and every host free to be claimed (no backoff, no politeness);
    with ``robots``, its robots.txt is asked for again, as at its retry time."""
    await pool.execute("UPDATE urls SET next_fetch_at = now()")
    await pool.execute("UPDATE hosts SET next_due_at = now(), backoff_until = NULL, "
                       "next_request_at = '-infinity', robots_expires_at = CASE WHEN $1 "
                       "THEN now() ELSE robots_expires_at END WHERE lease_owner IS NULL",
                       robots)


async def events(pool: asyncpg.Pool, *kinds: str) -> list[dict[str, Any]]:
    rows = await pool.fetch("SELECT kind, payload FROM change_events WHERE kind = ANY($1) "
                            "ORDER BY id", list(kinds))
    return [{"kind": r["kind"], **json.loads(r["payload"])} for r in rows]


async def drive_until(pool: asyncpg.Pool, *kinds: str, count: int = 1,
                      seconds: float = 60.0, robots: bool = False) -> list[dict[str, Any]]:
    """Make the URLs due again, round after round, until ``count`` events of ``kinds``."""
    deadline = time.monotonic() + seconds
    while len(found := await events(pool, *kinds)) < count:
        assert time.monotonic() < deadline, f"no {kinds} event in time"
        await make_due(pool, robots)
        await asyncio.sleep(0.05)
    return found


class Worked:
    """A worker with alerts, running in this process for the block's duration."""

    def __init__(self, pool: asyncpg.Pool, metrics: Any = None) -> None:
        limits = default_settings()
        self.session = new_session("t", address_policy=AddressPolicy(["127.0.0.0/8"]))
        config = quick_settings(limits, concurrency=2)
        self.worker = Worker(config, "alerts-test", pool, self.session, metrics or NullEvents(),  # type: ignore[arg-type]
                             alerts=Alerts(pool, THRESHOLD))
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Worker:
        self.task = asyncio.create_task(self.worker.run())
        return self.worker

    async def __aexit__(self, *exc: object) -> None:
        self.worker.stop()
        assert self.task is not None
        await asyncio.wait_for(self.task, 30)
        await asyncio.gather(*self.worker.host_tasks, return_exceptions=True)
        await self.session.close()


async def crawler_json(db_url: str, *args: str) -> Any:
    env = {**os.environ, "CRAWLER_DATABASE_URL": db_url}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawler", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return json.loads(out)


@pytest.fixture
async def flaky() -> AsyncIterator[tuple[str, dict[str, bool]]]:
    """A site whose pages answer 500 while ``state["failing"]``; no robots.txt (404)."""
    state = {"failing": True}

    async def handle(request: web.Request) -> web.Response:
        if request.path == "/robots.txt":
            return web.Response(status=404)
        if state["failing"]:
            return web.Response(status=500)
        return web.Response(text="<html><body><p>fine</p></body></html>",
                            content_type="text/html")

    async with serve_loopback(handle) as origin:
        yield origin, state


async def test_a_failing_site_raises_failing_then_recovered(
    db_url: str, flaky: tuple[str, dict[str, bool]]
) -> None:
    origin, state = flaky
    url = f"{origin}/page"
    pool = await asyncpg.create_pool(db_url)
    try:
        await frontier.seed(pool, [(url, 1.0)], time.time())
        async with Worked(pool):
            failing = await drive_until(pool, "failing")
            assert len(failing) == 1
            event = failing[0]
            # The URL and its host failed together: one event, the host's.
            assert (event["scope"], event["failures"], event["error_kind"]) == (
                "host", THRESHOLD, "http_500"), event
            assert event["origin"] == origin and event["url"] == url
            status = await crawler_json(db_url, "status", "--json")
            assert [(f["origin"], f["scope"]) for f in status["failing"]] == [
                (origin, "host"), (origin, "url")], status["failing"]
            shown = await crawler_json(db_url, "show", url, "--json")
            assert {f["scope"] for f in shown["failing"]} == {"host", "url"}
            state["failing"] = False
            recovered = await drive_until(pool, "recovered")
        assert len(recovered) == 1
        # The run's length: the failures until the site answered again (the fetches went on
        # while the lists were read).
        assert recovered[0]["scope"] == "host" and recovered[0]["failures"] >= THRESHOLD
        assert await events(pool, "failing") == failing  # no second alert
        status = await crawler_json(db_url, "status", "--json")
        assert status["failing"] == [] and status["lists"]["totals"]["failing"] == 0
        # crawler changes filters by kind, URL and host.
        page = await crawler_json(db_url, "changes", "--kind", "failing,recovered", "--json")
        assert [e["kind"] for e in page["events"]] == ["failing", "recovered"]
        page = await crawler_json(db_url, "changes", "--url", url, "--kind", "recovered",
                                  "--json")
        assert [e["kind"] for e in page["events"]] == ["recovered"]
        page = await crawler_json(db_url, "changes", "--host", "http://127.0.0.1:1",
                                  "--json")
        assert page["events"] == []
        page = await crawler_json(db_url, "changes", "--host", origin, "--json")
        assert len(page["events"]) == 2
    finally:
        await pool.close()


async def test_a_url_failing_alone_raises_its_own_alert(db_url: str) -> None:
    """One URL of a working host fails: the host's successes keep it well, the URL alerts."""
    async def handle(request: web.Request) -> web.Response:
        if request.path == "/bad":
            return web.Response(status=403)  # an error of the URL's; the host is well
        if request.path == "/robots.txt":
            return web.Response(status=404)
        return web.Response(text="<p>ok</p>", content_type="text/html")

    pool = await asyncpg.create_pool(db_url)
    try:
        async with serve_loopback(handle) as origin:
            await frontier.seed(pool, [(f"{origin}/bad", 1.0), (f"{origin}/good", 1.0)],
                                time.time())
            async with Worked(pool):
                failing = await drive_until(pool, "failing")
        assert [(e["scope"], e["url"], e["error_kind"]) for e in failing] == [
            ("url", f"{origin}/bad", "http_403")]
    finally:
        await pool.close()


async def test_a_tls_failure_on_robots_txt_is_counted_and_listed(db_url: str) -> None:
    ca = TestCA()
    cert, key = ca.issue(["127.0.0.1"], self_signed=True)
    metrics = Metrics()
    pool = await asyncpg.create_pool(db_url)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            async with serve(server_context(cert, key, Path(tmp))) as origin:
                await frontier.seed(pool, [(f"{origin}/page", 1.0)], time.time())
                async with Worked(pool, metrics):
                    failing = await drive_until(pool, "failing", robots=True)
        counted = metrics.fetch_limits_hit.labels("tls_self_signed")._value.get()
        assert counted >= THRESHOLD
        assert [(e["scope"], e["url"], e["error_kind"]) for e in failing] == [
            ("host", f"{origin}/robots.txt", "tls_self_signed")]
        # The robots.txt backoff ends; the failure is still listed until a request works.
        await pool.execute("UPDATE hosts SET backoff_until = NULL")
        status = await crawler_json(db_url, "status", "--json")
        assert [(f["origin"], f["error_kind"]) for f in status["failing"]] == [
            (origin, "tls_self_signed")]
        shown = await crawler_json(db_url, "show", f"{origin}/page", "--json")
        assert [f["error_kind"] for f in shown["failing"]] == ["tls_self_signed"]
    finally:
        await pool.close()


async def test_a_watched_selector_that_stops_matching_raises_region_missing(
    db_url: str,
) -> None:
    page = {"body": "<html><body><p id=price>12.50</p><p>other</p></body></html>"}

    async def handle(request: web.Request) -> web.Response:
        if request.path == "/robots.txt":
            return web.Response(status=404)
        return web.Response(text=page["body"], content_type="text/html")

    pool = await asyncpg.create_pool(db_url)
    try:
        async with serve_loopback(handle) as origin:
            url = f"{origin}/item"
            await frontier.seed(pool, [(url, 1.0)], time.time())
            await pool.execute(QUERIES["set_url_region"], [url], "#price", None)
            async with Worked(pool):
                await wait_fetched(pool, 1)
                page["body"] = "<html><body><p>sold out</p><p>other</p></body></html>"
                missing = await drive_until(pool, "region_missing")
                fetched = await pool.fetchval("SELECT fetch_count FROM urls")
                await make_due(pool)
                await wait_fetched(pool, fetched + 1)
        assert len(await events(pool, "region_missing")) == 1  # once, not on every fetch
        assert (missing[0]["url"], missing[0]["watch"]) == (url, "#price")
    finally:
        await pool.close()


async def wait_fetched(pool: asyncpg.Pool, count: int, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while (await pool.fetchval("SELECT coalesce(sum(fetch_count), 0) FROM urls")) < count:
        assert time.monotonic() < deadline, "not fetched in time"
        await asyncio.sleep(0.05)
