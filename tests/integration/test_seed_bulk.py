"""Seeding in bulk: COPY into staging, one insert per batch, each batch its own transaction."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from crawler.db import frontier, queries
from crawler.errors import PARTIAL

pytestmark = pytest.mark.timeout(300)
# Each in-process test with the plain statements and with the Citus variants
# (conftest.statements); a seeder run as a subprocess looks its statements up for itself.
both_statement_sets = pytest.mark.usefixtures("statements")


def many_urls(n: int, per_host: int = 10) -> list[tuple[str, float]]:
    return [(f"http://h{i // per_host}.example:8080/page/{i}", 1.0 + i % 3) for i in range(n)]


@both_statement_sets
@pytest.mark.breaks_invariant(
    "hosts_due", reason="it sets hosts' due time to infinity by hand, to see that seeding again "
    "rewrites no host")
async def test_bulk_seed_commits_in_batches_and_is_idempotent(db_url: str) -> None:
    pool = await asyncpg.create_pool(db_url)
    try:
        urls = many_urls(120_000)
        calls: list[tuple[int, int]] = []
        started = time.perf_counter()
        first = await frontier.seed(
            pool, urls, time.time(), batch_size=50_000, progress=lambda d, t: calls.append((d, t))
        )
        seconds = time.perf_counter() - started
        print(f"seeded {len(urls)} URLs in {seconds:.2f} s ({len(urls) / seconds:,.0f}/s)")
        assert (first.inserted, first.already_known) == (120_000, 0)
        # One call before the first batch, then one per committed batch (50,000, 50,000 and
        # 20,000 URLs). On a pool two run at once: the third starts when one of the first two
        # commits, and may commit before the other.
        assert calls[:2] == [(0, 120_000), (50_000, 120_000)]
        assert calls[2] in ((100_000, 120_000), (70_000, 120_000))
        assert calls[3:] == [(120_000, 120_000)]
        assert await pool.fetchval("SELECT count(*) FROM hosts") == 12_000
        assert await pool.fetchval(
            "SELECT count(*) FROM urls u JOIN hosts h ON h.id = u.host_id "
            "WHERE u.url LIKE h.origin || '/%' AND u.importance = 1.0 + "
            "(split_part(u.url, '/', 5)::int % 3)"
        ) == 120_000
        # Seeding again inserts nothing and rewrites no host.
        await pool.execute("UPDATE hosts SET next_due_at = 'infinity' WHERE id % 2 = 0")
        again = await frontier.seed(pool, urls, time.time(), batch_size=50_000)
        assert (again.inserted, again.already_known) == (0, 120_000)
        assert await pool.fetchval(
            "SELECT count(*) FROM hosts WHERE next_due_at = 'infinity'"
        ) == await pool.fetchval("SELECT count(*) FROM hosts WHERE id % 2 = 0") > 5_000
        # A known host that gains a URL becomes due.
        host = await pool.fetchrow("SELECT id, origin FROM hosts WHERE id % 2 = 0 LIMIT 1")
        more = [(f"{host['origin']}/new/{i}", 1.0) for i in range(200)]
        added = await frontier.seed(pool, more, time.time())
        assert added.inserted == 200
        due = await pool.fetchval("SELECT next_due_at FROM hosts WHERE id = $1", host["id"])
        assert frontier.to_seconds(due) is not None
    finally:
        await pool.close()


async def test_interrupted_seed_keeps_what_it_committed(db_url: str, tmp_path: Path) -> None:
    n = 100_000  # five batches: what is in flight at Ctrl-C (two) still leaves some out
    seed_file = tmp_path / "seeds.txt"
    seed_file.write_text("".join(f"{u}\n" for u, _ in many_urls(n)))
    env = {**os.environ, "CRAWLER_DATABASE_URL": db_url}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawler", "seed", "--file", str(seed_file), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    pool = await asyncpg.create_pool(db_url)
    try:
        deadline = time.monotonic() + 240
        seeded = 0
        while seeded == 0:
            assert time.monotonic() < deadline, "no batch was committed"
            await asyncio.sleep(0.05)
            seeded = await pool.fetchval("SELECT count(*) FROM urls")
        proc.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(proc.communicate(), 120)
        kept = await pool.fetchval("SELECT count(*) FROM urls")
        assert proc.returncode == PARTIAL, err.decode()[-2000:]
        assert "interrupted" in err.decode()
        # Whole batches only, and at least the one seen committed.
        assert kept % frontier.SEED_BATCH == 0 and seeded <= kept < n, (seeded, kept)
        # Not a terminal: progress comes as lines, not a redrawn bar.
        assert "\r" not in err.decode()
        # Seeding the same file again adds exactly what is missing.
        rerun = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "crawler", "seed", "--file", str(seed_file), env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(rerun.communicate(), 240)
        assert rerun.returncode == 0, err.decode()[-2000:]
        assert f"seeded {n - kept} new URLs ({kept} already known" in out.decode()
        assert "seeding: 100,000/100,000 URLs (100%)" in err.decode()
        assert await pool.fetchval("SELECT count(*) FROM urls") == n
    finally:
        if proc.returncode is None:
            proc.kill()
        await pool.close()


@both_statement_sets
@pytest.mark.breaks_invariant(
    "hosts_due", reason="it sets every host's due time to infinity by hand under URLs already "
    "due, then seeds others")
async def test_parallel_seeders_on_the_same_hosts_both_commit(db_url: str) -> None:
    """Two seeders at once (crawler seed keeps two batches in flight) staging the same URLs
    and moving the same known hosts earlier: neither fails, every URL is counted once, every
    host becomes due."""
    pool = await asyncpg.create_pool(db_url, min_size=2, max_size=4)
    try:
        hosts = 2_000
        await frontier.seed(pool, [(f"http://h{i}.example/", 1.0) for i in range(hosts)],
                            time.time())
        await pool.execute("UPDATE hosts SET next_due_at = 'infinity'")
        # Each seeder covers every host, in an order of its own, in batches.
        first = [(f"http://h{i % hosts}.example/a/{i}", 1.0) for i in range(20_000)]
        second = [(f"http://h{(hosts - 1 - i) % hosts}.example/b/{i}", 1.0)
                  for i in range(20_000)]
        shared = [(f"http://h{i % hosts}.example/shared/{i}", 1.0) for i in range(4_000)]
        now = time.time()
        a, b = await asyncio.gather(
            frontier.seed(pool, first + shared, now, batch_size=4_000),
            frontier.seed(pool, shared + second, now, batch_size=4_000),
        )
        assert a.inserted + b.inserted == 44_000
        assert a.already_known + b.already_known == 4_000
        assert await pool.fetchval("SELECT count(*) FROM urls") == hosts + 44_000
        assert await pool.fetchval(
            "SELECT count(*) FROM hosts WHERE next_due_at = 'infinity'"
        ) == 0
    finally:
        await pool.close()


def as_role(url: str, role: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{role}@{parts.netloc.rpartition('@')[2]}"))


async def test_a_batch_locks_its_known_hosts_until_it_commits(db_url: str) -> None:
    """A seed batch skips the foreign key's per-URL checks (the test server's role is a
    superuser) only because it locks the known hosts itself: a host cannot be deleted under
    URLs about to be inserted. While the batch's transaction is open, deleting one of its
    hosts waits; once it commits, the delete takes the URLs with it."""
    seeder = await asyncpg.connect(db_url)
    other = await asyncpg.connect(db_url)
    try:
        await frontier.seed(seeder, [("http://known.example/", 1.0)], time.time())
        host = await seeder.fetchval("SELECT id FROM hosts")
        urls = [f"http://known.example/{i}" for i in range(5)] + ["http://new.example/"]
        records, hosts = frontier.seed_rows(urls, dict.fromkeys(urls, 1.0))
        outer = seeder.transaction()
        await outer.start()
        due = frontier.to_datetime(time.time())
        assert await frontier._seed_batch(seeder, records, hosts, due) == (6, 0)
        assert await seeder.fetchval("SHOW session_replication_role") == "replica"
        await other.execute("SET lock_timeout = '300ms'")
        with pytest.raises(asyncpg.LockNotAvailableError):
            await other.execute("DELETE FROM hosts WHERE id = $1", host)
        await outer.commit()
        assert await seeder.fetchval("SHOW session_replication_role") == "origin"
        await other.execute("DELETE FROM hosts WHERE id = $1", host)
        assert await other.fetchval("SELECT count(*) FROM urls") == 1  # new.example's
        assert await other.fetchval(
            "SELECT count(*) FROM urls u WHERE NOT EXISTS "
            "(SELECT 1 FROM hosts h WHERE h.id = u.host_id)"
        ) == 0
    finally:
        await seeder.close()
        await other.close()


async def skips_checks(url: str) -> bool:
    """Whether a connection to ``url`` skips the checks: for its transaction, and only then."""
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            skipped = await queries.fetchval(conn, "skip_redundant_checks")
            role = await conn.fetchval("SHOW session_replication_role")
            assert role == ("replica" if skipped else "origin")
        assert await conn.fetchval("SHOW session_replication_role") == "origin"
        return bool(skipped)
    finally:
        await conn.close()


async def test_a_role_that_may_not_skip_the_checks_seeds_with_them(db_url: str) -> None:
    """Without superuser or SET ON PARAMETER session_replication_role the foreign keys are
    checked per URL, as always, and seeding gives the same rows; with the grant, they are
    skipped."""
    role = f"crawler_seed_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(db_url)
    try:
        await admin.execute(f'CREATE ROLE "{role}" LOGIN')
        await admin.execute(f'GRANT ALL ON ALL TABLES IN SCHEMA public TO "{role}"')
        await admin.execute(f'GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO "{role}"')
        await admin.execute(f'GRANT TEMPORARY ON DATABASE "{admin._params.database}" TO "{role}"')
        assert not await skips_checks(as_role(db_url, role))
        plain = await asyncpg.connect(as_role(db_url, role))
        try:
            urls = many_urls(30_000)
            result = await frontier.seed(plain, urls, time.time(), batch_size=10_000)
            assert (result.inserted, result.already_known) == (30_000, 0)
            assert await plain.fetchval("SELECT count(*) FROM hosts") == 3_000
        finally:
            await plain.close()
        # The checks did run: a URL of no host is refused in this role's transactions.
        orphan = await asyncpg.connect(as_role(db_url, role))
        try:
            with pytest.raises(asyncpg.ForeignKeyViolationError):
                await orphan.execute(
                    "INSERT INTO urls (url, host_id, next_fetch_at) VALUES ('x', 1, now())"
                )
        finally:
            await orphan.close()
        # Granted the parameter (PostgreSQL 15 and later), the same role skips them.
        await admin.execute(f'GRANT SET ON PARAMETER session_replication_role TO "{role}"')
        assert await skips_checks(as_role(db_url, role))
    finally:
        await admin.execute(f'DROP OWNED BY "{role}"')
        await admin.execute(f'DROP ROLE "{role}"')
        await admin.close()


async def test_a_collision_in_one_of_the_pools_batches_stops_the_seed(db_url: str) -> None:
    """Batches in flight on a pool: the one holding a colliding origin rolls back and its
    error is raised, the others in flight are cancelled or commit whole, and no URL is ever
    put under another origin's host."""
    from crawler.core.hostid import HostIdCollision, host_id

    pool = await asyncpg.create_pool(db_url, min_size=2, max_size=4)
    try:
        await pool.execute(
            "INSERT INTO hosts (id, origin, next_due_at) VALUES ($1, $2, now())",
            host_id("http://victim.example"), "http://holder.example",
        )
        urls = many_urls(30_000) + [(f"http://victim.example/{i}", 1.0) for i in range(10)]
        with pytest.raises(HostIdCollision) as refused:
            await frontier.seed(pool, urls, time.time(), batch_size=5_000)
        assert refused.value.origin == "http://victim.example"
        assert await pool.fetchval(
            "SELECT count(*) FROM urls u JOIN hosts h ON h.id = u.host_id "
            "WHERE u.url NOT LIKE h.origin || '/%'"
        ) == 0
        assert await pool.fetchval("SELECT count(*) FROM urls WHERE url LIKE "
                                   "'http://victim.example/%'") == 0
        # Whole batches only. Every host has 10 URLs and a batch holds 5,000 in host-key
        # order, so batches end at host boundaries and a host committed has all of its URLs.
        assert await pool.fetchval(
            "SELECT count(*) FROM (SELECT host_id FROM urls GROUP BY host_id "
            "HAVING count(*) <> 10) AS partial"
        ) == 0
    finally:
        await pool.close()


@pytest.mark.parametrize("on_pool", [True, False])
async def test_a_stopped_seed_commits_what_it_started_and_says_so(
    db_url: str, on_pool: bool
) -> None:
    """``stop`` set by the first committed batch (as Ctrl-C sets it in ``crawler seed``): no
    batch starts after it, those in flight commit, and the result counts exactly the rows
    written; ``after_batch`` saw every committed batch."""
    pool = await asyncpg.create_pool(db_url, min_size=2, max_size=4)
    try:
        stop = asyncio.Event()
        seen: list[tuple[int, int]] = []

        async def after_batch(batch: list[str], inserted: int) -> None:
            seen.append((len(batch), inserted))
            stop.set()

        target: asyncpg.Pool | asyncpg.Connection = pool
        if not on_pool:
            target = await pool.acquire()
        try:
            result = await frontier.seed(target, many_urls(50_000), time.time(),
                                         batch_size=5_000, after_batch=after_batch, stop=stop)
        finally:
            if not on_pool:
                await pool.release(target)
        assert not result.complete
        written = await pool.fetchval("SELECT count(*) FROM urls")
        assert result.inserted == written == sum(n for n, _ in seen)
        assert result.already_known == 0
        # One batch on a connection; on a pool, the SEED_PARALLEL in flight when it was set.
        assert len(seen) == (frontier.SEED_PARALLEL if on_pool else 1)
        # Given as a dict (URL -> importance), as crawler seed gives it: used, not copied.
        again = await frontier.seed(pool, dict(many_urls(50_000)), time.time(),
                                    batch_size=5_000)
        assert again.complete and (again.inserted, again.already_known) == (50_000 - written,
                                                                           written)
    finally:
        await pool.close()
