"""Change diffs never stall the event loop (issue 34): the real daemon fetches a 500 KB deeply
nested page and a 6,000-row table page that change on every fetch, writes a change event with
its lines and words for each change, and the event-loop lag it reports in /metrics stays under
100 ms throughout. (Diffing both raw bodies on the loop took 7.5 s for such a nested page, and
difflib took 7 s on 6,000 changed rows.)"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import sys
import time
from collections.abc import AsyncIterator

import aiohttp
import asyncpg
import pytest
from aiohttp import web
from daemon import daemon_env, start_daemon, stop_daemon

pytestmark = pytest.mark.timeout(240)

WAIT_SECONDS = 120.0
CHANGES = 5  # change events with a diff wanted per page, after the first
NESTED_BYTES = 500_000
TABLE_ROWS = 6_000
MAX_LAG = 0.1  # a bucket bound of crawler_event_loop_lag_seconds


class ChangingPages:
    """Two pages whose text changes on every request; counts the requests."""

    def __init__(self) -> None:
        self.served = {"/nested": 0, "/table": 0}

    def nested(self, version: int) -> str:
        """About 500 KB of elements each inside the one before (thousands deep), a word of
        every item's text drawn anew for each version."""
        rng = random.Random(version)
        parts: list[str] = []
        size = 0
        while size < NESTED_BYTES:
            n = len(parts)
            word = f"w{rng.randrange(10**6)}"
            part = f"<div class='d{n % 7}'><span>item {n} {word}</span>"
            parts.append(part)
            size += len(part)
        return ("<html><head><title>nested</title></head><body>" + "".join(parts)
                + "</div>" * len(parts) + "</body></html>")

    def table(self, version: int) -> str:
        """A table of 6,000 rows whose every row's figures change with the version."""
        rng = random.Random(version)
        rows = "".join(
            f"<tr><td>row {i}</td><td>{rng.randrange(10**6)}</td>"
            f"<td>{rng.choice(('up', 'down', 'flat'))}</td></tr>\n"
            for i in range(TABLE_ROWS)
        )
        return (f"<html><head><title>table</title></head><body><table>\n{rows}</table>"
                "</body></html>")

    async def handle(self, request: web.Request) -> web.Response:
        if request.path not in self.served:
            return web.Response(status=404)
        self.served[request.path] += 1
        version = self.served[request.path]
        page = self.nested(version) if request.path == "/nested" else self.table(version)
        return web.Response(text=page, content_type="text/html")


@pytest.fixture
async def site() -> AsyncIterator[tuple[ChangingPages, str]]:
    pages = ChangingPages()
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", pages.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    server = web.TCPSite(runner, "127.0.0.1", 0)
    await server.start()
    yield pages, f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


async def seed(env: dict[str, str], *urls: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawler", "seed", *urls, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, out.decode()


async def metrics_port(proc: asyncio.subprocess.Process, seen: list[str]) -> int:
    assert proc.stdout is not None
    while True:
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        assert line, "daemon exited: " + "".join(seen)
        seen.append(line)
        match = re.search(r"metrics at http://[\d.]+:(\d+)/metrics", line)
        if match:
            return int(match.group(1))


async def drain(proc: asyncio.subprocess.Process, seen: list[str]) -> None:
    assert proc.stdout is not None
    async for line in proc.stdout:
        seen.append(line.decode())


def lag_buckets(text: str) -> dict[str, float]:
    """The loop-lag histogram's cumulative buckets by bound, and its count."""
    found = {match[0]: float(match[1]) for match in re.findall(
        r'crawler_event_loop_lag_seconds_bucket\{le="([^"]+)"\} (\S+)', text)}
    count = re.search(r"crawler_event_loop_lag_seconds_count (\S+)", text)
    assert found and count, text[:2000]
    found["count"] = float(count[1])
    return found


async def scrape(http: aiohttp.ClientSession, port: int) -> dict[str, float]:
    async with http.get(f"http://127.0.0.1:{port}/metrics") as response:
        return lag_buckets(await response.text())


async def diffed_events(pool: asyncpg.Pool, url: str) -> list[dict[str, object]]:
    rows = await pool.fetch(
        "SELECT e.payload FROM change_events AS e JOIN urls AS u ON u.id = e.url_id "
        "WHERE u.url = $1 AND e.kind = 'changed' ORDER BY e.fetched_at", url)
    payloads = [json.loads(r["payload"]) if isinstance(r["payload"], str) else dict(r["payload"])
                for r in rows]
    return [p for p in payloads if p.get("words")]


async def test_huge_changing_pages_are_diffed_without_stalling_the_loop(
    db_url: str, site: tuple[ChangingPages, str]
) -> None:
    pages, origin = site
    nested, table = f"{origin}/nested", f"{origin}/table"
    env = daemon_env(db_url, schedule="uniform", default_interval="1", min_interval="1",
                     politeness_delay="0.2", poll_interval="0.1", log_level="INFO")
    await seed(env, nested, table)
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=2)
    proc = await start_daemon(env)
    seen: list[str] = []
    reader: asyncio.Task[None] | None = None
    try:
        port = await metrics_port(proc, seen)
        reader = asyncio.create_task(drain(proc, seen))
        deadline = time.monotonic() + WAIT_SECONDS
        start: dict[str, float] | None = None
        async with aiohttp.ClientSession() as http:
            while True:
                done = [await diffed_events(pool, url) for url in (nested, table)]
                if start is None and all(done):
                    # Counted from the first diff of each on: start-up (imports, the first
                    # claims) is not what this measures.
                    start = await scrape(http, port)
                if start is not None and all(len(events) > CHANGES for events in done):
                    break
                assert proc.returncode is None, "the daemon died: " + "".join(seen)[-3000:]
                assert time.monotonic() < deadline, (pages.served, [len(e) for e in done])
                await asyncio.sleep(0.2)
            end = await scrape(http, port)
        lag = {bound: end[bound] - start[bound] for bound in end}
    finally:
        if reader is not None:  # stop_daemon reads the rest of the output itself
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        out = await stop_daemon(proc)
        await pool.close()
    assert proc.returncode == 0, (out + "".join(seen))[-3000:]
    late = lag["count"] - lag[str(MAX_LAG)]
    print(f"loop lag samples: {lag}")
    assert lag["count"] > 0
    assert late == 0, f"{late:.0f} of {lag['count']:.0f} loop-lag samples over {MAX_LAG} s: {lag}"
    nested_events, table_events = done
    # The diffs were made (bounded, not dropped): the changed words of both pages are shown.
    assert all(e["words"] for e in nested_events)
    assert all(e["removed"] and e["added"] for e in table_events)
