"""Many daemons (issue 13): four `crawler run` processes on one database against 200 loopback
hosts. The server sees at most one request in flight per host and no gap below the politeness
delay, the fleet solves at most one planner round per planner interval, and one daemon samples
the gauges for all."""

from __future__ import annotations

import asyncio
import itertools
import math
import re
import time
from collections import defaultdict

import asyncpg
import pytest
from aiohttp import web
from daemon import daemon_env, start_daemon, stop_daemon
from loopback import ManyAddressServer

from crawler.daemon.run import SAMPLE_INTERVAL_SECONDS
from crawler.db import frontier

pytestmark = pytest.mark.timeout(120)

DAEMONS = 4
HOSTS = 200
URLS_PER_HOST = 3
DELAY = 0.2
PLANNER_INTERVAL = 1.0
ROUNDS = "SELECT value FROM planner_state WHERE key = 'round'"


class SpanServer(ManyAddressServer):
    """One port on many loopback addresses; logs each request's (start, end) per host."""

    def __init__(self, addresses: list[str]) -> None:
        super().__init__(addresses)
        self.spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self.in_flight: dict[str, int] = defaultdict(int)
        self.max_in_flight: dict[str, int] = defaultdict(int)

    async def handle(self, request: web.Request) -> web.Response:
        host = request.host
        start = time.time()
        self.in_flight[host] += 1
        self.max_in_flight[host] = max(self.max_in_flight[host], self.in_flight[host])
        await asyncio.sleep(0.01)
        self.in_flight[host] -= 1
        self.spans[host].append((start, time.time()))
        if request.path == "/robots.txt":
            return web.Response(text="User-agent: *\nAllow: /\n")
        return web.Response(text=f"<html><body><p>{request.path} words</p></body></html>",
                            content_type="text/html")


async def test_four_daemons_share_200_hosts_politely_with_one_planner(db_url: str) -> None:
    addresses = [f"127.0.0.{i}" for i in range(2, 2 + HOSTS)]
    server = SpanServer(addresses)
    await server.start()
    urls = [(f"http://{a}:{server.port}/p{i}", 1.0)
            for a in addresses for i in range(URLS_PER_HOST)]
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=2)
    procs: list[asyncio.subprocess.Process] = []
    outputs: list[str] = []
    try:
        await frontier.seed(pool, urls, time.time() - 1)
        env = daemon_env(
            db_url, concurrency="16", claim_batch_hosts="8", claim_urls_per_host="3",
            politeness_delay=str(DELAY), poll_interval="0.1", default_interval="3600",
            planner_interval=str(PLANNER_INTERVAL), planner_sample_urls="100",
        )
        started = time.monotonic()
        procs = [await start_daemon(env) for _ in range(DAEMONS)]
        deadline = started + 90.0  # generous: a loaded machine is slower, not wrong
        fetched, rounds = 0, None
        while time.monotonic() < deadline and all(p.returncode is None for p in procs):
            fetched = await pool.fetchval("SELECT count(*) FROM urls WHERE fetch_count > 0")
            rounds = await pool.fetchval(ROUNDS)
            if fetched == len(urls) and rounds is not None:
                break
            await asyncio.sleep(0.1)
        crawl_seconds = time.monotonic() - started
        # Then the fleet's four planners run side by side for a few intervals.
        first_rounds, window_started = rounds or 0, time.monotonic()
        while time.monotonic() - window_started < 3 * PLANNER_INTERVAL:
            await asyncio.sleep(0.1)
        rounds = await pool.fetchval(ROUNDS)
        window = time.monotonic() - window_started
        fetchers = await pool.fetchval("SELECT count(*) FROM daemons")
        samples = await pool.fetchval("SELECT value FROM planner_state WHERE key = 'sampler'")
        running = time.monotonic() - started
    finally:
        outputs = list(await asyncio.gather(*(stop_daemon(p) for p in procs)))
        await pool.close()
        await server.stop()

    assert fetched == len(urls), (crawl_seconds, outputs)
    assert fetchers == DAEMONS, fetchers
    recorded = [int(m) for out in outputs for m in re.findall(r"(\d+) fetches recorded", out)]
    assert len(recorded) == DAEMONS and min(recorded) > 0, outputs  # all four took part
    assert len(server.max_in_flight) == HOSTS
    assert set(server.max_in_flight.values()) == {1}
    for host, spans in server.spans.items():
        spans.sort()
        assert len(spans) >= URLS_PER_HOST + 1  # robots.txt, then each page
        gaps = [b_start - a_end for (_, a_end), (b_start, _) in itertools.pairwise(spans)]
        assert min(gaps) >= DELAY - 0.01, (host, min(gaps))
    # One planner per fleet: a round is claimed only when none started in the last 0.8 of an
    # interval, so at most elapsed / (0.8 interval) + 1 rounds; four planners solving on
    # their own would do about four per interval.
    # One gauge sampler per fleet: a daemon samples only when no one has for 0.8 of the 30 s
    # sampling interval (four samplers would have sampled four times as they started).
    assert samples is not None
    assert samples <= math.floor(running / (0.8 * SAMPLE_INTERVAL_SECONDS)) + 1, (samples, running)
    solved = (rounds or 0) - first_rounds
    assert solved >= 1, outputs
    assert solved <= math.floor(window / (0.8 * PLANNER_INTERVAL)) + 1, (solved, window)
