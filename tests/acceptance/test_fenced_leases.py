"""Fenced leases with real daemons: one paused past its lease (SIGSTOP) or killed (SIGKILL)
while holding hosts never writes over the daemon that took its hosts, and nothing is lost.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from collections import defaultdict

import aiohttp
import asyncpg
import pytest
from aiohttp import web
from daemon import daemon_env, start_daemon, stop_daemon
from loopback import ManyAddressServer

from crawler.db import frontier

pytestmark = pytest.mark.timeout(300)

LEASE_SECONDS = 15.0


class SlowHosts(ManyAddressServer):
    """Pages on several loopback addresses, each request slow; logs every request's span and
    the daemon (by User-Agent) that sent it."""

    def __init__(self, addresses: list[str], handle_seconds: float) -> None:
        super().__init__(addresses)
        self.handle_seconds = handle_seconds
        # host -> [(user agent, start, end)]
        self.requests: dict[str, list[tuple[str, float, float]]] = defaultdict(list)
        self.in_flight: dict[str, set[str]] = defaultdict(set)

    async def handle(self, request: web.Request) -> web.Response:
        agent = request.headers.get("User-Agent", "")
        if request.path == "/robots.txt":
            return web.Response(status=404)
        start = time.time()
        self.in_flight[request.host].add(agent)
        try:
            await asyncio.sleep(self.handle_seconds)
        finally:
            self.in_flight[request.host].discard(agent)
            self.requests[request.host].append((agent, start, time.time()))
        return web.Response(text=f"<html><body><p>{request.path} words here</p></body></html>",
                            content_type="text/html")

    def served(self, agent_prefix: str) -> int:
        return sum(a.startswith(agent_prefix) for spans in self.requests.values()
                   for a, _, _ in spans)

    def in_flight_for(self, agent_prefix: str) -> int:
        return sum(any(a.startswith(agent_prefix) for a in agents)
                   for agents in self.in_flight.values())

    def urls(self, per_host: int) -> list[str]:
        return [f"http://{a}:{self.port}/p{i}" for a in self.addresses for i in range(per_host)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def env_for(db_url: str, name: str, port: int, **extra: str) -> dict[str, str]:
    return daemon_env(
        db_url, schedule="uniform", default_interval="3600", lease_seconds=str(LEASE_SECONDS),
        total_timeout="3", connect_timeout="1", first_byte_timeout="3",
        politeness_delay="0.3", poll_interval="0.1", user_agent=f"{name}-crawler/1.0",
        metrics_port=str(port), **extra,
    )


async def wait_for(condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not await condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def check_records(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    """Every URL's row agrees with its observations: counted once each, never rewound."""
    rows = await pool.fetch(
        """
        SELECT u.url, u.fetch_count, u.last_fetched_at, count(o.id) AS observations,
               max(o.fetched_at) FILTER (WHERE o.outcome IN ('ok', 'not_modified')) AS newest
        FROM urls AS u
        LEFT JOIN observations AS o ON o.url_id = u.id AND o.host_id = u.host_id
        GROUP BY u.id, u.host_id
        """
    )
    for r in rows:
        assert r["fetch_count"] == r["observations"], dict(r)
        assert r["last_fetched_at"] == r["newest"], dict(r)  # the newest fetch is the row
    return rows


async def metric(port: int, name: str) -> float:
    async with aiohttp.ClientSession() as session, session.get(
        f"http://127.0.0.1:{port}/metrics"
    ) as response:
        text = await response.text()
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    )


async def test_a_daemon_paused_past_its_lease_never_writes_over_the_next(db_url: str) -> None:
    server = SlowHosts([f"127.0.0.{i}" for i in range(2, 22)], handle_seconds=0.4)
    await server.start()
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=2)
    port_a, port_b = free_port(), free_port()
    a = b = None
    try:
        await frontier.seed(pool, [(u, 1.0) for u in server.urls(12)], time.time() - 1)
        a = await start_daemon(env_for(db_url, "a", port_a))

        async def a_is_busy() -> bool:
            return server.served("a-") >= 20 and server.in_flight_for("a-") >= 3

        await wait_for(a_is_busy, 90, "daemon a to hold hosts with requests in flight")
        os.kill(a.pid, signal.SIGSTOP)
        stopped_at = time.time()
        b = await start_daemon(env_for(db_url, "b", port_b))

        async def b_took_over() -> bool:
            # b fetched on hosts a held when it stopped, after a's lease ran out.
            return time.time() > stopped_at + LEASE_SECONDS + 8 and any(
                any(x.startswith("b-") and s > stopped_at for x, s, _ in spans)
                and any(x.startswith("a-") and s < stopped_at for x, s, _ in spans)
                for spans in server.requests.values()
            )

        await wait_for(b_took_over, 120, "daemon b to take over a's hosts")
        os.kill(a.pid, signal.SIGCONT)

        async def a_rejected() -> bool:
            return await metric(port_a, "crawler_lease_rejected_writes_total") >= 1

        await wait_for(a_rejected, 30, "daemon a to count its refused writes")

        async def all_fetched() -> bool:
            due = await pool.fetchval("SELECT count(*) FROM urls WHERE fetch_count = 0")
            return bool(due == 0)

        await wait_for(all_fetched, 120, "every URL to be fetched")
        out_b = await stop_daemon(b)
        out_a = await stop_daemon(a)
        assert (a.returncode, b.returncode) == (0, 0), (out_a[-2000:], out_b[-2000:])
        assert "lost" in out_a

        await check_records(pool)
        # One request in flight per host, apart from the ones a had sent when it stopped.
        for host, spans in server.requests.items():
            for i, (agent1, s1, e1) in enumerate(spans):
                for agent2, s2, e2 in spans[i + 1 :]:
                    if s1 < e2 and s2 < e1:  # two requests in flight together
                        early = [agent for agent, start in ((agent1, s1), (agent2, s2))
                                 if agent.startswith("a-") and start < stopped_at]
                        assert early, (host, (agent1, s1, e1), (agent2, s2, e2))
    finally:
        for proc in (a, b):
            if proc is not None and proc.returncode is None:
                os.kill(proc.pid, signal.SIGCONT)
                await stop_daemon(proc)
        await pool.close()
        await server.stop()


async def test_a_killed_daemons_leases_expire_and_another_fetches_everything(
    db_url: str,
) -> None:
    server = SlowHosts([f"127.0.{i // 200}.{i % 200 + 2}" for i in range(300)],
                       handle_seconds=1.0)
    await server.start()
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=2)
    a = b = None
    try:
        await frontier.seed(pool, [(u, 1.0) for u in server.urls(2)], time.time() - 1)
        a = await start_daemon(env_for(
            db_url, "a", free_port(), concurrency="300", claim_batch_hosts="100",
            db_pool_size="20",
        ))

        async def many_leases() -> bool:
            held = await pool.fetchval(
                "SELECT count(*) FROM hosts WHERE lease_owner IS NOT NULL "
                "AND lease_expires_at > now()"
            )
            return bool(held >= 200)

        await wait_for(many_leases, 90, "daemon a to hold hundreds of leases")
        os.kill(a.pid, signal.SIGKILL)
        await a.wait()
        leases = {
            r["origin"].split("://", 1)[1]: r["lease_expires_at"].timestamp()
            for r in await pool.fetch(
                "SELECT origin, lease_expires_at FROM hosts WHERE lease_owner IS NOT NULL"
            )
        }
        assert len(leases) >= 200
        b = await start_daemon(env_for(
            db_url, "b", free_port(), concurrency="300", claim_batch_hosts="100",
            db_pool_size="20",
        ))

        async def all_fetched() -> bool:
            left = await pool.fetchval("SELECT count(*) FROM urls WHERE fetch_count = 0")
            return bool(left == 0)

        await wait_for(all_fetched, 150, "every URL to be fetched after the leases expired")
        out_b = await stop_daemon(b)
        assert b.returncode == 0, out_b[-2000:]
        rows = await check_records(pool)
        assert len(rows) == 600
        # Each URL recorded exactly once: none lost, none duplicated.
        assert {r["observations"] for r in rows} == {1}
        # b waited for a's leases: it sent nothing to a's hosts before they expired.
        for host, expires_at in leases.items():
            starts = [s for x, s, _ in server.requests[host] if x.startswith("b-")]
            assert all(s >= expires_at for s in starts), (host, expires_at, starts)
    finally:
        for proc in (a, b):
            if proc is not None and proc.returncode is None:
                proc.kill()
                await proc.wait()
        await pool.close()
        await server.stop()
