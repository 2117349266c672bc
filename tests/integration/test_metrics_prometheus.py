"""A real Prometheus (Debian's ``prometheus``) scrapes a real daemon crawling the demo web.

Prometheus runs on loopback with a temporary data directory and a 1 s scrape interval; the
test asks its HTTP API whether the crawler's series arrived and move as pages are fetched, and
``promtool check metrics`` lints the daemon's own /metrics output.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import signal
import socket
import time
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from daemon import daemon_env, start_daemon
from toolcheck import require_tool

from crawler.db import frontier
from crawler.demo.processes import PoissonProcess
from crawler.demo.sites import PageSpec, SiteSpec
from crawler.demo.web import DemoWeb

pytestmark = pytest.mark.timeout(150)

FETCHES = "sum(crawler_fetches_total)"
FRESHNESS = "crawler_collection_freshness_ratio"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def demo_sites() -> list[SiteSpec]:
    return [
        SiteSpec(name, tuple(
            PageSpec(f"/p{k}", real=PoissonProcess(rate_per_second=0.2), seed=f"{name}{k}")
            for k in range(4)
        ))
        for name in ("a", "b")
    ]


def prometheus_config(metrics_port: int) -> str:
    return (
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: crawler\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{metrics_port}']\n"
    )


async def start_scraped_daemon(db_url: str, metrics_port: int) -> asyncio.subprocess.Process:
    # The planner reports the collection's freshness each time it solves.
    return await start_daemon(daemon_env(
        db_url, default_interval="0.7", min_interval="0.5", politeness_delay="0.05",
        poll_interval="0.1", planner_interval="1", metrics_host="127.0.0.1",
        metrics_port=str(metrics_port),
    ))


async def stop(proc: asyncio.subprocess.Process) -> bytes:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
    except TimeoutError:
        proc.kill()
        out, _ = await proc.communicate()
    return out or b""


async def wait_until_ok(
    http: aiohttp.ClientSession, url: str, seconds: float, proc: asyncio.subprocess.Process
) -> None:
    deadline = time.monotonic() + seconds
    while True:
        assert proc.returncode is None, f"{url}: the process exited with {proc.returncode}"
        with contextlib.suppress(aiohttp.ClientError):
            async with http.get(url) as response:
                if response.status == 200:
                    return
        assert time.monotonic() < deadline, f"{url} not ready after {seconds}s"
        await asyncio.sleep(0.2)


class PrometheusAPI:
    def __init__(self, http: aiohttp.ClientSession, base: str) -> None:
        self.http = http
        self.base = base

    async def get(self, path: str, **params: str) -> Any:
        async with self.http.get(self.base + path, params=params) as response:
            body = await response.json()
        assert body["status"] == "success", body
        return body["data"]

    async def instant(self, query: str) -> list[float]:
        data = await self.get("/api/v1/query", query=query)
        return [float(sample["value"][1]) for sample in data["result"]]

    async def series(self, query: str, start: float, end: float) -> list[float]:
        data = await self.get("/api/v1/query_range", query=query, start=str(start),
                              end=str(end), step="1")
        (result,) = data["result"]
        return [float(value) for _, value in result["values"]]


async def test_prometheus_scrapes_fetches_and_freshness(db_url: str, tmp_path: Path) -> None:
    prometheus = require_tool("prometheus", "prometheus")
    promtool = require_tool("promtool", "prometheus")
    metrics_port, prometheus_port = free_port(), free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(prometheus_config(metrics_port))

    web = DemoWeb(demo_sites(), host_base=40)
    await web.start()
    pool = await asyncpg.create_pool(db_url)
    await frontier.seed(pool, [(u, 1.0) for u in web.urls()], time.time())
    await pool.close()

    started = time.time()
    daemon = await start_scraped_daemon(db_url, metrics_port)
    prom = await asyncio.create_subprocess_exec(
        prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
        f"--web.listen-address=127.0.0.1:{prometheus_port}",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    daemon_output = prom_output = b""
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            await wait_until_ok(http, f"http://127.0.0.1:{metrics_port}/readyz", 30, daemon)
            await wait_until_ok(http, f"http://127.0.0.1:{prometheus_port}/-/ready", 30, prom)
            api = PrometheusAPI(http, f"http://127.0.0.1:{prometheus_port}")

            # The fetch counter arrives ...
            deadline = time.monotonic() + 30
            first: list[float] = []
            while not first or first[0] <= 0:
                assert time.monotonic() < deadline, "crawler_fetches_total never arrived"
                await asyncio.sleep(0.5)
                first = await api.instant(FETCHES)
            # ... and moves as pages are fetched.
            deadline = time.monotonic() + 30
            later = first
            while later[0] < first[0] + 10:
                assert time.monotonic() < deadline, (first, later)
                await asyncio.sleep(1.0)
                later = await api.instant(FETCHES)
            await asyncio.sleep(4.0)  # a few more scrapes for the range queries below
            assert await api.instant('up{job="crawler"}') == [1.0]
            now = time.time()
            fetches = await api.series(FETCHES, started, now)
            assert all(b >= a for a, b in itertools.pairwise(fetches)), fetches
            assert len(set(fetches)) >= 3, fetches

            # What Prometheus has never exceeds what the daemon has counted since.
            async with http.get(f"http://127.0.0.1:{metrics_port}/metrics") as response:
                exposition = await response.text()
            counted = sum(
                float(line.rsplit(" ", 1)[1]) for line in exposition.splitlines()
                if line.startswith("crawler_fetches_total{")
            )
            assert fetches[-1] <= counted

            # promtool lints the live exposition (now with labelled series): no problems at all.
            lint = await asyncio.create_subprocess_exec(
                promtool, "check", "metrics", stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            )
            lint_out, _ = await lint.communicate(exposition.encode())
            assert lint.returncode == 0 and not lint_out.strip(), lint_out.decode()

            # The freshness gauge arrives (NaN until the planner has estimated the collection;
            # the planner's own process takes a few seconds to start).
            assert len(await api.instant(FRESHNESS)) == 1
            deadline = time.monotonic() + 60
            freshness: list[float] = []
            while len(set(freshness)) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(1.0)
                freshness = [v for v in await api.series(FRESHNESS, started, time.time())
                             if not math.isnan(v)]
            assert freshness, "the planner never reported the collection's freshness"
            assert all(0.0 <= v <= 1.0 for v in freshness), freshness
            assert len(set(freshness)) >= 2, f"freshness did not move: {freshness}"
    finally:
        daemon_output = await stop(daemon)
        prom_output = await stop(prom)
        await web.stop()
        # Shown by pytest only when the test fails.
        print("daemon:", daemon_output.decode()[-3000:])
        print("prometheus:", prom_output.decode()[-2000:])
    assert daemon.returncode == 0, daemon_output.decode()[-3000:]
    assert prom.returncode == 0, prom_output.decode()[-3000:]
