"""Seeding in bulk: COPY into staging, one insert per batch, each batch its own transaction."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import asyncpg
import pytest

from crawler.commands.errors import PARTIAL
from crawler.db import frontier

pytestmark = pytest.mark.timeout(300)
# Each in-process test with the plain statements and with the Citus variants
# (conftest.statements); a seeder run as a subprocess looks its statements up for itself.
both_statement_sets = pytest.mark.usefixtures("statements")


def many_urls(n: int, per_host: int = 10) -> list[tuple[str, float]]:
    return [(f"http://h{i // per_host}.example:8080/page/{i}", 1.0 + i % 3) for i in range(n)]


@both_statement_sets
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
        assert calls == [(50_000, 120_000), (100_000, 120_000), (120_000, 120_000)]
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
