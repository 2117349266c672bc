"""Whether plain PostgreSQL could run the Citus variants of the hot statements instead of its
own: claim_due_work, record_fetches and release_hosts, each run both ways on the same
frontier, interleaved (alternating which goes first), and their median times compared.

Run: .venv/bin/python bench/bench_variants.py [--rounds 40] [--database-url postgresql://...]

A variant takes its row locks one host per statement (crawler/db/queries_citus.sql); where it
costs plain PostgreSQL nothing, one statement could serve both engines. Measured here over
four runs (claims of 32 hosts x 8 URLs, batches of 16 records and of 16 releases, on 8,000
hosts of 10 URLs), the variants cost 8-12% more per claim, 7-9% per record batch and 2-11%
per release batch, so plain PostgreSQL keeps its statements (``crawler.db.queries``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

import asyncpg
from bench_frontier import fetch_maker
from scratch import add_database_url, server_url, with_database

from crawler.db import frontier, migrate
from crawler.db.queries import force_citus

HOSTS = 8000
URLS_PER_HOST = 10
CLAIM_HOSTS = 32
CLAIM_URLS = 8
STEPS = ("claim", "record", "release")


async def measure(db_url: str, rounds: int) -> dict[str, dict[str, list[float]]]:
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=2)
    assert pool is not None
    try:
        await frontier.seed(pool, [(f"http://h{h}.bench.example/p{i}", 1.0)
                                   for h in range(HOSTS) for i in range(URLS_PER_HOST)],
                            time.time() - 1)
        await pool.execute("VACUUM ANALYZE urls, hosts")
        make = fetch_maker()
        times: dict[str, dict[str, list[float]]] = {
            mode: {step: [] for step in STEPS} for mode in ("plain", "citus")}
        for n in range(rounds):
            for mode in ("plain", "citus") if n % 2 == 0 else ("citus", "plain"):
                force_citus(mode == "citus")
                started = time.perf_counter()
                claims = await frontier.claim(pool, "bench", max_hosts=CLAIM_HOSTS,
                                              urls_per_host=CLAIM_URLS, lease_seconds=60)
                times[mode]["claim"].append(time.perf_counter() - started)
                half = len(claims) // 2
                rows = [frontier.record_row(make(c.urls[-1]), c.lease, release=True)
                        for c in claims[:half] if c.urls]
                started = time.perf_counter()
                async with pool.acquire() as conn, conn.transaction():
                    await frontier.record_fetches(conn, rows)
                times[mode]["record"].append(time.perf_counter() - started)
                started = time.perf_counter()
                await frontier.release_hosts(pool, [c.lease for c in claims[half:]])
                times[mode]["release"].append(time.perf_counter() - started)
        return times
    finally:
        force_citus(None)
        await pool.close()


async def main(url: str, rounds: int) -> None:
    admin = await asyncpg.connect(url)
    name = f"crawler_bench_variants_{uuid.uuid4().hex[:8]}"
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        db_url = with_database(url, name)
        await migrate.upgrade(db_url)
        times = await measure(db_url, rounds)
        for step in STEPS:
            plain = statistics.median(times["plain"][step]) * 1e3
            citus = statistics.median(times["citus"][step]) * 1e3
            print(f"{step:8s} median: plain {plain:.2f} ms, Citus variant {citus:.2f} ms "
                  f"({citus / plain:.2f}x)")
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    add_database_url(parser)
    args = parser.parse_args()
    with server_url(args.database_url) as url:
        asyncio.run(main(url, args.rounds))
