"""The crawler on a real Citus cluster, when ``CRAWLER_TEST_CITUS_URL`` names one.

CI has no Citus (Debian does not package it), so these tests skip there; the statements Citus
runs instead of the plain ones (``crawler/db/queries_citus.sql``) are checked on plain
PostgreSQL by ``test_citus_variants.py`` and by the frontier tests run with them forced. Here,
on Citus itself: a fresh database migrated then distributed as docs/OPERATIONS.md's "Scaling
past one server: Citus" says, every replaced statement run through the product's functions, then
``crawler seed --file`` over the bulk path, ``crawler run --processes 2`` crawling the demo web
on loopback with the planner solving rounds, and ``crawler status``.

Repeat it: ``CRAWLER_TEST_CITUS_URL=postgresql://postgres@127.0.0.1:5499/postgres``
``pytest tests/integration/test_citus.py`` (a single-node cluster whose coordinator holds the
shards; the test creates and drops a database of its own on it).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
from daemon import daemon_env, start_daemon, stop_daemon

from crawler.core.robots import RobotsState
from crawler.db import frontier, queries
from crawler.db.connect import _run_blocking, create_pool
from crawler.db.frontier import SMALL_SEED
from crawler.db.migrate import upgrade
from crawler.db.queries import CITUS_STATEMENTS, QUERIES, force_citus, statements
from crawler.demo.sites import demo_sites
from crawler.demo.web import DemoWeb

CITUS_URL = os.environ.get("CRAWLER_TEST_CITUS_URL")
pytestmark = [
    pytest.mark.skipif(
        not CITUS_URL,
        reason="CRAWLER_TEST_CITUS_URL is not set (a Citus coordinator's URL, e.g. "
               "postgresql://postgres@127.0.0.1:5499/postgres; Citus is not in Debian)",
    ),
    pytest.mark.timeout(300),
]

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "OPERATIONS.md"


def distribution_sql(host: str, port: int, db: str) -> str:
    """docs/OPERATIONS.md's distribution as written there, for a single-node cluster whose
    coordinator is at ``host:port``, applied to database ``db``."""
    blocks = re.findall(r"^```sql\n(.*?)^```$", OPERATIONS.read_text(), re.MULTILINE | re.DOTALL)
    sql = next(b for b in blocks if "create_distributed_table('hosts'" in b)
    assert "'127.0.0.1', 5432" in sql and "ALTER DATABASE crawler " in sql
    return (sql.replace("'127.0.0.1', 5432", f"'{host}', {port}")
            .replace("ALTER DATABASE crawler ", f'ALTER DATABASE "{db}" '))


COMPLAINTS = ("Traceback", "ERROR", "could not", "not supported", "deadlock", "unsupported")


def _with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


async def _admin(url: str, sql: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture
def citus_db() -> Iterator[str]:
    """A fresh database on the Citus server: migrated, then distributed."""
    assert CITUS_URL is not None
    server = _with_database(CITUS_URL, "postgres")
    name = f"crawler_citus_{uuid.uuid4().hex[:10]}"
    url = _with_database(CITUS_URL, name)
    parts = urlsplit(CITUS_URL)
    _run_blocking(_admin(server, f'CREATE DATABASE "{name}"'))
    try:
        _run_blocking(upgrade(url))
        _run_blocking(_admin(url, distribution_sql(
            parts.hostname or "127.0.0.1", parts.port or 5432, name)))
        yield url
    finally:
        force_citus(None)
        _run_blocking(_admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def test_every_replaced_statement_runs_on_citus(citus_db: str) -> None:
    pool = await create_pool(citus_db, min_size=2, max_size=4)
    try:
        async with pool.acquire() as conn:  # the pool found the extension
            assert statements(conn) is CITUS_STATEMENTS
        now = time.time()
        # Bulk seeding (seed_urls_from_staging), twice: the second finds everything known.
        urls = [(f"http://127.0.0.{2 + h}:8000/p{i}", 1.0) for h in range(30) for i in range(8)]
        assert len(urls) > SMALL_SEED
        assert (await frontier.seed(pool, urls, now - 60)).inserted == len(urls)
        assert (await frontier.seed(pool, urls, now - 60)).already_known == len(urls)

        # Two owners claim at once (claim_due_work): no host is leased twice.
        a, b = await asyncio.gather(*(
            frontier.claim(pool, owner, max_hosts=10, urls_per_host=3, lease_seconds=60)
            for owner in ("a", "b")
        ))
        hosts_a = {c.host_id for c in a}
        hosts_b = {c.host_id for c in b}
        assert hosts_a and hosts_b and not hosts_a & hosts_b
        assert all(len(c.urls) == 3 for c in a + b)
        held = await pool.fetch("SELECT id, lease_owner FROM hosts WHERE lease_owner IS NOT NULL")
        assert {r["id"]: r["lease_owner"] for r in held} == (
            {h: "a" for h in hosts_a} | {h: "b" for h in hosts_b})

        # store_robots under the lease; refused with a stale epoch.
        claim = a[0]
        robots = RobotsState("User-agent: *\nDisallow:\n", 200, now, now, now + 86400)
        await frontier.store_robots(pool, claim.lease, robots, 1.5, now, rules_changed=True)
        assert await pool.fetchval("SELECT crawl_delay_seconds FROM hosts WHERE id = $1",
                                   claim.host_id) == 1.5
        stale = frontier.Lease(claim.host_id, "a", claim.lease.epoch - 1,
                               claim.lease.expires_monotonic)
        with pytest.raises(frontier.LeaseLost):
            await frontier.store_robots(pool, stale, robots, 9.0, now, rules_changed=False)

        # record_fetches: the current token writes, a stale one does not.
        record = await pool.fetchrow(
            "SELECT * FROM urls WHERE id = $1 AND host_id = $2", claim.urls[0].url_id,
            claim.host_id)
        assert record is not None
        assert await _record(pool, claim.lease, record["id"], now) == {record["id"]: True}
        assert await _record(pool, claim.lease, record["id"], now) == {record["id"]: False}
        assert await _record(pool, stale, record["id"], now + 1) == {}
        assert await pool.fetchval("SELECT count(*) FROM observations") == 1

        # release_hosts gives back only what the token still holds.
        released = await frontier.release_hosts(pool, [c.lease for c in a] + [stale])
        assert released == hosts_a
        assert await frontier.release_owner(pool, "b") == len(hosts_b)

        # The planner's statements: sample, reschedule, refresh.
        bounds = await pool.fetchrow(QUERIES["planner_id_range"])
        sample = await queries.fetch(pool, "planner_sample", [bounds["min_id"]],
                                     [bounds["max_id"] + 1], 50)
        assert len(sample) == 50 and [r["id"] for r in sample] == sorted(r["id"] for r in sample)
        due = dt.datetime.fromtimestamp(now + 3600, dt.UTC)
        fetched = await pool.fetchrow(
            "SELECT id, host_id, last_fetched_at FROM urls WHERE id = $1 AND host_id = $2",
            record["id"], claim.host_id)
        moved = await queries.fetch(
            pool, "reschedule_urls", [fetched["id"]], [due], [1.0],
            [fetched["last_fetched_at"]], [0.5], [fetched["host_id"]])
        assert [r["host_id"] for r in moved] == [claim.host_id]
        done = await queries.fetch(pool, "refresh_host_due", sorted(hosts_a | hosts_b))
        assert {r["id"] for r in done} == hosts_a | hosts_b
    finally:
        await pool.close()


async def test_a_claim_on_citus_skips_a_host_another_transaction_holds(citus_db: str) -> None:
    pool = await create_pool(citus_db, min_size=2, max_size=2)
    try:
        await frontier.seed(pool, [(f"http://127.0.0.{h + 2}:8000/p", 1.0) for h in range(3)],
                            0.0)
        held = await pool.fetchval("SELECT id FROM hosts ORDER BY ready_at LIMIT 1")
        async with pool.acquire() as holder, holder.transaction():
            await holder.execute("SELECT id FROM hosts WHERE id = $1 FOR UPDATE", held)
            claims = await asyncio.wait_for(frontier.claim(
                pool, "me", max_hosts=3, urls_per_host=1, lease_seconds=60), 10)
            others = await pool.fetch("SELECT id FROM hosts WHERE id <> $1", held)
            assert {c.host_id for c in claims} == {r["id"] for r in others}
        later = await frontier.claim(pool, "me", max_hosts=3, urls_per_host=1, lease_seconds=60)
        assert [c.host_id for c in later] == [held]
    finally:
        await pool.close()


async def _record(
    pool: asyncpg.Pool, lease: frontier.Lease, url_id: int, at: float
) -> dict[int, bool]:
    """One fetch of ``url_id`` recorded under ``lease`` (a 200, due again in an hour)."""
    row = await pool.fetchrow("SELECT * FROM urls WHERE id = $1 AND host_id = $2", url_id,
                              lease.host_id)
    assert row is not None
    # The URL's own columns as they are, then what this fetch changes.
    fields = {name: row.get(name) for name in frontier.RECORD_COLUMNS}
    fields.update(
        host_id=lease.host_id, lease_owner=lease.owner, lease_epoch=lease.epoch, url_id=url_id,
        fetched_at=dt.datetime.fromtimestamp(at, dt.UTC), outcome="ok", status=200, bytes=10,
        duration_seconds=0.01, changed=False, content_changed=False, truncated=False,
        state="active", next_fetch_at=dt.datetime.fromtimestamp(at + 3600, dt.UTC),
        last_fetched_at=dt.datetime.fromtimestamp(at, dt.UTC), last_status=200,
        fetch_count=row["fetch_count"] + 1, change_count=0, consecutive_failures=0,
        changed_intervals_days=[], unchanged_days=0.0, intervals_observed=0,
        change_brackets_days=[], lm_fetches=0, lm_changes=0, lm_observed_days=0.0,
        lm_evidence_days=[], host_failures=0, release=False, out_links_read=True,
        next_request_at=dt.datetime.fromtimestamp(at, dt.UTC),
    )
    return await frontier.record_fetches(pool, [tuple(fields.values())])


def test_seed_crawl_plan_and_status_on_citus(citus_db: str) -> None:
    """``crawler seed --file``, ``crawler run --processes 2`` with the planner, ``crawler
    status``: what an operator runs, on Citus, against the demo web on loopback."""
    asyncio.run(_crawl(citus_db))


CRAWL_SECONDS = 30.0


async def _crawl(url: str) -> None:
    web = DemoWeb(demo_sites(n_sites=8, pages_per_site=20), host_base=120)
    await web.start()
    direct = await asyncpg.connect(url)
    seed_dir = Path(tempfile.mkdtemp(prefix="crawler-test-citus-"))
    env = daemon_env(url, processes="2", default_interval="5", min_interval="2",
                     politeness_delay="0.05", poll_interval="0.1", planner_interval="5",
                     planner_sample_urls="100")
    daemon: asyncio.subprocess.Process | None = None
    output = ""
    try:
        urls = web.urls()
        assert len(urls) > SMALL_SEED  # bulk seeding: COPY, then seed_urls_from_staging
        (seed_dir / "seeds.txt").write_text("\n".join(urls) + "\n")
        seeding = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "crawler", "seed", "--file", str(seed_dir / "seeds.txt"),
            env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        seeded, _ = await asyncio.wait_for(seeding.communicate(), 60)
        assert seeding.returncode == 0, seeded.decode()
        assert await direct.fetchval("SELECT count(*) FROM urls") == len(urls)

        started = time.monotonic()
        daemon = await start_daemon(env)
        await asyncio.sleep(CRAWL_SECONDS)
        assert daemon.returncode is None, "the daemon exited"
        fetched = await direct.fetchval("SELECT count(*) FROM observations")
        elapsed = time.monotonic() - started
        status = subprocess.run(
            [sys.executable, "-m", "crawler", "status"], env=env, capture_output=True,
            text=True, timeout=60)
        output = await stop_daemon(daemon, timeout=60)
        print(f"citus crawl: {fetched} fetches of {len(urls)} URLs in {elapsed:.1f}s")
        print(status.stdout)
        assert status.returncode == 0, status.stderr
        assert daemon.returncode == 0, output
        complaints = [line for line in output.splitlines()
                      if any(word in line for word in COMPLAINTS)]
        assert not complaints, "\n".join(complaints)
        assert fetched >= len(urls), (fetched, output[-3000:])  # every URL once, and more
        rounds = re.findall(r"planner: mu=", output)
        assert rounds, output[-3000:]
        assert await direct.fetchval("SELECT count(*) FROM hosts WHERE lease_owner IS NOT NULL") \
            == 0  # both processes gave their hosts back
    finally:
        if daemon is not None and not output:
            output = await stop_daemon(daemon, timeout=60)
        await direct.close()
        await web.stop()
        shutil.rmtree(seed_dir, ignore_errors=True)
        print("daemon:", output[-4000:])
