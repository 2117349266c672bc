"""IndexNow pings against a running, idle daemon (issue 38): a ping with a valid key makes the
page fetched within seconds, within politeness; wrong keys, an unknown host, URLs outside
the pinged host and a flood are refused with the protocol's codes (indexnow.org/
documentation: 403, 403, 422, 429), and none of them costs the site a request beyond its key
file, read at most once per host: the site's own request log says so.

Run with two fetch processes, where the parent serves /indexnow (what the default, one
process per CPU, does on any machine with more than one), and with one, where the daemon
serves it: not with the default itself, which on a large CI machine would start dozens."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import asyncpg
import pytest
from aiohttp import web
from daemon import daemon_env, start_daemon, stop_daemon
from invariants import assert_every_url_scheduled, assert_polite
from loopback import ManyAddressServer

from crawler.db import frontier

pytestmark = pytest.mark.timeout(240)

DELAY = 2.0  # the politeness delay: the pinged page waits it after the key file
KEY_A = "a1b2c3d4-e5f6-a7b8-c9d0-e1f2a3b4c5d6"
KEY_B = "bbbbbbbb-0000-1111-2222-333333333333"
KEY_C = "cccccccc-0000-1111-2222-333333333333"
ADDRESSES = {"a": "127.0.0.81", "b": "127.0.0.82", "c": "127.0.0.83", "d": "127.0.0.84"}
BURST = 5
PAGE = "<html><head><title>{path}</title></head><body><p>words about {path}</p></body></html>"


class Site(ManyAddressServer):
    """Four hosts at one port: A, B and C each serve their key file, D is not in the
    collection. Every request is logged as (origin, arrival, path)."""

    def __init__(self) -> None:
        super().__init__(list(ADDRESSES.values()))
        self.log: list[tuple[str, float, str]] = []
        self.keys = {ADDRESSES["a"]: KEY_A, ADDRESSES["b"]: KEY_B, ADDRESSES["c"]: KEY_C}

    def origin(self, name: str) -> str:
        return f"http://{ADDRESSES[name]}:{self.port}"

    def requests(self, name: str, since: int = 0) -> list[str]:
        origin = self.origin(name)
        return [path for o, _, path in self.log[since:] if o == origin]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        address = request.host.rsplit(":", 1)[0]
        self.log.append((f"http://{request.host}", time.monotonic(), request.path_qs))
        if request.path == "/robots.txt":
            return web.Response(text="User-agent: *\nAllow: /\n")
        key = self.keys.get(address)
        if key is not None and request.path == f"/{key}.txt":
            return web.Response(text=key + "\n")
        if request.path in ("/page", "/new"):
            return web.Response(text=PAGE.format(path=request.path), content_type="text/html")
        return web.Response(status=404, text="not found")


async def wait_for(check: Callable[[], Any], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        await asyncio.sleep(0.1)


async def metrics_port(proc: asyncio.subprocess.Process, seen: list[str]) -> int:
    assert proc.stdout is not None
    while True:
        line = (await asyncio.wait_for(proc.stdout.readline(), 90)).decode()
        assert line, "the daemon exited:\n" + "".join(seen)
        seen.append(line)
        match = re.search(r"metrics at http://[\d.]+:(\d+)/metrics", line)
        if match:
            return int(match.group(1))


async def drain(proc: asyncio.subprocess.Process, seen: list[str]) -> None:
    assert proc.stdout is not None
    async for line in proc.stdout:
        seen.append(line.decode())


def counters(exposition: str, name: str) -> dict[str, float]:
    found = {}
    for line in exposition.splitlines():
        match = re.fullmatch(name + r'\{\w+="(\w+)"\} (\S+)', line)
        if match:
            found[match.group(1)] = float(match.group(2))
    return found


@pytest.mark.parametrize("processes", ["2", "1"])
async def test_pings_make_pages_due_and_refusals_cost_no_fetch(
    db_url: str, processes: str
) -> None:
    site = Site()
    await site.start()
    env = daemon_env(
        db_url, processes=processes, schedule="uniform", default_interval="86400",
        politeness_delay=str(DELAY), poll_interval="0.2", indexnow_burst=str(BURST),
        indexnow_pings_per_minute="6", exclude="/private", log_stats_interval="0",
    )
    pool = await asyncpg.create_pool(db_url)
    proc = None
    seen: list[str] = []
    reader = None
    try:
        await frontier.seed(pool, [(site.origin(n) + "/page", 1.0) for n in "abc"], time.time())
        proc = await start_daemon(env)
        port = await metrics_port(proc, seen)
        reader = asyncio.create_task(drain(proc, seen))
        endpoint = f"http://127.0.0.1:{port}/indexnow"

        # Idle: each page fetched once, a day away, every host given back.
        async def idle() -> bool:
            return bool(await pool.fetchval(
                "SELECT (SELECT count(*) FROM observations) >= 3 AND (SELECT bool_and("
                "lease_owner IS NULL) FROM hosts) AND (SELECT bool_and(next_fetch_at > now() "
                "+ interval '23 hours') FROM urls)"))

        await wait_for(idle, 60, "the first crawl")
        mark = len(site.log)
        assert site.requests("d") == []

        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:

            async def get(**params: str) -> aiohttp.ClientResponse:
                async with http.get(endpoint, params=params) as response:
                    await response.read()
                    return response

            async def post(body: dict[str, Any]) -> aiohttp.ClientResponse:
                async with http.post(endpoint, data=json.dumps(body),
                                     headers={"Content-Type": "application/json"}) as response:
                    await response.read()
                    return response

            # A valid key: the key file is read, then the page fetched within seconds, after
            # the politeness delay that the key file's request started.
            page_a = site.origin("a") + "/page"
            pinged = time.monotonic()
            response = await get(url=page_a, key=KEY_A)
            assert response.status == 200, await response.text()
            await wait_for(lambda: site.requests("a", mark).count("/page") == 1, 30,
                           "the pinged page fetched")
            fetched_at = next(at for o, at, p in site.log[mark:]
                              if o == site.origin("a") and p == "/page")
            assert fetched_at - pinged < DELAY + 5.0, fetched_at - pinged
            assert site.requests("a", mark) == [f"/{KEY_A}.txt", "/page"]
            hint = await pool.fetchval(
                "SELECT count(*) FROM url_hints h JOIN urls u ON u.id = h.url_id "
                "AND u.host_id = h.host_id WHERE u.url = $1 AND h.source = 'indexnow'", page_a)
            assert hint == 1

            # A new URL of the host (POST, the key now cached): seeded and fetched; one the
            # URL patterns exclude is not taken. No second key file request.
            new_a = site.origin("a") + "/new"
            response = await post({"host": f"{ADDRESSES['a']}:{site.port}", "key": KEY_A,
                                   "urlList": [new_a, site.origin("a") + "/private/x"]})
            assert response.status == 200, await response.text()
            await wait_for(lambda: "/new" in site.requests("a", mark), 30, "the new URL fetched")
            assert await pool.fetchval("SELECT count(*) FROM urls WHERE url = $1", new_a) == 1
            assert await pool.fetchval(
                "SELECT count(*) FROM urls WHERE url LIKE '%/private%'") == 0

            # URLs outside the pinged host, or outside the key file's folder: 422.
            response = await post({"host": f"{ADDRESSES['a']}:{site.port}", "key": KEY_A,
                                   "urlList": [site.origin("b") + "/page"]})
            assert response.status == 422
            response = await get(url=page_a, key=KEY_A,
                                 keyLocation=site.origin("a") + f"/keys/{KEY_A}.txt")
            assert response.status == 422
            # Malformed: 400; a key off the protocol's schema: 422.
            assert (await get(url=page_a)).status == 400
            assert (await get(url=page_a, key="short")).status == 422

            # Wrong keys: 403; the host's key file is read once, for the first of them.
            page_b = site.origin("b") + "/page"
            assert (await get(url=page_b, key="wrong-key-number-1")).status == 403
            assert (await get(url=page_b, key="wrong-key-number-2")).status == 403
            assert (await get(url=page_b, key="wrong-key-number-1")).status == 403

            # A host the collection does not hold: 403, before any request to it.
            response = await get(url=site.origin("d") + "/page", key=KEY_A)
            assert response.status == 403, await response.text()

            # A flood of wrong-key pings: 403 while the host's bucket lasts, then 429 with
            # Retry-After; one key file request in all.
            page_c = site.origin("c") + "/page"
            statuses, retry = [], []
            for _ in range(20):
                response = await get(url=page_c, key="flooding-wrong-key")
                statuses.append(response.status)
                retry.append(response.headers.get("Retry-After"))
            assert statuses == [403] * BURST + [429] * (20 - BURST), statuses
            assert all(r is not None and int(r) >= 1 for r in retry[BURST:]), retry

            async with http.get(f"http://127.0.0.1:{port}/metrics") as response:
                exposition = await response.text()

        # Nothing more comes of the refusals: a few polls' and a politeness delay's time.
        await asyncio.sleep(2 * DELAY)
        assert site.requests("a", mark) == [f"/{KEY_A}.txt", "/page", "/new"]
        assert site.requests("b", mark) == ["/wrong-key-number-1.txt"]
        assert site.requests("c", mark) == ["/flooding-wrong-key.txt"]
        assert site.requests("d") == []

        pings = counters(exposition, "crawler_indexnow_pings_total")
        assert pings == {
            "accepted": 2, "pending": 0, "invalid": 1, "wrong_key": 3 + BURST,
            "unknown_host": 1, "outside_host": 2, "bad_key": 1, "rate_limited": 20 - BURST,
            "unavailable": 0,
        }, pings
        keys = counters(exposition, "crawler_indexnow_key_fetches_total")
        assert keys == {"valid": 1, "invalid": 2, "failed": 0}, keys
    finally:
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        out = await stop_daemon(proc) if proc is not None else ""
        await pool.close()
        await site.stop()
    log = "".join(seen) + out
    assert proc.returncode == 0, log[-3000:]
    assert_polite([(origin, at) for origin, at, _ in site.log], DELAY)
    await assert_every_url_scheduled(db_url)
