"""Window recompute cost per fetch: the full recompute against the incremental update.

Run: .venv/bin/python bench/bench_windows.py --database-url postgresql://postgres@127.0.0.1/postgres
     [--pages 10000 100000] [--window 1000] [--fetches 60] [--check-every 5]

For each site size, a fresh database holds one windowed site of that many pages: a tree of
fan-out 5 from the root with 5 more links per page to pages anywhere (a site's navigation).
Then fetches of window pages (as the daemon claims them) each edit the page's links (drop one,
add one, reorder, or replace them) and move the window, alternately by the full recompute
(``recompute_window``, the old path) and by the incremental update (``update_window``), on
the same evolving site, so load drifts hit both alike. Every ``--check-every``-th incremental
update is checked by a full recompute that must find nothing to change (not timed).

Prints, per size, the per-fetch window cost of each (median, mean, p90 in ms) and the median
ratio old/new; and discovering a page's already-known links with the old statement (ON
CONFLICT DO UPDATE: every row rewritten) against the new one (rows read, none written).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import time
import uuid

import asyncpg
from scratch import with_database

from crawler.db import frontier, windows
from crawler.db.migrate import upgrade

ORIGIN = "http://127.0.0.2:8000"
FANOUT = 5
NAV = 5

OLD_DISCOVER = """
WITH input AS (
    SELECT url, host_id, ord
    FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS t(url, host_id, ord)
),
inserted AS (
    INSERT INTO urls (url, host_id, site_id, next_fetch_at, discovered_initially)
    SELECT url, host_id, $3, 'infinity', $4 FROM input
    ON CONFLICT (host_id, url) DO UPDATE SET site_id = COALESCE(urls.site_id, EXCLUDED.site_id)
    RETURNING id, url
)
SELECT i.id FROM input JOIN inserted AS i ON i.url = input.url ORDER BY input.ord;
"""


def url(i: int) -> str:
    return f"{ORIGIN}/p{i}"


def initial_links(pages: int, rng: random.Random) -> dict[int, list[int]]:
    return {
        i: list(dict.fromkeys(
            [c for c in range(i * FANOUT + 1, i * FANOUT + FANOUT + 1) if c < pages]
            + [rng.randrange(pages) for _ in range(NAV)]
        ))
        for i in range(pages)
    }


def edit(links: list[int], pages: int, rng: random.Random) -> list[int]:
    roll = rng.random()
    if roll < 0.3 and links:
        return [t for t in links if t != rng.choice(links)]
    if roll < 0.6:
        new = [*links]
        new.insert(rng.randint(0, len(new)), rng.randrange(pages))
        return list(dict.fromkeys(new))
    if roll < 0.8:
        return rng.sample(links, len(links))
    return list(dict.fromkeys(rng.randrange(pages) for _ in range(FANOUT + NAV)))


def summary(ms: list[float]) -> str:
    ordered = sorted(ms)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return (f"median {statistics.median(ms):8.2f}  mean {statistics.fmean(ms):8.2f}  "
            f"p90 {p90:8.2f}")


async def one_size(admin_url: str, pages: int, window: int, fetches: int, check_every: int
                   ) -> None:
    name = f"crawler_bench_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(admin_url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    db_url = with_database(admin_url, name)
    rng = random.Random(pages)
    try:
        await upgrade(db_url)
        conn = await asyncpg.connect(db_url)
        now = time.time()
        built = time.perf_counter()
        await frontier.seed(conn, [(url(i), 1.0) for i in range(pages)], now)
        site_id = await windows.register_site(conn, url(0), window)
        await conn.execute("UPDATE urls SET site_id = $1", site_id)
        ids = {int(r["url"].rsplit("/p", 1)[1]): r["id"]
               for r in await conn.fetch("SELECT id, url FROM urls")}
        host_id = await conn.fetchval("SELECT host_id FROM urls LIMIT 1")
        links = initial_links(pages, rng)
        await conn.copy_records_to_table(
            "links", columns=["from_url_id", "to_url_id", "position", "host_id"],
            records=[(ids[i], ids[t], p + 1, host_id) for i, ts in links.items()
                     for p, t in enumerate(ts)],
        )
        await conn.execute("ANALYZE")
        start = time.perf_counter()
        await windows.recompute_window(conn, site_id, now)
        first = time.perf_counter() - start
        print(f"\n{pages:,} pages, window {window}: built in {time.perf_counter() - built:.1f} s, "
              f"{sum(map(len, links.values())):,} links; first full window {first * 1e3:.0f} ms")

        by_id = {v: k for k, v in ids.items()}
        old_ms: list[float] = []
        new_ms: list[float] = []
        for n in range(2 * fetches):
            members = [by_id[r["id"]] for r in await conn.fetch(
                "SELECT id FROM urls WHERE site_id = $1 AND in_window", site_id)]
            page = rng.choice(members)
            links[page] = edit(links[page], pages, rng)
            async with conn.transaction():
                old, new = await windows.replace_out_links(
                    conn, ids[page], site_id, host_id, [url(t) for t in links[page]])
                start = time.perf_counter()
                if n % 2:
                    await windows.update_window(conn, site_id, ids[page], old, new,
                                                page_was_gone=False, now=now)
                    new_ms.append((time.perf_counter() - start) * 1e3)
                else:
                    await windows.recompute_window(conn, site_id, now)
                    old_ms.append((time.perf_counter() - start) * 1e3)
            if n % 2 and (n // 2) % check_every == 0:
                left = await windows.recompute_window(conn, site_id, now)
                assert left == 0, f"the incremental update left {left} rows to change"
        print(f"  full recompute per fetch (ms):  {summary(old_ms)}")
        print(f"  incremental per fetch (ms):     {summary(new_ms)}")
        print(f"  ratio full/incremental (median): "
              f"{statistics.median(old_ms) / statistics.median(new_ms):.1f}x; "
              f"(mean): {statistics.fmean(old_ms) / statistics.fmean(new_ms):.1f}x")

        known = [url(t) for t in links[0]]
        discover_old: list[float] = []
        discover_new: list[float] = []
        rewritten = [0, 0]  # rows given a new version, by the old and the new statement

        async def versions() -> list[str]:
            return [r["xmin"] for r in await conn.fetch(
                "SELECT xmin::text FROM urls WHERE url = ANY($1) ORDER BY id", known)]

        for n in range(2 * fetches):
            before = await versions()
            async with conn.transaction():
                start = time.perf_counter()
                if n % 2:
                    await windows.discover(conn, site_id, host_id, known, False)
                    discover_new.append((time.perf_counter() - start) * 1e3)
                else:
                    await conn.fetch(OLD_DISCOVER, known, [host_id] * len(known), site_id,
                                     False)
                    discover_old.append((time.perf_counter() - start) * 1e3)
            rewritten[n % 2] += sum(a != b for a, b in zip(before, await versions(), strict=True))
        for label, ms, rows in (("old", discover_old, rewritten[0]),
                                ("new", discover_new, rewritten[1])):
            print(f"  discovering {len(known)} known links, {label} (ms): {summary(ms)}; "
                  f"rows rewritten per call {rows / fetches:.1f}")
        await conn.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--pages", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--fetches", type=int, default=60)
    parser.add_argument("--check-every", type=int, default=5)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    for pages in args.pages:
        await one_size(args.database_url, pages, args.window, args.fetches, args.check_every)
    print(f"\nload average at end: {os.getloadavg()}")


if __name__ == "__main__":
    asyncio.run(main())
