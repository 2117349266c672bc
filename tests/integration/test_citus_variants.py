"""The Citus variants of crawler/db/queries_citus.sql, on plain PostgreSQL (CI has no Citus).

Each variant replaces the plain statement of the same name on a connection to a Citus
database (``crawler.db.queries.statements``), so it must take the same parameters and return
the same columns: both are prepared here and their parameter types and result attributes
compared. Their semantics are checked by the frontier, fencing, recorder, readiness,
planner-lock, seeding and watch tests, which run each test with the variants forced too
(``conftest.statements``); on a real Citus by ``test_citus.py``.
"""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from crawler.db.connect import connect, create_pool
from crawler.db.queries import (
    CITUS_QUERIES,
    CITUS_STATEMENTS,
    PLAIN_QUERIES,
    QUERIES,
    VARIED,
    statements,
)


def test_the_variants_replace_the_statements_the_readme_lists() -> None:
    assert set(CITUS_QUERIES) == {
        "claim_due_work", "record_fetches", "release_hosts", "seed_hosts_from_staging",
        "seed_urls_from_staging", "refresh_host_due", "reschedule_urls", "planner_sample",
        "skip_redundant_checks",
    }  # store_robots, another Citus refused, runs on both as queries.sql has it


@pytest.mark.parametrize("name", sorted(CITUS_QUERIES))
async def test_a_variant_takes_and_returns_what_its_statement_does(
    db_url: str, name: str
) -> None:
    conn = await asyncpg.connect(db_url)
    try:
        if name.startswith("seed_"):  # their staging tables are the session's
            await conn.execute(PLAIN_QUERIES["seed_staging"])
        plain = await conn.prepare(PLAIN_QUERIES[name])
        variant = await conn.prepare(CITUS_QUERIES[name])
        assert [t.name for t in variant.get_parameters()] == [
            t.name for t in plain.get_parameters()]
        assert [(a.name, a.type.name) for a in variant.get_attributes()] == [
            (a.name, a.type.name) for a in plain.get_attributes()]
    finally:
        await conn.close()


async def test_plain_postgresql_keeps_the_plain_statements(db_url: str) -> None:
    pool = await create_pool(db_url)
    try:
        async with pool.acquire() as conn:
            assert statements(conn) is PLAIN_QUERIES
    finally:
        await pool.close()
    conn = await connect(db_url)
    try:
        assert statements(conn) is PLAIN_QUERIES
    finally:
        await conn.close()


def test_a_varied_statement_is_read_only_with_its_connection() -> None:
    """QUERIES never gives a statement Citus runs otherwise: its plain text run on Citus
    would fail there (or, as skip_redundant_checks, do what Citus must not)."""
    assert set(CITUS_QUERIES) == VARIED
    assert not VARIED & set(QUERIES)
    for name in VARIED:
        with pytest.raises(KeyError, match="Citus variant"):
            QUERIES[name]
        assert CITUS_STATEMENTS[name] is CITUS_QUERIES[name]
    assert all(CITUS_STATEMENTS[name] is sql for name, sql in QUERIES.items())


async def test_the_citus_claim_skips_a_host_another_transaction_holds(db_url: str) -> None:
    """As the plain claim's SKIP LOCKED: a host locked elsewhere is passed over at once, and
    claimed once it is free."""
    from crawler.db import frontier
    from crawler.db.queries import force_citus

    force_citus(True)
    pool = await asyncpg.create_pool(db_url, min_size=2, max_size=2)
    try:
        await frontier.seed(pool, [(f"http://127.0.0.{h + 2}:8000/p", 1.0) for h in range(3)],
                            0.0)
        async with pool.acquire() as holder, holder.transaction():
            held = await holder.fetchval("SELECT id FROM hosts ORDER BY ready_at LIMIT 1 "
                                         "FOR UPDATE")
            claims = await asyncio.wait_for(frontier.claim(
                pool, "me", max_hosts=3, urls_per_host=1, lease_seconds=60), 5)
            others = await pool.fetch("SELECT id FROM hosts WHERE id <> $1", held)
            assert {c.host_id for c in claims} == {r["id"] for r in others}
        later = await frontier.claim(pool, "me", max_hosts=3, urls_per_host=1, lease_seconds=60)
        assert [c.host_id for c in later] == [held]
    finally:
        await pool.close()
        force_citus(None)
