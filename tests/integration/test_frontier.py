"""The frontier against a real PostgreSQL: claims, leases, indexes, schema."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import sys
import time

import asyncpg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.ext.asyncio import create_async_engine

from crawler.db import frontier, partitions, queries
from crawler.db.connect import sqlalchemy_url
from crawler.db.migrate import upgrade
from crawler.db.schema import metadata

# Each test with the plain statements and with the Citus variants (conftest.statements).
pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("statements")]


def urls_for(hosts: int, per_host: int) -> list[tuple[str, float]]:
    return [(f"http://127.0.0.{h + 2}:8000/p{i}", 1.0) for h in range(hosts)
            for i in range(per_host)]


async def test_seed_is_idempotent(db_url: str) -> None:
    pool = await asyncpg.create_pool(db_url)
    try:
        first = await frontier.seed(pool, urls_for(3, 5), time.time())
        again = await frontier.seed(pool, urls_for(3, 5), time.time())
        assert (first.inserted, first.already_known) == (15, 0)
        assert (again.inserted, again.already_known) == (0, 15)
        assert await pool.fetchval("SELECT count(*) FROM hosts") == 3
    finally:
        await pool.close()


async def test_concurrent_claimers_never_share_a_url(db_url: str) -> None:
    pool = await asyncpg.create_pool(db_url, min_size=4, max_size=8)
    try:
        await frontier.seed(pool, urls_for(40, 10), time.time() - 1)

        async def claimer(owner: str) -> list[tuple[int, int, str]]:
            got: list[tuple[int, int, str]] = []
            for _ in range(10):
                for host in await frontier.claim(pool, owner, max_hosts=3, urls_per_host=4,
                                                 lease_seconds=60):
                    got += [(u.url_id, host.host_id, owner) for u in host.urls]
            return got

        results = await asyncio.gather(*(claimer(f"owner-{i}") for i in range(4)))
        claimed = [u for r in results for u in r]
        assert len(claimed) == len({u for u, _, _ in claimed}), "a URL handed to two claimers"
        assert len(claimed) > 100
        # A URL is covered by its host's lease: every URL claimed of a host went to the owner
        # that holds the host.
        holders = {r["id"]: r["lease_owner"] for r in await pool.fetch(
            "SELECT id, lease_owner FROM hosts WHERE lease_expires_at > now()")}
        assert all(holders[host] == owner for _, host, owner in claimed), "a host shared"
    finally:
        await pool.close()


async def test_expired_lease_is_claimed_again(db_url: str) -> None:
    pool = await asyncpg.create_pool(db_url)
    try:
        await frontier.seed(pool, urls_for(1, 3), time.time() - 1)
        first = await frontier.claim(pool, "crashed", max_hosts=5, urls_per_host=10,
                                     lease_seconds=0.5)
        assert len(first[0].urls) == 3
        assert await frontier.claim(pool, "other", max_hosts=5, urls_per_host=10,
                                    lease_seconds=60) == []
        await asyncio.sleep(0.7)  # the crashed owner never releases; its lease expires
        second = await frontier.claim(pool, "other", max_hosts=5, urls_per_host=10,
                                      lease_seconds=60)
        assert sorted(u.url_id for u in second[0].urls) == sorted(u.url_id for u in first[0].urls)
    finally:
        await pool.close()


class ClaimsBetweenStatements:
    """A seeding connection after whose first statement a running daemon claims and releases
    whatever is ready, on a connection of its own (what a worker polling every 50 ms did in
    CI between _seed_small's two statements)."""

    def __init__(self, conn: asyncpg.Connection, pool: asyncpg.Pool) -> None:
        self._conn, self._pool = conn, pool
        self.claimed_between = -1

    def __getattr__(self, name: str) -> object:
        return getattr(self._conn, name)

    async def fetch(self, query: str, *args: object) -> list[asyncpg.Record]:
        rows: list[asyncpg.Record] = await self._conn.fetch(query, *args)
        if self.claimed_between < 0:
            claims = await frontier.claim(self._pool, "daemon", max_hosts=10, urls_per_host=10,
                                          lease_seconds=60)
            for claim in claims:  # no due URL yet: given back, as the worker does
                assert await frontier.release_host(self._pool, claim.lease)
            self.claimed_between = len(claims)
        return rows


async def test_a_claim_between_a_small_seeds_statements_strands_no_host(db_url: str) -> None:
    """A small seed (a redirect target, a window root, a few URLs from the CLI) beside a running
    daemon: its host and URLs appear together, so the host is never claimed without its URLs
    and released with no due time (which left the URLs due and never fetched)."""
    pool = await asyncpg.create_pool(db_url)
    try:
        async with pool.acquire() as conn:
            seeding = ClaimsBetweenStatements(conn, pool)
            await frontier.seed(seeding, urls_for(2, 3), time.time() - 1)  # type: ignore[arg-type]
        assert seeding.claimed_between == 0  # the new hosts were not visible yet
        claims = await frontier.claim(pool, "daemon", max_hosts=10, urls_per_host=10,
                                      lease_seconds=60)
        assert sorted(len(c.urls) for c in claims) == [3, 3]
    finally:
        await pool.close()


async def test_release_owner_frees_everything(db_url: str) -> None:
    pool = await asyncpg.create_pool(db_url)
    try:
        await frontier.seed(pool, urls_for(4, 3), time.time() - 1)
        await frontier.claim(pool, "me", max_hosts=10, urls_per_host=10, lease_seconds=60)
        assert await frontier.release_owner(pool, "me") == 4
        assert await pool.fetchval("SELECT count(*) FROM hosts WHERE lease_owner IS NOT NULL") == 0
    finally:
        await pool.close()


async def test_a_claim_sends_each_hosts_robots_txt_once(db_url: str) -> None:
    """A robots.txt may be 500 KiB: the claim sends it on the host's first row, not on every
    due URL's (a 30 KB body made a claim of 64 hosts x 16 URLs take 63 ms instead of 24),
    and every claimed host still gets its own rules."""
    pool = await asyncpg.create_pool(db_url)
    try:
        # Seeded together: a host's due URLs tie on next_fetch_at.
        await frontier.seed(pool, urls_for(4, 6), time.time() - 1)
        await pool.execute(
            "UPDATE hosts SET robots_body = 'User-agent: *' || chr(10) || 'Disallow: /' || id,"
            " robots_status = 200, robots_fetched_at = now(), robots_good_at = now(),"
            " robots_expires_at = now() + interval '1 day'"
        )
        bodies = {r["id"]: r["robots_body"]
                  for r in await pool.fetch("SELECT id, robots_body FROM hosts")}
        rows = await queries.fetch(pool, "claim_due_work", 10, "raw", 5, 60.0)
        assert len(rows) == 4 * 5
        first_rows = {}
        for row in rows:
            first_rows.setdefault(row["host_id"], row)
        for row in rows:
            expected = bodies[row["host_id"]] if row is first_rows[row["host_id"]] else None
            assert row["robots_body"] == expected, row["host_id"]
        await frontier.release_owner(pool, "raw")

        claims = await frontier.claim(pool, "me", max_hosts=10, urls_per_host=5,
                                      lease_seconds=60)
        assert {c.host_id: c.robots.body if c.robots else None for c in claims} == bodies
        assert all(len(c.urls) == 5 for c in claims)
    finally:
        await pool.close()


async def test_politeness_delay_blocks_claim(db_url: str) -> None:
    pool = await asyncpg.create_pool(db_url)
    try:
        await frontier.seed(pool, urls_for(1, 2), time.time() - 1)
        await pool.execute("UPDATE hosts SET next_request_at = now() + interval '1 hour'")
        assert await frontier.claim(pool, "me", max_hosts=5, urls_per_host=5,
                                    lease_seconds=60) == []
    finally:
        await pool.close()


NOW = dt.datetime.now(dt.UTC)
EXPLAINED = {
    "claim_due_work": [4, "me", 4, 60.0],
    "release_owner": ["me"],
    "release_hosts": [[1], ["me"], [1]],
    "recorded_fetches": [[1], [7], [NOW]],
    "earliest_due": [],
    "refresh_host_due": [[1, 2]],
    "store_robots": ['{"id": 1}', "me", 1, True],
    "set_host_backoff": [1, NOW, "me", 1],
    "note_host_error": [1, "tls_expired", NOW, "me", 1],
    "set_host_refused": [1, "refused", "me", 1],
    "reschedule_urls": [[1, 2], [NOW, NOW], [1.0, 2.0], [NOW, NOW], [1.0, 2.0], [7, 7]],
    "reschedule_scan": [0, 100],
    "reschedule_records": [[1, 2], [7, 7]],
    "planner_sample": [[1, 50], [50, 100], 5],
    "most_overdue_hosts": [5],
    "host_most_overdue_urls": [1, 5],
    "most_overdue_seconds": [],
    "paused_host_ids": [],
    "urls_due_paused": [[1, 2], 1000],
    "out_links": [1, 7],
    "site_graph": [1, 7],
    "site_members": [1, 7],
    "site_patterns": [1],
    "set_site_patterns": [1, ["^http://h1"], ["draft"]],
    "set_host_paused": ["http://h1.example", True],
    "hosts_paused": [10],
    "set_url_region": [["http://h1.example/p1"], "main", None],
    "set_site_region": ["http://h1.example/", "main", None],
    "url_region": ["http://h1.example/p1"],
    "url_row": ["http://h1.example/p1"],
    "list_urls": ["http://h1.example", None, 0, 100],
    "set_importance": [["http://h1.example/1"], [2.0]],
    "remove_urls": [["http://h1.example/1"]],
    "remove_observations": [[1, 2], [3, 3]],
    "lock_host": ["http://h1.example"],
    "remove_host_urls": [3],
    "seed_known_due": [["http://h1.example/1"], [3], NOW],
    "recheck_urls": [["http://h1.example/1"]],
    "host_id_of": ["http://h1.example"],
    "recheck_host_urls": [3],
    "host_parked_urls": [3],
    "recheck_linked_gone": [[1, 2], 3, NOW],
}


@pytest.mark.parametrize("query", sorted(EXPLAINED))
@pytest.mark.breaks_invariant(
    "hosts_due", reason="it spreads the URLs' next fetch times at random by hand (hosts not "
    "moved) to see the query plans")
async def test_frontier_queries_use_indexes(db_url: str, query: str, statements: str) -> None:
    conn = await asyncpg.connect(db_url)
    try:
        await frontier.seed(conn, urls_for(100, 50), time.time() - 1)
        # A frontier in its steady state: most URLs scheduled in the future, some due.
        await conn.execute(
            "UPDATE urls SET next_fetch_at = now() + (random() * 2 - 0.2) * interval '1 day'"
        )
        await conn.execute("ANALYZE")
        # On a table this small a sequential scan is cheapest; forbid it to see what the
        # planner would use at scale.
        await conn.execute("SET enable_seqscan = off")
        args = EXPLAINED[query]
        async with conn.transaction():
            rows = await conn.fetch("EXPLAIN " + queries.statements(conn)[query], *args)
            plan = "\n".join(r[0] for r in rows)
            await conn.execute("ROLLBACK; BEGIN")
        assert "Seq Scan" not in plan, plan
        if query == "claim_due_work":
            assert "hosts_ready_at_idx" in plan, plan
            if statements == "citus":  # the URLs are read inside the function, by host
                assert "crawler_due_urls" in plan, plan
            else:
                assert "urls_host_next_fetch_idx" in plan, plan
    finally:
        await conn.close()


async def test_migrations_from_empty_match_table_definitions(empty_db_url: str) -> None:
    await upgrade(empty_db_url)
    await upgrade(empty_db_url)  # a second run is harmless
    engine = create_async_engine(sqlalchemy_url(empty_db_url))
    try:
        async with engine.connect() as conn:
            diff = await conn.run_sync(
                lambda c: compare_metadata(
                    MigrationContext.configure(c, opts={
                        "compare_server_default": True,
                        # Monthly partitions are tables of their own to reflection.
                        "include_name": lambda name, kind, _: not (
                            kind == "table" and partitions.is_partition(name or "")
                        ),
                    }),
                    metadata,
                )
            )
    finally:
        await engine.dispose()
    assert diff == []


async def test_upgrades_from_concurrent_processes_are_safe(empty_db_url: str) -> None:
    env = {**os.environ, "CRAWLER_DATABASE_URL": empty_db_url}
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-m", "crawler", "db", "upgrade", env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(3)
    ]
    outputs = [await p.communicate() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outputs
    conn = await asyncpg.connect(empty_db_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM alembic_version") == 1
    finally:
        await conn.close()

