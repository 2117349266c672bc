"""The frontier's gauges: exact on a small frontier, PostgreSQL's estimates on a large one,
sampled by one daemon per fleet."""

from __future__ import annotations

import time

import asyncpg
import pytest

from crawler.db import estimates, frontier
from crawler.db.queries import QUERIES

pytestmark = pytest.mark.timeout(120)


async def make_frontier(pool: asyncpg.Pool) -> None:
    urls = [(f"http://h{i // 20}.example/p{i}", 1.0) for i in range(20_000)]
    await frontier.seed(pool, urls, time.time() - 10)
    await pool.execute("UPDATE urls SET state = 'active', next_fetch_at = now() + interval '1 day' "
                       "WHERE id % 4 <> 0")
    await pool.execute("UPDATE urls SET state = 'gone' WHERE id % 10 = 1")
    await pool.execute("UPDATE hosts SET backoff_until = now() + interval '1 hour', "
                       "consecutive_failures = 5 WHERE id IN (SELECT id FROM hosts ORDER BY id "
                       "LIMIT (SELECT count(*) / 5 FROM hosts))")  # host ids are hashes
    await pool.execute("ANALYZE urls")
    await pool.execute("ANALYZE hosts")


async def test_small_frontier_is_counted_exactly(db_url: str) -> None:
    pool = await asyncpg.create_pool(db_url)
    try:
        await make_frontier(pool)
        figures = await estimates.frontier_figures(pool, 3)
        assert not figures.estimated
        exact = {r["state"]: r["n"] for r in await pool.fetch(QUERIES["urls_by_state"])}
        assert figures.urls_by_state == exact
        assert figures.due_now == 5_000
        assert figures.hosts_in_backoff == figures.hosts_circuit_open == 200
    finally:
        await pool.close()


async def test_large_frontier_uses_estimates_close_to_the_counts(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(estimates, "EXACT_BELOW_ROWS", 1_000)
    pool = await asyncpg.create_pool(db_url)
    try:
        await make_frontier(pool)
        figures = await estimates.frontier_figures(pool, 3)
        assert figures.estimated
        exact = {r["state"]: r["n"] for r in await pool.fetch(QUERIES["urls_by_state"])}
        for state, n in exact.items():
            assert figures.urls_by_state[state] == pytest.approx(n, rel=0.2), state
        # States with no URL are estimated at (nearly) none.
        for state in set(figures.urls_by_state) - set(exact):
            assert figures.urls_by_state[state] < 200, (state, figures.urls_by_state)
        assert figures.due_now == pytest.approx(5_000, rel=0.2)
        assert figures.hosts_in_backoff == pytest.approx(200, rel=0.2)
        assert figures.most_overdue_seconds >= 10.0
        # Stored and read back, as every other daemon of the fleet publishes them.
        state = figures.as_state()
        assert estimates.FrontierFigures.from_state(state) == figures
    finally:
        await pool.close()


async def test_one_sampler_per_fleet(db_url: str) -> None:
    pool = await asyncpg.create_pool(db_url)
    try:
        assert await pool.fetchval(QUERIES["fleet_claim"], "sampler", 24.0) is not None
        assert await pool.fetchval(QUERIES["fleet_claim"], "sampler", 24.0) is None
        await pool.execute("UPDATE planner_state SET updated_at = now() - interval '25 s' "
                           "WHERE key = 'sampler'")
        assert await pool.fetchval(QUERIES["fleet_claim"], "sampler", 24.0) is not None
    finally:
        await pool.close()
