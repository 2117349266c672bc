"""The planner runs beside fetching without slowing it: the real daemon's fetch rate during a
planner round that takes seconds stays at least 80% of its rate without one.

The rate without a round is measured in the same run, just before the round and just after it,
each window as long as the round (at least 10 s); the slower of the two is the rate it is held
to (see ``RoundRates.ratio``). Each window's rate is the median of its one-second rates, so
that a neighbour's burst of load for a few seconds of a window (the suite's other tests run
beside this one) does not decide it; a planner that slows fetching does so for most of its
round. ``bench/bench_planner.py --beside-fetching N`` repeats this scenario N times and prints
every run's figures.
"""

from __future__ import annotations

import asyncio
import socket
import statistics
import time
from dataclasses import dataclass

import asyncpg
import pytest
from aiohttp import web
from daemon import daemon_env, start_daemon, stop_daemon

from crawler.db import frontier

pytestmark = pytest.mark.timeout(400)

SERVING_HOSTS = 40
PAGES_PER_HOST = 100
# The planner's population: fetched URLs on paused hosts (never fetched).
IDLE_HOSTS = 50
IDLE_PER_HOST = 600  # a round of about ten seconds on an idle machine
# The rate without a round is measured before the round and after it, each for as long as the
# round lasted, within these bounds.
MIN_COMPARE_SECONDS = 10.0
MAX_COMPARE_SECONDS = 60.0


async def serve(hosts: int) -> tuple[web.AppRunner, list[int]]:
    """Small pages on ``hosts`` loopback ports (each port its own origin: its own host)."""

    async def page(request: web.Request) -> web.Response:
        if request.path == "/robots.txt":
            return web.Response(status=404)
        return web.Response(text=f"<html><body>{request.path}</body></html>",
                            content_type="text/html")

    app = web.Application()
    app.router.add_get("/{tail:.*}", page)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    ports = []
    for _ in range(hosts):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        ports.append(sock.getsockname()[1])
        await web.SockSite(runner, sock).start()
    return runner, ports


async def fetch_rate(pool: asyncpg.Pool, start: float, end: float) -> float:
    """The median of the fetch rates of the whole seconds from ``start`` to ``end`` (a second
    with no fetch counts as 0)."""
    seconds = max(1, int(end - start))
    counts = dict(await pool.fetch(
        "SELECT floor(extract(epoch FROM fetched_at) - $1)::int, count(*) FROM observations "
        "WHERE fetched_at >= to_timestamp($1) AND fetched_at < to_timestamp($1 + $2) "
        "GROUP BY 1", start, float(seconds),
    ))
    return float(statistics.median(counts.get(k, 0) for k in range(seconds)))


async def wait_for(pool: asyncpg.Pool, query: str, deadline_seconds: float) -> object:
    deadline = time.monotonic() + deadline_seconds
    while time.monotonic() < deadline:
        value = await pool.fetchval(query)
        if value is not None:
            return value
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {query}")


async def block_rounds(pool: asyncpg.Pool) -> None:
    """No planner round starts until ``allow_round``."""
    await pool.execute("INSERT INTO planner_state (key, value, updated_at) "
                       "VALUES ('round', 0, now() + interval '1 hour') ON CONFLICT (key) DO "
                       "UPDATE SET updated_at = EXCLUDED.updated_at")


async def allow_round(pool: asyncpg.Pool) -> None:
    await pool.execute(
        "UPDATE planner_state SET updated_at = now() - interval '1 hour' WHERE key = 'round'"
    )


@dataclass(frozen=True)
class RoundRates:
    """Fetches per second (medians of one-second rates) before, during and after one planner
    round, in one run."""

    before: float
    during: float
    after: float
    round_seconds: float
    rescheduled: int
    rounds: int
    output: str

    @property
    def ratio(self) -> float:
        """The rate during the round against the rate without one: the slower of the windows
        just before and just after it, each as long as the round. Both are rates without a
        round, and the machine's load drifts over a run (in CI the suite's other tests end
        around it: one run measured 473/s before, 479 during, 776 after, the mean reading
        77%). A planner that slows fetching makes the round slower than both sides; a load
        that falls after it only speeds up one side."""
        return self.during / min(self.before, self.after)


async def measure_round(db_url: str) -> RoundRates:
    """The real daemon fetching from loopback servers; one planner round over a population
    of paused hosts; the fetch rate around it and during it."""
    runner, ports = await serve(SERVING_HOSTS)
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=4)
    proc = None
    try:
        serving = [(f"http://127.0.0.1:{p}/p{i}", 1.0) for p in ports
                   for i in range(PAGES_PER_HOST)]
        idle = [(f"http://127.0.0.{2 + h % 200}:{1000 + h}/q{i}", 1.0)
                for h in range(IDLE_HOSTS) for i in range(IDLE_PER_HOST)]
        await frontier.seed(pool, serving + idle, time.time())
        await pool.execute(
            """UPDATE urls SET state = 'active', importance = 1e-6,
                      last_fetched_at = now() - interval '1 hour',
                      next_fetch_at = now() + interval '10 days', fetch_rate_per_day = 1.0,
                      change_rate_per_day = 0.5, intervals_observed = 4, unchanged_days = 3.0,
                      changed_intervals_days = '{0.5, 1.0}'
               WHERE url LIKE 'http://127.0.0.1:%' IS NOT TRUE"""
        )
        # Paused: whatever the round makes of their URLs, these hosts are never fetched, so
        # the rate after the round is comparable with the rate before it.
        await pool.execute("UPDATE hosts SET paused = origin NOT LIKE 'http://127.0.0.1:%', "
                           "next_due_at = (SELECT min(next_fetch_at) FROM urls "
                           "WHERE host_id = hosts.id)")
        await block_rounds(pool)
        # The serving pages never change, so the planner's μ would send them to the longest
        # interval and fetching would stop: an interval of at most 2 s keeps all 4,000 due,
        # so the daemon fetches as fast as it can before, during and after the round.
        env = daemon_env(
            db_url, schedule="optimal", planner_interval="3", budget_per_day="1e9",
            default_interval="1", min_interval="0.5", max_interval="2", politeness_delay="0",
            poll_interval="0.05", concurrency="32", claim_urls_per_host="8",
        )
        proc = await start_daemon(env)
        await wait_for(pool, "SELECT 1 FROM observations OFFSET 500 LIMIT 1", 120.0)
        warm = time.time()
        await asyncio.sleep(MIN_COMPARE_SECONDS)
        await allow_round(pool)
        await wait_for(
            pool, "SELECT 1 FROM planner_state WHERE key = 'round_seconds'", 240.0
        )
        await block_rounds(pool)  # the rate after the round is measured without one
        round_end, round_seconds = await pool.fetchrow(
            "SELECT extract(epoch FROM updated_at)::float8, value FROM planner_state "
            "WHERE key = 'round_seconds'"
        )
        round_start = round_end - round_seconds
        # As long before the round as the warm-up allows (the machine's load drifts on the
        # scale of the round), and as long after it.
        compare = min(max(round_seconds, MIN_COMPARE_SECONDS), MAX_COMPARE_SECONDS)
        before_start = max(warm, round_start - compare)
        after_end = round_end + (round_start - before_start)
        await asyncio.sleep(max(0.0, after_end - time.time()))
        before = await fetch_rate(pool, before_start, round_start)
        during = await fetch_rate(pool, round_start, round_end)
        after = await fetch_rate(pool, round_end, after_end)
        rounds = await pool.fetchval("SELECT value FROM planner_state WHERE key = 'round'")
        out = await stop_daemon(proc)
        rescheduled = await pool.fetchval(
            "SELECT count(*) FROM urls WHERE fetch_rate_per_day <> 1.0 AND importance < 1e-3"
        )
    finally:
        if proc is not None and proc.returncode is None:
            await stop_daemon(proc)
        await pool.close()
        await runner.cleanup()
    return RoundRates(before, during, after, round_seconds, rescheduled, rounds, out)


async def test_fetch_rate_holds_during_a_planner_round(db_url: str) -> None:
    m = await measure_round(db_url)
    out = m.output[-3000:]
    print(f"fetch rate {m.before:.0f}/s before, {m.during:.0f}/s during a "
          f"{m.round_seconds:.1f} s round that rescheduled {m.rescheduled} URLs, "
          f"{m.after:.0f}/s after: {m.ratio:.0%} of the rate without a round")
    assert m.rounds == 1, out  # exactly the round measured
    assert m.round_seconds >= 1.0, out  # a round that spans hundreds of fetches
    assert m.rescheduled > 0.5 * IDLE_HOSTS * IDLE_PER_HOST
    assert "deadlock" not in m.output, out
    assert m.after > 0.25 * m.before, out  # fetching goes on after the round
    assert m.ratio >= 0.8, (m.before, m.during, m.after, out)
