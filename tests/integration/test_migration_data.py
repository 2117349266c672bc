"""Migrating a database that holds data: 0001 to the latest revision keeps every URL, its
schedule, every observation and the collection's rows (issue 13, "Migration"); 0008 turns the
per-fetch tables into monthly partitions, and its downgrade turns them back; 0010 re-keys hosts
by the hash of their origin and gives every host-owned row its host_id, and its downgrade gives
hosts sequence keys again."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import asyncpg
import pytest
from alembic import command

from crawler.core.hostid import host_id, url_host_id
from crawler.db.migrate import alembic_config, upgrade
from crawler.db.queries import QUERIES

pytestmark = pytest.mark.timeout(90)

PER_FETCH = ("observations", "stored_records", "change_events")


def utc(*parts: int) -> dt.datetime:
    return dt.datetime(*parts, tzinfo=dt.UTC)  # type: ignore[misc]


FETCHES = [utc(1999, 5, 3), utc(2024, 1, 31, 23, 59), utc(2024, 2, 1), utc(2024, 2, 29, 12)]


async def snapshot(
    conn: asyncpg.Connection, table: str, order: str = "id"
) -> list[dict[str, Any]]:
    return [dict(r) for r in await conn.fetch(f"SELECT * FROM {table} ORDER BY {order}")]


# Columns a later revision drops: URL leases (0012_host_leases; a host's lease covers its URLs).
DROPPED = {"lease_owner", "lease_expires_at"}


def same_columns(
    before: list[dict[str, Any]], after: list[dict[str, Any]], *, rekeyed: str = "",
    dropped: frozenset[str] = frozenset(),
) -> bool:
    """Rows equal on the columns they had before (later revisions may add columns), but for
    ``rekeyed``, the host key 0010_citus changes (checked apart), and ``dropped``."""
    skip = {rekeyed, *dropped}
    return len(before) == len(after) and all(
        {k: a[k] for k in b if k not in skip} == {k: v for k, v in b.items() if k not in skip}
        for b, a in zip(before, after, strict=True)
    )


async def hosts_keyed_by_origin(conn: asyncpg.Connection) -> None:
    """Every host's key is its origin's hash (0010_citus), and every host-owned row carries
    its URL's host."""
    for h in await conn.fetch("SELECT id, origin FROM hosts"):
        assert h["id"] == host_id(h["origin"]), dict(h)
    for u in await conn.fetch("SELECT url, host_id FROM urls"):
        assert u["host_id"] == url_host_id(u["url"]), dict(u)
    for table in (*PER_FETCH, "links"):
        column = "from_url_id" if table == "links" else "url_id"
        assert await conn.fetchval(
            f"SELECT count(*) FROM {table} AS t JOIN urls AS u "
            f"ON u.id = t.{column} AND u.host_id = t.host_id"
        ) == await conn.fetchval(f"SELECT count(*) FROM {table}"), table


async def fill_at_0001(conn: asyncpg.Connection) -> None:
    await conn.execute(
        "INSERT INTO hosts (origin, next_due_at) VALUES "
        "('http://a.example', '2024-03-01Z'), ('http://b.example', NULL)"
    )
    await conn.execute(
        "INSERT INTO urls (url, host_id, state, importance, next_fetch_at, last_fetched_at, "
        "fetch_count, change_count, changed_intervals_days, unchanged_days, "
        "change_rate_per_day) "
        "SELECT 'http://' || h || '.example/p' || i, (SELECT id FROM hosts WHERE origin = "
        "'http://' || h || '.example'), 'active', i, "
        "'2024-03-01Z'::timestamptz + i * interval '1 hour', '2024-02-29Z', 4, i, "
        "ARRAY[1.5, i]::float8[], 2.5 * i, 0.1 * i "
        "FROM unnest(ARRAY['a', 'b']) AS h, generate_series(1, 3) AS i"
    )
    # A page's links, within its host (a window follows no other).
    await conn.execute(
        "INSERT INTO links (from_url_id, to_url_id, position) "
        "SELECT f.id, t.id, row_number() OVER () FROM urls f, urls t "
        "WHERE f.host_id = t.host_id AND f.id <> t.id"
    )
    await conn.execute(
        "INSERT INTO observations (url_id, fetched_at, outcome, status, bytes, "
        "duration_seconds, simhash, changed) "
        "SELECT u.id, f, 'ok', 200, 1000 + u.id, 0.25, u.id * 7919, u.id % 2 = 0 "
        "FROM urls u, unnest($1::timestamptz[]) AS f", FETCHES,
    )


async def fill_collection(conn: asyncpg.Connection) -> None:
    await conn.execute(
        "INSERT INTO stored_records (url_id, fetched_at, record_type, status, warc_file, "
        "warc_offset, warc_length, record_id, payload_digest, payload_bytes) "
        "SELECT url_id, fetched_at, 'response', 200, 'x.warc.gz', id * 100, 100, "
        "'<urn:uuid:' || id || '>', 'sha1:AAA', 10 FROM observations"
    )
    await conn.execute(
        "INSERT INTO change_events (url_id, fetched_at, kind, payload, delivered_at) "
        "SELECT url_id, fetched_at, 'changed', jsonb_build_object('n', id), "
        "CASE WHEN id % 3 = 0 THEN NULL ELSE '2024-03-01Z'::timestamptz END "
        "FROM observations WHERE changed"
    )


async def test_0001_to_latest_keeps_every_url_schedule_and_observation(
    empty_db_url: str,
) -> None:
    await upgrade(empty_db_url, "0001")
    conn = await asyncpg.connect(empty_db_url)
    try:
        await fill_at_0001(conn)
        urls_0001 = await snapshot(conn, "urls")
        hosts_0001 = await snapshot(conn, "hosts", "origin")
        links_0001 = await snapshot(conn, "links", "from_url_id, to_url_id")
    finally:
        await conn.close()

    await upgrade(empty_db_url, "0007_watch")
    conn = await asyncpg.connect(empty_db_url)
    try:
        await fill_collection(conn)
        before = {t: await snapshot(conn, t) for t in PER_FETCH}
        assert [len(before[t]) for t in PER_FETCH] == [24, 24, 12]
    finally:
        await conn.close()

    await upgrade(empty_db_url)  # the latest revision
    conn = await asyncpg.connect(empty_db_url)
    try:
        # Schedules included; host keys are now the origins' hashes.
        urls_now = await snapshot(conn, "urls")
        assert same_columns(urls_0001, urls_now, rekeyed="host_id", dropped=frozenset(DROPPED))
        assert not DROPPED & set(urls_now[0])
        assert same_columns(hosts_0001, await snapshot(conn, "hosts", "origin"), rekeyed="id")
        assert same_columns(links_0001, await snapshot(conn, "links", "from_url_id, to_url_id"))
        assert len(links_0001) == 12
        await hosts_keyed_by_origin(conn)
        for table in PER_FETCH:
            assert same_columns(before[table], await snapshot(conn, table)), table
            assert await conn.fetchval(
                "SELECT relkind::text FROM pg_class WHERE relname = $1", table
            ) == "p"
            # Each row is in its month's partition; the DEFAULT one is empty.
            assert await conn.fetchval(f"SELECT count(*) FROM {table}_default") == 0
            for month, rows in (("199905", 1), ("202401", 1), ("202402", 2)):
                expected = rows * len(before[table]) // len(FETCHES)
                assert await conn.fetchval(
                    f"SELECT count(*) FROM {table}_p{month}"
                ) == expected, (table, month)
        # 0017: a record's URI is only in its WARC file; the rows stored before have none.
        assert [r["target_uri"] for r in await snapshot(conn, "stored_records")] == [None] * 24
        # New rows continue the same id sequence, and the other foreign keys still cascade.
        url_id = urls_0001[0]["id"]
        new_id = await conn.fetchval(
            "INSERT INTO observations (url_id, fetched_at, outcome, duration_seconds, host_id) "
            "VALUES ($1, now(), 'ok', 0.1, $2) RETURNING id", url_id,
            url_host_id(urls_0001[0]["url"]),
        )
        assert new_id > max(o["id"] for o in before["observations"])
        await conn.execute("DELETE FROM urls WHERE id = $1", url_id)
        # Observations have no foreign key since 0023: `crawler remove` deletes them itself.
        assert await conn.fetchval(
            "SELECT count(*) FROM observations WHERE url_id = $1", url_id
        ) > 0
        await conn.execute(QUERIES["remove_observations"], [url_id],
                           [url_host_id(urls_0001[0]["url"])])
        for table in PER_FETCH:
            assert await conn.fetchval(
                f"SELECT count(*) FROM {table} WHERE url_id = $1", url_id
            ) == 0
        after_delete = {t: await snapshot(conn, t) for t in PER_FETCH}
    finally:
        await conn.close()

    await asyncio.to_thread(command.downgrade, alembic_config(empty_db_url), "0007_watch")
    conn = await asyncpg.connect(empty_db_url)
    try:
        # Sequence keys again, every URL still under its own origin's host.
        assert same_columns(hosts_0001, await snapshot(conn, "hosts", "origin"), rekeyed="id")
        assert await conn.fetchval(
            "SELECT count(*) FROM urls AS u JOIN hosts AS h ON h.id = u.host_id "
            "WHERE u.url LIKE h.origin || '/%'"
        ) == len(urls_0001) - 1
        assert await conn.fetchval("SELECT min(id) FROM hosts") == 1
        for table in PER_FETCH:
            assert same_columns(await snapshot(conn, table), after_delete[table]), table
            assert await conn.fetchval(
                "SELECT relkind::text FROM pg_class WHERE relname = $1", table
            ) == "r"
    finally:
        await conn.close()
