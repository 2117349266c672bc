"""A paused host is no backlog: its due URLs are counted apart, not in "due now", "most
overdue" or the gauges the CrawlerOverdueBacklogGrowing alert reads (QA: pausing a host made
the backlog look ever larger and older, since its URLs fall due and are never fetched).

The figures are read from hosts.next_due_at (the earliest next_fetch_at of each host's URLs)
through a partial index of the hosts not paused, so a paused host's backlog, however large,
is never walked: checked with EXPLAIN (ANALYZE, BUFFERS) on a frontier whose oldest 50,000
URLs belong to paused hosts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest

from crawler.db import estimates
from crawler.db.queries import QUERIES
from crawler.status import LISTED, collect_status

pytestmark = pytest.mark.timeout(180)

READY_HOSTS = 10_000  # one URL each, an hour overdue
PAUSED_HOSTS = 10  # 5,000 URLs each, two days overdue
PAUSED_URLS = 5_000


async def build_frontier(conn: asyncpg.Connection) -> None:
    """Hosts not paused, each with one URL an hour overdue and one due tomorrow; paused hosts
    whose every URL is two days overdue (sorting ahead of all the others); one host paused
    with nothing due."""
    await conn.execute(
        """
        INSERT INTO hosts (id, origin, next_due_at, paused)
        SELECT crawler_host_id('http://r' || i || '.example'), 'http://r' || i || '.example',
               now() - interval '1 hour', false
        FROM generate_series(1, $1::int) AS i
        UNION ALL
        SELECT crawler_host_id('http://p' || i || '.example'), 'http://p' || i || '.example',
               now() - interval '2 days', true
        FROM generate_series(1, $2::int) AS i
        UNION ALL
        SELECT crawler_host_id('http://later.example'), 'http://later.example',
               now() + interval '1 day', true
        """,
        READY_HOSTS, PAUSED_HOSTS,
    )
    await conn.execute(
        """
        INSERT INTO urls (url, host_id, next_fetch_at)
        SELECT origin || '/now', id, next_due_at FROM hosts WHERE NOT paused
        UNION ALL
        SELECT origin || '/tomorrow', id, now() + interval '1 day' FROM hosts WHERE NOT paused
        UNION ALL
        SELECT h.origin || '/' || n, h.id, h.next_due_at
        FROM hosts AS h CROSS JOIN generate_series(1, $1::int) AS n WHERE h.paused
        """,
        PAUSED_URLS,
    )
    await conn.execute("VACUUM ANALYZE hosts")
    await conn.execute("VACUUM ANALYZE urls")


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from nodes(child)


async def explain(conn: asyncpg.Connection, query: str, *args: object) -> dict[str, Any]:
    raw = await conn.fetchval("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query, *args)
    return dict((json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"])


def rows_read(plan: dict[str, Any]) -> int:
    """Index entries and heap rows the plan read, filtered away or not."""
    return sum(
        (n.get("Actual Rows", 0) + n.get("Rows Removed by Filter", 0)
         + n.get("Rows Removed by Index Recheck", 0)) * n.get("Actual Loops", 1)
        for n in nodes(plan) if "Relation Name" in n or "Index Name" in n
    )


@pytest.fixture
async def conn(db_url: str) -> Any:
    connection = await asyncpg.connect(db_url)
    try:
        await build_frontier(connection)
        yield connection
    finally:
        await connection.close()


# One frontier per test (3 s to build): each test checks several figures on it.


async def test_paused_hosts_are_no_backlog_in_the_gauges_or_status(
    conn: asyncpg.Connection, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    exact = await estimates.frontier_figures(conn, 3)
    assert not exact.estimated
    assert exact.due_now == READY_HOSTS
    assert exact.due_paused == PAUSED_HOSTS * PAUSED_URLS
    assert 3600 <= exact.most_overdue_seconds < 2 * 3600  # an hour, not two days
    # Stored for the fleet and read back as every daemon publishes them.
    assert estimates.FrontierFigures.from_state(exact.as_state()) == exact

    status = await collect_status(db_url)
    assert status["due_now"] == READY_HOSTS
    assert status["due_paused"] == PAUSED_HOSTS * PAUSED_URLS
    assert 3600 <= status["most_overdue_seconds"] < 2 * 3600
    listed = status["most_overdue"]
    # One page of the ranking (the default limit), every one on a ready host, none paused.
    assert len(listed) == LISTED and all(u["url"].startswith("http://r") for u in listed), listed
    assert all(3600 <= u["overdue_seconds"] < 2 * 3600 for u in listed), listed

    monkeypatch.setattr(estimates, "EXACT_BELOW_ROWS", 1_000)
    estimated = await estimates.frontier_figures(conn, 3)
    assert estimated.estimated
    assert estimated.due_now == pytest.approx(READY_HOSTS, rel=0.2)
    assert estimated.due_paused == PAUSED_HOSTS * PAUSED_URLS  # counted: under the cap
    assert 3600 <= estimated.most_overdue_seconds < 2 * 3600


async def test_the_figures_never_walk_a_paused_backlog(conn: asyncpg.Connection) -> None:
    host = await conn.fetchval(QUERIES["most_overdue_hosts"], 1)
    for query, args, most in [
        ("most_overdue_seconds", (), 2),  # the first entry of the index of hosts not paused
        ("most_overdue_hosts", (5,), 10),
        ("host_most_overdue_urls", (host, 5), 10),
        ("paused_host_ids", (), 2 * (PAUSED_HOSTS + 1)),
    ]:
        plan = await explain(conn, QUERIES[query], *args)
        assert "Seq Scan" not in json.dumps(plan), (query, json.dumps(plan, indent=1))
        assert rows_read(plan) <= most, (query, json.dumps(plan, indent=1))

    # Paused hosts' due URLs: theirs only, by the (host_id, next_fetch_at) index, up to a cap.
    paused = [r["id"] for r in await conn.fetch(QUERIES["paused_host_ids"])]
    plan = await explain(conn, QUERIES["urls_due_paused"], paused, 1_000_000)
    assert "urls_host_next_fetch_idx" in json.dumps(plan), json.dumps(plan, indent=1)
    assert rows_read(plan) <= 2 * PAUSED_HOSTS * PAUSED_URLS, json.dumps(plan, indent=1)
    assert await conn.fetchval(QUERIES["urls_due_paused"], paused, 1_000) == 1_000

    # Control, what the measure tells apart: the oldest due URL by the URLs' own index,
    # skipping paused hosts, reads the whole paused backlog first.
    control = await explain(
        conn, "SELECT min(next_fetch_at) FROM urls AS u WHERE next_fetch_at <= now() "
              "AND NOT EXISTS (SELECT 1 FROM hosts AS h WHERE h.id = u.host_id AND h.paused)")
    assert rows_read(control) > PAUSED_HOSTS * PAUSED_URLS, json.dumps(control, indent=1)
