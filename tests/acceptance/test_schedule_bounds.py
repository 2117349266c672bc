"""A watcher's own schedule through the CLI and the real daemon (issue 35): `crawler bound URL
--at-least-every D` is fetched at least that often under a budget that would give it less,
`--at-most-every D` is never fetched more often than that though the plan would, and
`crawler show URL` says which bound is binding."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import time

import asyncpg
import numpy as np
import pytest
from daemon import daemon_env, start_daemon, stop_daemon

from crawler.db import frontier
from crawler.demo.processes import PoissonProcess
from crawler.demo.sites import PageSpec, SiteSpec
from crawler.demo.web import DemoWeb

pytestmark = pytest.mark.timeout(300)

AT_LEAST_EVERY = 4.0  # seconds: the slow page's own longest interval
AT_MOST_EVERY = 10.0  # seconds: the fast page's own shortest interval
# A claim's latency past a due time: the poll, the host's politeness delay and the request.
LATENESS = 2.0


def sites() -> list[SiteSpec]:
    """Site 0: /slow changes about daily (the optimum checks it rarely) and /fast every
    second (the optimum, with budget to spare, checks it as often as it may); the other sites
    take the rest of the budget."""
    pages = [
        SiteSpec("watched", (
            PageSpec("/slow", real=PoissonProcess(rate_per_second=1.0 / 86400.0), seed="slow"),
            PageSpec("/fast", real=PoissonProcess(rate_per_second=1.0), seed="fast"),
        )),
    ]
    intervals = np.geomspace(5.0, 300.0, 12)
    pages += [
        SiteSpec(f"other{s}", tuple(
            PageSpec(f"/p{i}", real=PoissonProcess(rate_per_second=1.0 / intervals[i]),
                     seed=f"o{i}")
            for i in range(s, intervals.size, 4)
        ))
        for s in range(4)
    ]
    return pages


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crawler", *args], env=env,
                          capture_output=True, text=True, timeout=60)


async def intervals_of(pool: asyncpg.Pool, url: str) -> list[float]:
    times = await pool.fetch(
        "SELECT extract(epoch FROM o.fetched_at) AS at FROM observations AS o "
        "JOIN urls AS u ON u.id = o.url_id AND u.host_id = o.host_id "
        "WHERE u.url = $1 ORDER BY o.fetched_at", url,
    )
    at = [float(t["at"]) for t in times]
    return [b - a for a, b in itertools.pairwise(at)]


async def test_own_bounds_hold_under_the_plan(db_url: str) -> None:
    web = DemoWeb(sites())
    await web.start()
    # 1.5 fetches a second for 14 URLs: the daily page's optimum is far longer than 4 s, and
    # the page changing every second would be fetched every 0.5 s (the shortest interval).
    env = daemon_env(
        db_url, budget_per_day=str(1.5 * 86400), min_interval="0.5", max_interval="3600",
        default_interval="10", politeness_delay="0.05", poll_interval="0.05",
        detect_periods="false", planner_interval="3",
    )
    slow, fast = web.origins[0] + "/slow", web.origins[0] + "/fast"
    pool = await asyncpg.create_pool(db_url)
    try:
        await frontier.seed(pool, [(u, 1.0) for u in web.urls()], time.time())
        done = cli(env, "bound", slow, "--at-least-every", f"{AT_LEAST_EVERY:g}s")
        assert done.returncode == 0, done.stderr
        assert "at least every 4s" in done.stdout
        done = cli(env, "bound", fast, "--at-most-every", f"{AT_MOST_EVERY:g}s")
        assert done.returncode == 0, done.stderr
        refused = cli(env, "bound", fast, "--at-least-every", "1m", "--at-most-every", "2m")
        assert refused.returncode == 2 and "contradicts" in refused.stderr, refused.stderr
        proc = await start_daemon(env, "--duration", "30")
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), 120.0)
        finally:
            output = await stop_daemon(proc) if proc.returncode is None else ""
        output = out.decode() + output
        slow_gaps = await intervals_of(pool, slow)
        fast_gaps = await intervals_of(pool, fast)
        plans = await pool.fetchval("SELECT count(*) FROM plans WHERE mu IS NOT NULL")
    finally:
        await pool.close()
        await web.stop()
    assert proc.returncode == 0, output[-3000:]
    assert plans >= 1, output[-3000:]
    # 30 s at least every 4 s: at least 6 fetches, none further apart than the bound allows.
    assert len(slow_gaps) >= 5, (slow_gaps, output[-2000:])
    assert max(slow_gaps) <= AT_LEAST_EVERY + LATENESS, slow_gaps
    # Never more often than every 6 s, though the page changes every second.
    assert len(fast_gaps) >= 2, (fast_gaps, output[-2000:])
    assert min(fast_gaps) >= AT_MOST_EVERY - 0.01, fast_gaps
    shown = cli(env, "show", slow)
    assert shown.returncode == 0, shown.stderr
    assert "binding: at-least-every" in shown.stdout, shown.stdout
    shown = cli(env, "show", fast)
    assert "binding: at-most-every" in shown.stdout, shown.stdout
    listed = cli(env, "bound", "--list")
    assert slow in listed.stdout and fast in listed.stdout, listed.stdout
