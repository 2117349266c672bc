"""Keep-alive within a host lease against a connection per request, on the same loopback
servers in the same run: pages per second and CPU per page (client and servers share this
process), over http and over https (where a kept connection also saves a TLS handshake).

Run: .venv/bin/python bench/bench_keep_alive.py [--pages 400] [--hosts 4]

Each "lease" fetches ``pages / hosts`` URLs of one host in turn, as the worker does, with no
politeness delay; the hosts' leases run concurrently. Printed: pages/s and CPU ms per page
for each mode, and the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ssl
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from tls import TestCA, serve, server_context

from crawler.core.model import UrlRecord
from crawler.net.fetch import fetch
from crawler.net.session import host_session, new_session
from crawler.net.ssrf import AddressPolicy
from crawler.settings import default_settings

LIMITS = default_settings(total_timeout=30.0)


async def crawl(session: aiohttp.ClientSession, origins: list[str], per_host: int) -> float:
    """Pages per second fetching ``per_host`` pages of every origin, one lease per origin."""

    async def lease(origin: str) -> None:
        async with host_session(session) as lease_session:
            for n in range(per_host):
                result = await fetch(lease_session, UrlRecord(url_id=n, url=f"{origin}/p{n}"),
                                     LIMITS)
                assert result.outcome == "ok", result

    started = time.perf_counter()
    await asyncio.gather(*(lease(origin) for origin in origins))
    return len(origins) * per_host / (time.perf_counter() - started)


async def measure(origins: list[str], per_host: int, ca_file: Path) -> dict[str, float]:
    figures: dict[str, float] = {}
    for mode, keep in (("connection per request", False), ("keep-alive per lease", True)):
        session = new_session("bench/1.0", address_policy=AddressPolicy(["127.0.0.0/8"]),
                              lease_keep_alive=keep, ca_bundle=ca_file)
        try:
            await crawl(session, origins, min(per_host, 10))  # warm-up
            cpu = time.process_time()
            rate = await crawl(session, origins, per_host)
            cpu_ms = (time.process_time() - cpu) * 1000 / (len(origins) * per_host)
        finally:
            await session.close()
        figures[mode] = rate
        figures[mode + " cpu"] = cpu_ms
    return figures


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=400)
    parser.add_argument("--hosts", type=int, default=4)
    args = parser.parse_args()
    per_host = args.pages // args.hosts
    ca = TestCA()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        ca_file = ca.write(directory / "ca.pem")
        context = server_context(*ca.issue([f"127.0.0.{i + 2}" for i in range(args.hosts)]),
                                 directory)
        for scheme in ("http", "https"):
            tls = context if scheme == "https" else None
            async with servers(args.hosts, tls) as origins:
                figures = await measure(origins, per_host, ca_file)
            base, kept = figures["connection per request"], figures["keep-alive per lease"]
            print(f"== {scheme}, {args.hosts} hosts x {per_host} pages")
            print(f"{'mode':<24} {'pages/s':>9} {'CPU ms/page':>19}")
            for mode in ("connection per request", "keep-alive per lease"):
                print(f"{mode:<24} {figures[mode]:>9.0f} {figures[mode + ' cpu']:>19.2f}")
            saved = figures["connection per request cpu"] / figures["keep-alive per lease cpu"]
            print(f"ratio keep-alive / per request: {kept / base:.2f}x pages/s, "
                  f"{saved:.2f}x less CPU per page")


@contextlib.asynccontextmanager
async def servers(hosts: int, context: ssl.SSLContext | None) -> AsyncIterator[list[str]]:
    """One server per loopback address 127.0.0.2..; yields their origins."""
    async with contextlib.AsyncExitStack() as exits:
        yield [
            await exits.enter_async_context(serve(context, f"127.0.0.{i + 2}"))
            for i in range(hosts)
        ]


if __name__ == "__main__":
    asyncio.run(main())
