"""Seeding rate: ``crawler seed --file`` with 10^6 URLs over 10^5 hosts, cold and warm.

    python bench/bench_seed.py [--urls 1000000] [--hosts 100000]
                               [--database-url postgresql://... | --embedded]

A scratch database is created on the server, migrated, and dropped afterwards. Four runs:

1. the whole command, ``python -m crawler seed --file`` as a subprocess, on a cold table;
2. the same with another file (every URL new) into the table now holding 10^6 URLs;
3. the second file again: every URL already known;
4. the stages, in process, with a third file: reading and normalising the file, the URL
   patterns, then per seeding batch building the rows (origin and host_id, computed here),
   the COPY into staging, the hosts insert, the urls insert and the commit, each timed (the
   CPU-bound Python stages are reported apart from the database's);
5. the baseline, measured in the same run on the same server: the same rows COPYed straight
   into a table shaped like urls with no index, key or constraint, the fastest PostgreSQL
   takes the data at all. The cold-table rate is printed as a ratio to it.

URLs/s is the URLs in the file over the command's wall time, start-up included.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import asyncpg
from scratch import server_url, with_database

from crawler.commands.seed import read_seed_lines
from crawler.core.patterns import global_filter, partition
from crawler.db import frontier, migrate, queries
from crawler.db.queries import QUERIES
from crawler.settings import default_settings

DEFAULT_URL = os.environ.get("CRAWLER_BENCH_DATABASE_URL",
                             "postgresql://postgres@127.0.0.1:5432/postgres")


def write_seed_file(path: Path, n_urls: int, n_hosts: int, tag: str) -> None:
    """n_urls URLs spread evenly over n_hosts hosts, interleaved as a crawl list would be."""
    with path.open("w") as f:
        f.writelines(f"https://www.site{i % n_hosts}.example/{tag}/page-{i}.html?id={i}\n"
                     for i in range(n_urls))


async def stages(db_url: str, path: Path) -> None:
    t0 = time.perf_counter()
    text = path.read_text(errors="replace")
    lines = text.splitlines()
    t1 = time.perf_counter()
    urls, errors = read_seed_lines(lines, str(path))
    t2 = time.perf_counter()
    settings = default_settings()
    urls, _ = partition([global_filter(settings.include, settings.exclude)], urls)
    frontier.seed_order(urls)  # as crawler seed does
    t3 = time.perf_counter()
    print(f"read {len(lines):,} lines {t1 - t0:.2f} s; normalise {t2 - t1:.2f} s "
          f"({len(lines) / (t2 - t1):,.0f}/s); patterns and sort {t3 - t2:.2f} s "
          f"({len(urls) / max(t3 - t2, 1e-9):,.0f}/s); {len(errors)} malformed")
    due = frontier.to_datetime(time.time())
    conn = await asyncpg.connect(db_url)
    spent = {"records": 0.0, "copy": 0.0, "hosts": 0.0, "urls": 0.0, "commit": 0.0}
    inserted = 0
    started = time.perf_counter()
    try:
        for start in range(0, len(urls), frontier.SEED_BATCH):
            batch = urls[start : start + frontier.SEED_BATCH]
            a = time.perf_counter()
            records, hosts = frontier.seed_rows(batch, dict.fromkeys(batch, 1.0))
            b = time.perf_counter()
            tx = conn.transaction()
            await tx.start()
            await conn.execute(QUERIES["seed_staging"])
            await conn.copy_records_to_table("seed_staging", records=records,
                                             columns=frontier.SEED_COLUMNS)
            await conn.copy_records_to_table("seed_staging_hosts", records=hosts,
                                             columns=frontier.SEED_HOST_COLUMNS)
            c = time.perf_counter()
            assert not await queries.fetch(conn, "seed_hosts_from_staging", due)
            await queries.fetchval(conn, "skip_redundant_checks")  # as frontier._seed_batch
            d = time.perf_counter()
            inserted += int(await queries.fetchval(conn, "seed_urls_from_staging", due))
            e = time.perf_counter()
            await tx.commit()
            f = time.perf_counter()
            for key, seconds in (("records", b - a), ("copy", c - b), ("hosts", d - c),
                                 ("urls", e - d), ("commit", f - e)):
                spent[key] += seconds
    finally:
        await conn.close()
    total = time.perf_counter() - started
    print(f"database: {inserted:,} URLs in {total:.2f} s ({len(urls) / total:,.0f}/s): "
          + ", ".join(f"{k} {v:.2f} s" for k, v in spent.items()))
    whole = t3 - t0 + total
    print(f"stages together: {whole:.2f} s ({len(urls) / whole:,.0f} URLs/s)")


def command(db_url: str, path: Path, n_urls: int, label: str) -> float:
    env = {**os.environ, "CRAWLER_DATABASE_URL": db_url}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "crawler", "seed", "--file", str(path)],
                          env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"crawler seed failed ({done.returncode}): {done.stderr[-2000:]}")
    # The progress lines' rate: from the first batch sent to the last commit, without the
    # start-up and the reading, normalising and sorting of the file.
    progress = [line for line in done.stderr.splitlines() if line.startswith("seeding: ")]
    phase = progress[-1].rsplit(", ", 1)[-1] if progress else "?"
    print(f"{label}: {n_urls:,} URLs in {seconds:.2f} s = {n_urls / seconds:,.0f} URLs/s "
          f"(the seeding itself {phase}); {done.stdout.strip()}")
    return n_urls / seconds


async def baseline(db_url: str, path: Path) -> float:
    """URLs/s of a bare COPY of the file's rows (url, host_id, importance, next_fetch_at) into
    an unindexed table: what loading the data costs before any key or index is kept."""
    urls, _ = read_seed_lines(path.read_text().splitlines(), str(path))
    due = frontier.to_datetime(time.time())
    conn = await asyncpg.connect(db_url)
    try:
        await conn.execute("CREATE TABLE bench_bare (url text NOT NULL, host_id bigint NOT NULL, "
                           "importance float8 NOT NULL, next_fetch_at timestamptz NOT NULL)")
        started = time.perf_counter()
        for start in range(0, len(urls), frontier.SEED_BATCH):
            batch = urls[start : start + frontier.SEED_BATCH]
            records, _ = frontier.seed_rows(batch, dict.fromkeys(batch, 1.0))
            await conn.copy_records_to_table(
                "bench_bare", records=[(*r, due) for r in records],
                columns=("url", "host_id", "importance", "next_fetch_at"))
        seconds = time.perf_counter() - started
        await conn.execute("DROP TABLE bench_bare")
    finally:
        await conn.close()
    print(f"baseline, bare COPY into an unindexed table (one connection, rows built "
          f"included): {len(urls):,} URLs in {seconds:.2f} s = {len(urls) / seconds:,.0f} URLs/s")
    return len(urls) / seconds


async def main(url: str, n_urls: int, n_hosts: int) -> None:
    admin = await asyncpg.connect(url)
    name = f"crawler_bench_seed_{uuid.uuid4().hex[:8]}"
    await admin.execute(f'CREATE DATABASE "{name}"')
    db_url = with_database(url, name)
    try:
        await migrate.upgrade(db_url)
        with tempfile.TemporaryDirectory() as tmp:
            files = [Path(tmp, f"{tag}.txt") for tag in "abc"]
            for path, tag in zip(files, "abc", strict=True):
                write_seed_file(path, n_urls, n_hosts, tag)
            print(f"{n_urls:,} URLs over {n_hosts:,} hosts")
            cold = command(db_url, files[0], n_urls, "crawler seed --file, cold table")
            command(db_url, files[1], n_urls, f"crawler seed --file, table holding {n_urls:,}")
            command(db_url, files[1], n_urls, "crawler seed --file, every URL already known")
            print(f"stages in process, table holding {2 * n_urls:,}:")
            await stages(db_url, files[2])
            bare = await baseline(db_url, files[0])
            print(f"cold-table seeding at {cold / bare:.2f}x the bare COPY baseline")
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--urls", type=int, default=1_000_000)
    parser.add_argument("--hosts", type=int, default=100_000)
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--embedded", action="store_true",
                        help="start the embedded PostgreSQL in a temporary directory instead")
    ns = parser.parse_args()
    with server_url(None if ns.embedded else ns.database_url) as url:
        asyncio.run(main(url, ns.urls, ns.hosts))
