"""The HTTP edge seen through the fetch loop and the database: a host whose certificate fails
on robots.txt is visible as such in ``crawler status`` and the log; hostile pages are
recorded (or recorded as errors) and never stop the loop; one connection per host lease."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from aiohttp import web
from daemon import daemon_env, start_daemon
from inprocess import NullEvents, quick_settings, serve_loopback, wait_for
from tls import TestCA, serve, server_context

from crawler.core import bounds
from crawler.daemon.worker import Worker
from crawler.db import frontier
from crawler.net.fetch import new_session
from crawler.net.ssrf import AddressPolicy
from crawler.settings import default_settings
from crawler.status import collect_status

pytestmark = pytest.mark.timeout(120)

LIMITS = default_settings(connect_timeout=1.0, first_byte_timeout=2.0, total_timeout=8.0
)


@pytest.fixture
async def pool(db_url: str) -> AsyncIterator[asyncpg.Pool]:
    connections = await asyncpg.create_pool(db_url, min_size=1, max_size=4)
    yield connections
    await connections.close()


@pytest.fixture
async def run_worker(
    pool: asyncpg.Pool, tmp_path: Path
) -> AsyncIterator[Callable[[TestCA | None], Awaitable[Worker]]]:
    started: list[tuple[Worker, asyncio.Task[None], aiohttp.ClientSession]] = []

    async def start(ca: TestCA | None = None) -> Worker:
        session = new_session(
            "testbot/1.0", address_policy=AddressPolicy(["127.0.0.0/8"]),
            ca_bundle=ca.write(tmp_path / "ca.pem") if ca else None,
        )
        config = quick_settings(LIMITS, concurrency=4)
        worker = Worker(config, "edge-test", pool, session, NullEvents())  # type: ignore[arg-type]
        started.append((worker, asyncio.create_task(worker.run()), session))
        return worker

    yield start
    for worker, task, session in started:
        worker.stop()
        await task
        await asyncio.gather(*worker.host_tasks, return_exceptions=True)
        await session.close()


async def test_certificate_failure_on_robots_is_named_in_status_and_log(
    pool: asyncpg.Pool,
    db_url: str,
    run_worker: Callable[[TestCA | None], Awaitable[Worker]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ca = TestCA()
    now = dt.datetime.now(dt.UTC)
    expired = ca.issue(["127.0.0.1"], not_before=now - dt.timedelta(days=10),
                       not_after=now - dt.timedelta(days=1))
    caplog.set_level(logging.WARNING, logger="crawler.daemon.worker")
    async with serve(server_context(*expired, tmp_path)) as origin:
        await frontier.seed(pool, [(origin + "/page", 1.0)], time.time() - 1)
        await run_worker(ca)

        async def noted() -> bool:
            kind = await pool.fetchval(
                "SELECT last_error_kind FROM hosts WHERE origin = $1", origin
            )
            return kind is not None

        await wait_for(noted, "the host's TLS error")
    status = await collect_status(db_url)
    [entry] = [h for h in status["hosts_in_backoff"] if h["origin"] == origin]
    assert entry["last_error_kind"] == "tls_expired"
    assert entry["robots_unreachable"] is True and entry["last_error_at"] is not None
    assert any("robots.txt failed: tls_expired" in r.getMessage() for r in caplog.records)
    # Nothing was fetched from a host that could not prove who it is.
    assert await pool.fetchval("SELECT count(*) FROM observations") == 0


def hostile_pages() -> dict[str, tuple[bytes, str]]:
    n = 10**6
    japanese = "<html><head><title>日本語</title></head><body><p>日本語のテキスト</p></body></html>"
    return {
        "/nested": ((b"<html><body>" + b"<div>" * n + b"deep" + b"</div>" * n)[: 10 << 20],
                    "text/html"),
        "/one-word": (b"<html><body><p>" + b"w" * (5 << 20) + b"</p></body></html>",
                      "text/html"),
        "/rare": (japanese.encode("iso-2022-jp"), "text/html; charset=iso-2022-jp"),
        "/binary": (os.urandom(1 << 20), "text/html"),
        "/boom": (b"<html><body><p>the parser fails here</p></body></html>", "text/html"),
        "/ok": (b"<html><body><p>an ordinary page</p></body></html>", "text/html"),
    }


async def test_hostile_pages_are_recorded_and_the_loop_goes_on(
    pool: asyncpg.Pool,
    run_worker: Callable[[TestCA | None], Awaitable[Worker]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pages = hostile_pages()
    real_parse = bounds.parse_result

    def parse_failing_on_boom(result: Any, **kwargs: Any) -> Any:
        if b"the parser fails here" in result.body:
            raise RuntimeError("a parser bug this page triggers")
        return real_parse(result, **kwargs)

    monkeypatch.setattr(bounds, "parse_result", parse_failing_on_boom)
    peers: set[tuple[str, int]] = set()

    async def handle(request: web.Request) -> web.Response:
        peers.add(request.transport.get_extra_info("peername"))  # type: ignore[union-attr]
        if request.path == "/robots.txt":
            return web.Response(text="User-agent: *\nAllow: /\n")
        body, content_type = pages[request.path]
        return web.Response(body=body, headers={"Content-Type": content_type})

    async with serve_loopback(handle) as origin:
        await frontier.seed(pool, [(origin + path, 1.0) for path in pages], time.time() - 1)
        await run_worker(None)

        async def all_recorded() -> bool:
            count = await pool.fetchval("SELECT count(*) FROM observations")
            return bool(count >= len(pages))

        await wait_for(all_recorded, "every page's observation")
    rows = await pool.fetch(
        "SELECT u.url, o.outcome, o.error_kind, o.simhash, o.content_hash, o.truncated "
        "FROM observations o JOIN urls u ON u.id = o.url_id"
    )
    seen = {row["url"].removeprefix(origin): row for row in rows}
    assert set(seen) == set(pages)
    assert all(row["outcome"] == "ok" and row["content_hash"] is not None for row in rows)
    assert seen["/boom"]["error_kind"] == "parse_error" and seen["/boom"]["simhash"] is None
    assert seen["/binary"]["simhash"] is None and seen["/binary"]["error_kind"] is None
    for path in ("/nested", "/one-word", "/rare", "/ok"):
        assert seen[path]["simhash"] is not None and seen[path]["error_kind"] is None, path
    # One lease of this host, one kept-alive connection for robots.txt and all six pages.
    assert len(peers) == 1, peers


async def test_unreadable_ca_bundle_stops_the_daemon_with_its_name(
    db_url: str, tmp_path: Path
) -> None:
    bundle = tmp_path / "bundle.pem"
    bundle.write_text("not a certificate\n")
    proc = await start_daemon(daemon_env(db_url, ca_bundle=str(bundle)))
    out, _ = await asyncio.wait_for(proc.communicate(), 90.0)  # it exits by itself
    output = out.decode()
    assert proc.returncode == 2, output
    assert f"CRAWLER_CA_BUNDLE={bundle}" in output, output


async def test_a_release_that_fails_for_a_moment_is_retried(
    pool: asyncpg.Pool,
    run_worker: Callable[[TestCA | None], Awaitable[Worker]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A host given back without a final record (here: backed off after a 503) whose release
    meets a deadlock or a dropped connection is released on a retry, not left leased until
    its lease (60 s here, 300 s by default) expires."""
    real_release = frontier.release_hosts
    calls = 0

    async def release_failing_once(conn: Any, leases: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise asyncpg.exceptions.DeadlockDetectedError("deadlock detected")
        return await real_release(conn, leases)

    monkeypatch.setattr(frontier, "release_hosts", release_failing_once)

    async def handle(request: web.Request) -> web.Response:
        if request.path == "/robots.txt":
            return web.Response(text="User-agent: *\nAllow: /\n")
        return web.Response(status=503, text="busy")

    async with serve_loopback(handle) as origin:
        await frontier.seed(pool, [(origin + "/a", 1.0), (origin + "/b", 1.0)], time.time() - 1)
        await run_worker(None)

        async def backed_off_and_released() -> bool:
            row = await pool.fetchrow("SELECT lease_owner, backoff_until FROM hosts")
            return row is not None and row["backoff_until"] is not None \
                and row["lease_owner"] is None

        await wait_for(backed_off_and_released, "the host given back", seconds=20)
    assert calls == 2
    assert await pool.fetchval("SELECT count(*) FROM observations") == 1
