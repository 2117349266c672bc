"""Monthly partitions against a real PostgreSQL, with explicit past dates: created ahead,
strays moved out of the DEFAULT partition, whole months dropped past the retention, and the
URLs' estimates and schedules unchanged by the drop (they never read observations)."""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import time

import asyncpg
import pytest
from daemon import daemon_env, start_daemon, stop_daemon

from crawler.core.backoff import HostHealth
from crawler.core.model import FetchResult, Outcome
from crawler.core.partitions import Month
from crawler.core.patterns import global_filter
from crawler.core.schedule import SchedulePolicy
from crawler.core.transition import HostContext, Transition, transition
from crawler.db import frontier, partitions
from crawler.db.queries import CITUS_STATEMENTS, PLAIN_QUERIES, QUERIES
from crawler.settings import Settings

pytestmark = pytest.mark.timeout(60)

SETTINGS = Settings(default_interval=3600.0, schedule="optimal")
URLS = [(f"http://127.0.0.{h + 2}:8000/p{i}", 1.0) for h in range(3) for i in range(2)]
FETCH_MONTHS = [Month(2024, m) for m in range(1, 7)]  # January to June 2024


def at(year: int, month: int, day: int = 1) -> float:
    return dt.datetime(year, month, day, 12, tzinfo=dt.UTC).timestamp()


def page(n: int) -> bytes:
    words = " ".join(f"w{n}x{i}" for i in range(60))
    return f"<html><body><p>{words}</p></body></html>".encode()


def fetched(record, now: float, version: int) -> Transition:  # type: ignore[no-untyped-def]
    result = FetchResult(now, 0.01, Outcome.OK, status=200, content_type="text/html",
                         body=page(version))
    return transition(record, result, HostContext(HostHealth(), 1.0, now),
                      SchedulePolicy(SETTINGS),
                      url_filter=global_filter(SETTINGS.include, SETTINGS.exclude),
                      now=now, rng_value=0.5)


async def fetch_everything(pool: asyncpg.Pool, now: float, version: int) -> int:
    """Claim every URL and record a fetch of it dated ``now`` (in the past)."""
    recorded = 0
    for claim in await frontier.claim(pool, "test", max_hosts=10, urls_per_host=10,
                                      lease_seconds=60):
        for record in claim.urls:
            # Half the pages change every month, half never do.
            t = fetched(record, now, version if record.url_id % 2 else 0)
            recorded += await frontier.record_fetch(pool, t, claim.lease)
        await frontier.release_host(pool, claim.lease)
    return recorded


async def partition_names(pool: asyncpg.Pool, table: str) -> set[str]:
    rows = await pool.fetch(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = $1::regclass", table,
    )
    return {r["relname"] for r in rows}


async def add_collection_rows(pool: asyncpg.Pool) -> None:
    """A stored record and a change event per URL and month; one outbox month (February)
    holds an event not delivered yet."""
    for month in FETCH_MONTHS:
        fetched_at = month.start + dt.timedelta(days=3)
        await pool.execute(
            "INSERT INTO stored_records (url_id, fetched_at, record_type, status, warc_file, "
            "warc_offset, warc_length, record_id, payload_digest, payload_bytes, host_id) "
            "SELECT id, $1, 'response', 200, 'a.warc.gz', 0, 10, 'r' || id, 'sha1:X', 10, "
            "host_id FROM urls", fetched_at,
        )
        await pool.execute(
            "INSERT INTO change_events (url_id, fetched_at, kind, payload, delivered_at, "
            "host_id) SELECT id, $1, 'changed', '{}', CASE WHEN $2 THEN NULL ELSE now() END, "
            "host_id FROM urls",
            fetched_at, month == Month(2024, 2),
        )


@pytest.mark.breaks_invariant(
    "index_rows", reason="its index rows are inserted by hand, naming a WARC file that was never "
    "written (a.warc.gz)")
async def test_partitions_are_created_ahead_and_dropped_past_the_retention(
    db_url: str,
) -> None:
    pool = await asyncpg.create_pool(db_url)
    try:
        await frontier.seed(pool, URLS, at(2023, 12, 20))
        for version, month in enumerate(FETCH_MONTHS, start=1):
            assert await fetch_everything(pool, at(month.year, month.month, 2), version) == 6
        await add_collection_rows(pool)
        # Those months had no partition (the template's are the current months): every row
        # went to the DEFAULT partitions, and no insert failed.
        assert await pool.fetchval("SELECT count(*) FROM observations_default") == 36
        urls_before = [dict(r) for r in await pool.fetch("SELECT * FROM urls ORDER BY id")]
        assert any(u["change_rate_per_day"] for u in urls_before)  # there are estimates

        # July 15th 2024, 60 days' retention: the cutoff is May 16th.
        conn = await pool.acquire()
        try:
            done = await partitions.maintain(conn, at(2024, 7, 15), retention_days=60,
                                             keep_undelivered=True)
        finally:
            await pool.release(conn)
        assert done.rows_moved == 3 * 36
        for table in partitions.PARTITIONED_TABLES:
            names = await partition_names(pool, table)
            # Created ahead: July, August, September; and January to June for the strays.
            for month in range(1, 10):
                wanted = f"{table}_p2024{month:02d}"
                dropped = (table == "observations" and month <= 4) or (
                    table == "change_events" and month in (1, 3, 4)
                )
                assert (wanted in names) != dropped, (wanted, sorted(names))
            assert f"{table}_default" in names
            assert await pool.fetchval(f"SELECT count(*) FROM {table}_default") == 0
        assert done.kept_undelivered == ["change_events_p202402"]
        months = await pool.fetch(
            "SELECT DISTINCT EXTRACT(MONTH FROM fetched_at AT TIME ZONE 'UTC')::int AS m "
            "FROM observations ORDER BY 1"
        )
        assert [r["m"] for r in months] == [5, 6]
        assert await pool.fetchval("SELECT count(*) FROM observations") == 12
        assert await pool.fetchval("SELECT count(*) FROM stored_records") == 36  # never dropped
        assert await pool.fetchval("SELECT count(*) FROM change_events") == 18  # Feb, May, June

        # The URLs' estimates and schedules are their rows' sufficient statistics: unchanged.
        urls_after = [dict(r) for r in await pool.fetch("SELECT * FROM urls ORDER BY id")]
        assert urls_after == urls_before

        # A statement bounded in time reads only the months it can need (pruned at start).
        plan = "\n".join(r[0] for r in await pool.fetch(
            "EXPLAIN " + QUERIES["fetches_since"], 3600.0
        ))
        assert "Subplans Removed" in plan and "observations_p2024" not in plan, plan

        # A second round at the same moment has nothing left to do.
        conn = await pool.acquire()
        try:
            again = await partitions.maintain(conn, at(2024, 7, 15), retention_days=60,
                                              keep_undelivered=True)
        finally:
            await pool.release(conn)
        assert (again.created, again.dropped, again.rows_moved) == ([], [], 0)
    finally:
        await pool.close()


async def test_estimates_never_read_observations(db_url: str) -> None:
    """The next fetch's estimate is the same whether or not the URL's past observations
    exist: the transition reads the URL row, and no statement that loads a URL for a fetch or
    for the planner mentions observations."""
    pool = await asyncpg.create_pool(db_url)
    try:
        await frontier.seed(pool, URLS[:2], at(2024, 1, 1))
        for version, month in enumerate(FETCH_MONTHS, start=1):
            await fetch_everything(pool, at(month.year, month.month, 2), version)

        async def next_transitions() -> list[Transition]:
            claims = await frontier.claim(pool, "test", max_hosts=10, urls_per_host=10,
                                          lease_seconds=60)
            out = [fetched(r, at(2024, 7, 2), 99) for c in claims for r in c.urls]
            for c in claims:
                await frontier.release_host(pool, c.lease)
            return out

        before = await next_transitions()
        assert len(before) == 2 and all(t.record.change_rate_per_day for t in before)
        await pool.execute("DELETE FROM observations")  # as if every month were dropped
        assert await next_transitions() == before
    finally:
        await pool.close()
    for name in ("claim_due_work", "planner_sample", "reschedule_scan", "reschedule_records"):
        for sql in (PLAIN_QUERIES[name], CITUS_STATEMENTS[name]):
            assert not re.search(r"\bobservations\b", sql), name


async def test_a_fetch_dated_outside_every_partition_lands_in_default_then_its_month(
    db_url: str,
) -> None:
    pool = await asyncpg.create_pool(db_url)
    try:
        await frontier.seed(pool, URLS[:1], time.time() - 10)
        far = at(2031, 3, 9)  # a clock far ahead: no month partition covers it
        assert await fetch_everything(pool, far, 1) == 1
        assert await pool.fetchval("SELECT count(*) FROM observations_default") == 1
        # A round with the real clock (as the daemon does) creates its month and moves it.
        done = await partitions.maintain_once(pool, retention_days=0, keep_undelivered=False)
        assert done is not None and done.rows_moved == 1 and done.dropped == []
        assert "observations_p203103" in done.created
        assert await pool.fetchval("SELECT count(*) FROM observations_default") == 0
        assert await pool.fetchval("SELECT count(*) FROM observations_p203103") == 1
        # The current month and the next two exist for every table (the migration made
        # them; a round creates any missing, e.g. after months without a daemon).
        await pool.execute(f"DROP TABLE {Month.of(time.time()).plus(2).partition('observations')}")
        done = await partitions.maintain_once(pool, retention_days=0, keep_undelivered=False)
        assert done is not None
        assert done.created == [Month.of(time.time()).plus(2).partition("observations")]
        for table in partitions.PARTITIONED_TABLES:
            names = await partition_names(pool, table)
            for month in partitions_ahead():
                assert month.partition(table) in names
        # The unique key ON CONFLICT relies on still refuses a duplicate fetch.
        row = await pool.fetchrow("SELECT * FROM observations")
        assert row is not None
        status = await pool.execute(
            "INSERT INTO observations (url_id, fetched_at, outcome, duration_seconds, host_id) "
            "VALUES ($1, $2, 'ok', 0, $3) ON CONFLICT (url_id, fetched_at, host_id) DO NOTHING",
            row["url_id"], row["fetched_at"], row["host_id"],
        )
        assert status == "INSERT 0 0"
    finally:
        await pool.close()


def partitions_ahead() -> list[Month]:
    now = Month.of(time.time())
    return [now.plus(i) for i in range(partitions.PARTITIONS_AHEAD + 1)]


async def test_the_daemon_keeps_partitions_from_start_up(db_url: str) -> None:
    """The daemon's start-up round: the months ahead recreated, a stray row moved out of the
    DEFAULT partition into its month, and that month dropped past the retention, all before
    the daemon announces itself."""
    pool = await asyncpg.create_pool(db_url)
    try:
        await frontier.seed(pool, URLS[:1], time.time() + 86400)  # nothing due: no fetch
        ahead = Month.of(time.time()).plus(1)
        for table in partitions.PARTITIONED_TABLES:
            await pool.execute(f"DROP TABLE {ahead.partition(table)}")
        await pool.execute(
            "INSERT INTO observations (url_id, fetched_at, outcome, duration_seconds, host_id) "
            "SELECT id, '2020-02-10Z', 'ok', 0.1, host_id FROM urls"
        )
        proc = await start_daemon(daemon_env(db_url, observation_retention_days="30",
                                             poll_interval="0.2", schedule="uniform"))
        seen: list[str] = []
        try:
            assert proc.stdout is not None
            while not any("metrics at" in line for line in seen):
                line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
                assert line, "daemon exited: " + "".join(seen)
                seen.append(line)
        finally:
            seen.append(await stop_daemon(proc))
        log = "".join(seen)
        assert "dropped partitions past CRAWLER_OBSERVATION_RETENTION_DAYS=30: " \
               "observations_p202002" in log, log
        for table in partitions.PARTITIONED_TABLES:
            assert ahead.partition(table) in await partition_names(pool, table)
        assert await pool.fetchval("SELECT count(*) FROM observations") == 0
        assert "observations_p202002" not in await partition_names(pool, "observations")
    finally:
        await pool.close()
