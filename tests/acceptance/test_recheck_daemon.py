"""`crawler recheck` against a running, idle daemon (issue 33): the URL, scheduled a day away,
is fetched within seconds, never sooner than the host's politeness delay after the previous
request to it (as the server itself saw the requests), and its schedule resumes after that
fetch."""

from __future__ import annotations

import asyncio
import itertools
import sys
import time

import asyncpg
import pytest
from daemon import daemon_env, start_daemon, stop_daemon
from hostile import HostileServer

from crawler.db import frontier

pytestmark = pytest.mark.timeout(180)

DELAY = 4.0  # politeness delay: longer than a `crawler recheck` takes to start and run
INTERVAL = 86400.0


async def wait_until(pool: asyncpg.Pool, query: str, *args: object,
                     seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if await pool.fetchval(query, *args):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"not within {seconds} s: {query}")


async def recheck(env: dict[str, str], *args: str) -> tuple[int, str]:
    """`crawler recheck`, run without blocking this loop (the test server lives in it)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawler", "recheck", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_recheck_fetches_a_url_now_within_politeness(db_url: str) -> None:
    server = HostileServer("127.0.0.61")
    await server.start()
    url = server.url("/page")
    env = daemon_env(db_url, schedule="uniform", default_interval=str(INTERVAL),
                     politeness_delay=str(DELAY), poll_interval="0.2")
    pool = await asyncpg.create_pool(db_url)
    proc = None
    try:
        await frontier.seed(pool, [(url, 1.0)], time.time())
        proc = await start_daemon(env)
        fetched = "SELECT count(*) >= $1 FROM observations"
        await wait_until(pool, fetched, 1)
        # Idle: the one URL is a day away, and the host given back.
        await wait_until(pool, "SELECT lease_owner IS NULL FROM hosts")
        assert await pool.fetchval(
            "SELECT next_fetch_at > now() + interval '23 hours' FROM urls")

        code, out = await recheck(env, url)
        rechecked = time.monotonic()
        assert code == 0, out
        assert out.strip() == ("made 1 URL due now (0 unknown); each is fetched once its "
                               "host's politeness delay allows")
        await wait_until(pool, fetched, 2, seconds=30)
        assert proc.returncode is None, "the daemon died"
        row = await pool.fetchrow(
            "SELECT date_part('epoch', next_fetch_at) AS next, "
            "date_part('epoch', last_fetched_at) AS last FROM urls")
    finally:
        out = await stop_daemon(proc) if proc is not None else ""
        await pool.close()
        await server.stop()

    assert proc.returncode == 0, out[-3000:]
    # The server's own log: robots.txt, the first fetch, the rechecked one.
    assert [target for _, target in server.requests] == ["/robots.txt", "/page", "/page"]
    times = [at for at, _ in server.requests]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert min(gaps) >= DELAY - 0.01, gaps
    # The recheck came while the host still had to wait: politeness, not the recheck, timed
    # the fetch.
    assert rechecked - times[1] < DELAY, (times, rechecked)
    # Within seconds of the recheck: what politeness still asked for, and a poll.
    assert times[2] - rechecked < DELAY + 3.0, (times, rechecked)
    # The schedule resumes after that fetch: the uniform interval from it.
    assert row["next"] - row["last"] == pytest.approx(INTERVAL, abs=1.0)
