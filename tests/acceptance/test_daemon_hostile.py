"""The real daemon against hostile servers: every fault ends as a labelled observation, the
daemon keeps running, and nothing is lost or left leased in the database (issue 4)."""

from __future__ import annotations

import asyncio
import email.utils
import time
from urllib.parse import quote

import asyncpg
import pytest
from daemon import daemon_env, start_daemon, stop_daemon
from hostile import HostileServer, bomb
from invariants import assert_every_url_scheduled

from crawler.db import frontier

pytestmark = pytest.mark.timeout(240)

# path -> (outcome, error_kind); each on a host of its own so that one host's backoff or
# circuit breaker never hides another fault.
PAGE_FAULTS: dict[str, tuple[str, str | None]] = {
    "/ok": ("ok", None),
    "/bomb/gzip": ("ok", "decompression_bomb"),
    "/bomb/deflate": ("ok", "decompression_bomb"),
    "/bomb/br": ("ok", "decompression_bomb"),
    "/bomb/zstd": ("ok", "decompression_bomb"),
    "/nested": ("ok", None),
    "/nested-bomb": ("ok", "decompression_bomb"),
    "/cl-larger": ("network_error", "broken_body"),
    "/cl-smaller": ("network_error", "bad_status_line"),
    "/chunked-broken": ("network_error", "broken_body"),
    "/endless": ("ok", "too_large"),
    "/silent": ("timeout", "timeout_first_byte"),
    "/trickle?interval=0.4": ("timeout", "timeout_total"),
    "/no-status": ("network_error", "bad_status_line"),
    "/loop": ("http_error", "redirect_loop"),
    "/chain/21": ("http_error", "too_many_redirects"),
    "/redirect?to=" + quote("file:///etc/passwd"): ("blocked", "bad_redirect_scheme"),
    "/redirect?to=" + quote("data:text/html,hi"): ("blocked", "bad_redirect_scheme"),
    "/redirect?to=" + quote("javascript:alert(1)"): ("blocked", "bad_redirect_scheme"),
    "/redirect?to=" + quote("http://169.254.169.254/latest/meta-data/"): ("blocked", "ssrf"),
    "/status/429?retry_after=120": ("http_error", "http_429"),
    "/status/503?retry_after=DATE": ("http_error", "http_503"),
    "/status/500": ("http_error", "http_500"),
    "/invalid-utf8": ("ok", None),
    "/contradictory-charset": ("ok", None),
    "/pdf-as-html": ("ok", None),
    "/private/secret": ("disallowed", "robots_txt"),
    "/moved": ("redirect", None),
}

# robots.txt mode -> {path: expected outcome, or None when the host must not be fetched}
ROBOTS_FAULTS: dict[str, dict[str, str | None]] = {
    "status-503": {"/page": None},
    "timeout": {"/page": None},
    "redirect-6": {"/page": "ok"},
    "loop": {"/page": "ok"},
    "huge": {"/early": "disallowed", "/late": "ok"},
    "html": {"/page": "ok"},
    "delay-86400": {"/page": "ok"},
    "delay--1": {"/page": "ok"},
    "delay-abc": {"/page": "ok"},
}


async def test_every_fault_is_recorded_and_the_daemon_survives(db_url: str) -> None:
    # Compressing the bombs takes seconds: do it now, not in the servers' event loop.
    await asyncio.to_thread(lambda: [bomb(e) for e in ("gzip", "deflate", "br", "zstd")])
    retry_date = email.utils.formatdate(time.time() + 3600, usegmt=True)
    servers: list[HostileServer] = []
    expected: dict[str, str | None] = {}
    expected_kind: dict[str, str | None] = {}
    address = 40
    for path, (outcome, kind) in PAGE_FAULTS.items():
        server = HostileServer(f"127.0.0.{address}")
        address += 1
        await server.start()
        servers.append(server)
        url = server.url(path.replace("DATE", quote(retry_date)))
        expected[url], expected_kind[url] = outcome, kind
    robots_servers: dict[str, HostileServer] = {}
    for mode, pages in ROBOTS_FAULTS.items():
        server = HostileServer(f"127.0.0.{address}")
        address += 1
        server.robots_mode = mode
        await server.start()
        servers.append(server)
        robots_servers[mode] = server
        for path, outcome in pages.items():
            expected[server.url(path)] = outcome
    env = daemon_env(
        db_url, schedule="uniform", default_interval="3600", total_timeout="3",
        first_byte_timeout="1.5", connect_timeout="0.5", max_body_bytes=str(1024 * 1024),
        max_crawl_delay="1", politeness_delay="0.05", poll_interval="0.1", lease_seconds="30",
    )
    pool = await asyncpg.create_pool(db_url)
    try:
        seeded = await frontier.seed(pool, [(u, 1.0) for u in expected], time.time())
        assert seeded.inserted == len(expected)
        proc = await start_daemon(env)
        fetchable = sum(outcome is not None for outcome in expected.values())
        deadline = time.time() + 90
        while time.time() < deadline:
            done = await pool.fetchval("SELECT count(DISTINCT url_id) FROM observations")
            if done >= fetchable:
                break
            await asyncio.sleep(0.5)
        await asyncio.sleep(1.0)
        assert proc.returncode is None, "the daemon died"
        out = await stop_daemon(proc)
        rows = await pool.fetch(
            "SELECT u.url, o.outcome, o.error_kind, o.truncated, o.simhash "
            "FROM urls u LEFT JOIN LATERAL (SELECT * FROM observations WHERE url_id = u.id "
            "ORDER BY fetched_at LIMIT 1) o ON true"
        )
        leased = await pool.fetchval("SELECT count(*) FROM hosts WHERE lease_owner IS NOT NULL")
        backoff = {
            r["origin"]: r["backoff_until"]
            for r in await pool.fetch("SELECT origin, backoff_until FROM hosts")
        }
        redirects = {
            r["url"]: r["redirect_to"]
            for r in await pool.fetch("SELECT url, redirect_to FROM urls")
        }
        delays = {
            r["origin"]: r["crawl_delay_seconds"]
            for r in await pool.fetch("SELECT origin, crawl_delay_seconds FROM hosts")
        }
    finally:
        await pool.close()
        for server in servers:
            await server.stop()

    assert proc.returncode == 0, out[-3000:]
    assert leased == 0
    await assert_every_url_scheduled(db_url)
    got = {r["url"]: r for r in rows}
    problems = []
    for url, outcome in expected.items():
        row = got[url]
        if row["outcome"] != outcome:
            problems.append((url, outcome, row["outcome"], row["error_kind"]))
        elif url in expected_kind and row["error_kind"] != expected_kind[url]:
            problems.append((url, expected_kind[url], row["error_kind"]))
    assert not problems, problems

    # robots.txt unreachable: complete disallow, no page requested, host backed off.
    for mode in ("status-503", "timeout"):
        server = robots_servers[mode]
        assert all(target == "/robots.txt" for _, target in server.requests), server.requests
        assert backoff[server.origin] is not None
    # Crawl-delay 86400 is honoured only up to the maximum; -1 and "abc" are ignored.
    assert delays[robots_servers["delay-86400"].origin] == 1.0
    assert delays[robots_servers["delay--1"].origin] is None
    # A permanent redirect points to its target, which is crawled as a URL of its own.
    moved = next(u for u in expected if u.endswith("/moved"))
    target = moved.removesuffix("/moved") + "/ok"
    assert redirects[moved] == target
    assert got[target]["outcome"] == "ok"
    # A PDF served as text/html is fingerprinted on its bytes only.
    pdf = next(u for u in expected if u.endswith("/pdf-as-html"))
    assert got[pdf]["simhash"] is None
    # 429 with Retry-After: the host waits about two minutes.
    throttled = next(u for u in expected if "/status/429" in u)
    until = backoff[frontier.origin_of(throttled)]
    assert until is not None and 100 < until.timestamp() - time.time() < 130
