"""Two daemons, many hosts: the server side sees one request at a time per host, spaced."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import defaultdict

import asyncpg
import pytest
from aiohttp import web
from loopback import ManyAddressServer

from crawler.daemon.worker import Worker
from crawler.db import frontier
from crawler.net.fetch import new_session
from crawler.net.ssrf import AddressPolicy
from crawler.settings import Settings

pytestmark = pytest.mark.timeout(180)


class NullEvents:
    def fetch_completed(self, obs: object) -> None: ...
    def frontier_sampled(self, *args: object) -> None: ...
    def db_transaction(self, seconds: float) -> None: ...
    def stage_completed(self, stage: str, seconds: float) -> None: ...
    def politeness_wait(self, seconds: float) -> None: ...
    def lease_rejected(self, write: str) -> None: ...


class RecordingServer(ManyAddressServer):
    """Serves small pages on several loopback addresses and logs each request's span."""

    def __init__(self, addresses: list[str], handle_seconds: float = 0.03) -> None:
        super().__init__(addresses)
        self.handle_seconds = handle_seconds
        self.spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self.in_flight: dict[str, int] = defaultdict(int)
        self.max_in_flight: dict[str, int] = defaultdict(int)
        self.paths: dict[str, list[str]] = defaultdict(list)

    async def handle(self, request: web.Request) -> web.Response:
        host = request.host
        start = time.time()
        self.in_flight[host] += 1
        self.max_in_flight[host] = max(self.max_in_flight[host], self.in_flight[host])
        await asyncio.sleep(self.handle_seconds)
        self.in_flight[host] -= 1
        self.spans[host].append((start, time.time()))
        self.paths[host].append(request.path)
        return web.Response(text=f"<html><body><p>{request.path} words here</p></body></html>",
                            content_type="text/html")

    def pages_served(self) -> int:
        return sum(p != "/robots.txt" for paths in self.paths.values() for p in paths)


async def test_two_daemons_never_overlap_on_a_host(db_url: str) -> None:
    """Issue 4's scenario: two daemons, 200 URLs on each of 20 loopback hosts."""
    delay = 0.05
    addresses = [f"127.0.0.{i}" for i in range(2, 22)]
    server = RecordingServer(addresses, handle_seconds=0.005)
    await server.start()
    per_host = 200
    urls = [(f"http://{a}:{server.port}/p{i}", 1.0) for a in addresses for i in range(per_host)]
    pools = [await asyncpg.create_pool(db_url, min_size=1, max_size=4) for _ in range(2)]
    await frontier.seed(pools[0], urls, time.time() - 1)
    workers = []
    sessions = []
    for n, pool in enumerate(pools):
        session = new_session("test-crawler", address_policy=AddressPolicy(["127.0.0.0/8"]))
        sessions.append(session)
        settings = Settings(
            concurrency=8, claim_batch_hosts=4, claim_urls_per_host=25, lease_seconds=30.0,
            poll_interval=0.05, politeness_delay=delay, total_timeout=5.0,
            default_interval=3600.0,
        )
        workers.append(Worker(settings, f"daemon-{n}", pool, session, NullEvents()))
    tasks = [asyncio.create_task(w.run()) for w in workers]
    try:
        deadline = time.time() + 240  # generous: a loaded machine is slower, not wrong
        while server.pages_served() < len(urls) and time.time() < deadline:
            await asyncio.sleep(0.1)
    finally:
        for w in workers:
            w.stop()
        await asyncio.gather(*tasks)
        await asyncio.gather(*(t for w in workers for t in w.host_tasks), return_exceptions=True)
        for s in sessions:
            await s.close()
        for p in pools:
            await p.close()
        await server.stop()

    assert server.pages_served() == len(urls)
    # Every host was asked for robots.txt first (and it counts as a request below).
    assert all(paths[0] == "/robots.txt" for paths in server.paths.values())
    assert all(w.fetches_recorded > 0 for w in workers), "both daemons should take part"
    assert len(server.max_in_flight) == len(addresses)
    assert set(server.max_in_flight.values()) == {1}
    for host, spans in server.spans.items():
        spans.sort()
        gaps = [b_start - a_end for (_, a_end), (b_start, _) in itertools.pairwise(spans)]
        assert min(gaps) >= delay - 0.01, (host, min(gaps))
