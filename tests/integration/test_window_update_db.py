"""Incremental windows in PostgreSQL (issue 13, "Windows incremental").

After every random edit of a site's links and gone pages, the incremental update leaves rows a
full recompute would not change; discovering already-known URLs rewrites none of their rows;
and every statement the update reads with is served by an index.
"""

from __future__ import annotations

import random
import time

import asyncpg
import pytest

from crawler.db import frontier, windows
from crawler.db.queries import QUERIES

pytestmark = pytest.mark.timeout(120)

ORIGIN = "http://127.0.0.2:8000"


async def site(conn: asyncpg.Connection, pages: int, size: int) -> tuple[int, int, list[int]]:
    """A windowed site of ``pages`` URLs on one host: (site id, host id, url ids by index)."""
    urls = [f"{ORIGIN}/p{i}" for i in range(pages)]
    await frontier.seed(conn, [(u, 1.0) for u in urls], time.time())
    site_id = await windows.register_site(conn, urls[0], size)
    await conn.execute("UPDATE urls SET site_id = $1", site_id)
    rows = await conn.fetch("SELECT id, url, host_id FROM urls")
    by_url = {r["url"]: r["id"] for r in rows}
    return site_id, rows[0]["host_id"], [by_url[u] for u in urls]


@pytest.mark.breaks_invariant(
    "urls_scheduled", "hosts_due", reason="it sets URLs' state to gone by hand (no transition: "
    "parked pages get no gone recheck) and moves its window outside any lease, at a time before "
    "its host's")
async def test_incremental_updates_leave_nothing_for_a_full_recompute(db_url: str) -> None:
    conn = await asyncpg.connect(db_url)
    rng = random.Random(13)
    pages, now = 40, time.time()
    try:
        site_id, host_id, _ = await site(conn, pages, size=12)
        assert await windows.recompute_window(conn, site_id, now) == 0  # the root alone
        gone: set[int] = set()
        links_of: dict[int, list[int]] = {}
        moved = 0
        for step in range(150):
            # Mostly the window's pages, as the daemon fetches; now and then any page.
            inside = [r["url"] for r in await conn.fetch(
                "SELECT url FROM urls WHERE in_window ORDER BY id")]
            page = (int(rng.choice(inside).rsplit("/p", 1)[1]) if rng.random() < 0.8
                    else rng.randrange(pages))
            page_id = await conn.fetchval("SELECT id FROM urls WHERE url = $1",
                                          f"{ORIGIN}/p{page}")
            was_gone = page in gone
            if rng.random() < 0.1 and page:
                gone.add(page)
            else:
                gone.discard(page)
            state = "gone" if page in gone else "active"
            await conn.execute("UPDATE urls SET state = $2 WHERE id = $1", page_id, state)
            links = links_of.get(page, [])
            roll = rng.random()
            if page in gone:
                links = []
            elif roll < 0.25 and links:  # drop one
                links = [t for t in links if t != rng.choice(links)]
            elif roll < 0.5:  # add one anywhere; p40-p44 are new URLs, discovered by the edit
                links = [*links]
                links.insert(rng.randint(0, len(links)), rng.randrange(pages + 5))
            elif roll < 0.7:  # reorder
                links = rng.sample(links, len(links))
            else:
                links = rng.sample(range(pages + 5), rng.randint(0, 4))
            links_of[page] = links = list(dict.fromkeys(links))
            targets = [f"{ORIGIN}/p{t}" for t in links]
            old, new = await windows.replace_out_links(conn, page_id, site_id, host_id,
                                                       targets)
            moved += await windows.update_window(conn, site_id, page_id, old, new,
                                                 page_was_gone=was_gone, now=now)
            assert await windows.recompute_window(conn, site_id, now) == 0, step
        assert moved > 20  # the edits did move the window
        assert await conn.fetchval(
            "SELECT count(*) FROM urls WHERE site_id = $1 AND in_window", site_id) == 12
    finally:
        await conn.close()


async def test_a_full_recompute_sees_what_the_incremental_update_skipped(db_url: str) -> None:
    """The check above can fail: links stored without an update leave work for the recompute."""
    conn = await asyncpg.connect(db_url)
    try:
        site_id, host_id, ids = await site(conn, 5, size=3)
        await windows.replace_out_links(conn, ids[0], site_id, host_id,
                                        [f"{ORIGIN}/p1", f"{ORIGIN}/p2"])
        assert await windows.recompute_window(conn, site_id, time.time()) == 2
    finally:
        await conn.close()


async def test_discovering_known_urls_rewrites_no_row(db_url: str) -> None:
    conn = await asyncpg.connect(db_url)
    try:
        site_id, host_id, ids = await site(conn, 4, size=10)
        await conn.execute("UPDATE urls SET site_id = NULL WHERE id = $1", ids[3])
        before = {r["id"]: r["xmin"] for r in await conn.fetch("SELECT id, xmin::text FROM urls")}
        targets = [f"{ORIGIN}/p2", f"{ORIGIN}/new", f"{ORIGIN}/p1", f"{ORIGIN}/p3"]
        found = await windows.discover(conn, site_id, host_id, targets, first_fetch=False)
        after = {r["id"]: r["xmin"] for r in await conn.fetch("SELECT id, xmin::text FROM urls")}
        assert found[0] == ids[2] and found[2] == ids[1] and found[3] == ids[3]
        assert found[1] not in before  # inserted
        # Known rows of the site are untouched; the one without a site joined it.
        assert {i for i in before if before[i] != after[i]} == {ids[3]}
        assert await conn.fetchval("SELECT site_id FROM urls WHERE id = $1", ids[3]) == site_id
        again = await windows.discover(conn, site_id, host_id, targets, first_fetch=False)
        assert again == found
        assert {r["id"]: r["xmin"] for r in await conn.fetch("SELECT id, xmin::text FROM urls")
                } == after
        # Storing the same links again writes no link row either.
        await windows.replace_out_links(conn, ids[0], site_id, host_id, targets)
        links = await conn.fetch("SELECT to_url_id, xmin::text FROM links ORDER BY 1")
        await windows.replace_out_links(conn, ids[0], site_id, host_id, targets)
        assert await conn.fetch("SELECT to_url_id, xmin::text FROM links ORDER BY 1") == links
    finally:
        await conn.close()


HOST = object()  # stands for the site's host id (a hash of its origin), known once seeded
EXPLAINED: dict[str, tuple[list[object], str | None]] = {
    "window_rows": ([[1, 2, 3], 1, HOST], "urls_pkey"),
    "window_out_links": ([[1, 2, 3], 1, HOST], "links_pkey"),
    "window_in_links": ([[1, 2, 3], 1, HOST], "links_to_idx"),
    "window_summary": ([1, HOST], "urls_site_window_idx"),
    "window_members": ([1, HOST], "urls_site_window_idx"),
    "delete_out_links_to": ([1, [2, 3], HOST], "links_pkey"),
    "upsert_out_links": ([1, [2, 3], HOST], None),
    "discover_urls": ([[f"{ORIGIN}/p1"], [HOST], 1, False], "urls_host_id_url_key"),
}


@pytest.mark.parametrize("query", sorted(EXPLAINED))
async def test_window_queries_use_indexes(db_url: str, query: str) -> None:
    conn = await asyncpg.connect(db_url)
    try:
        _, _, ids = await site(conn, 200, size=10)
        await conn.execute(
            "INSERT INTO links (from_url_id, to_url_id, position, host_id) "
            "SELECT f, t, row_number() OVER (PARTITION BY f ORDER BY t), "
            "(SELECT host_id FROM urls WHERE id = f) "
            "FROM unnest($1::bigint[]) AS f, unnest($1::bigint[]) AS t WHERE f <> t", ids[:60])
        await conn.execute("ANALYZE")
        await conn.execute("SET enable_seqscan = off")
        host_id = await conn.fetchval("SELECT host_id FROM urls WHERE id = $1", ids[0])
        template, index = EXPLAINED[query]
        args = [host_id if a is HOST else [host_id] if a == [HOST] else a for a in template]
        async with conn.transaction():
            plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + QUERIES[query], *args))
            await conn.execute("ROLLBACK; BEGIN")
        assert "Seq Scan" not in plan, plan
        if index is not None:
            assert index in plan, plan
    finally:
        await conn.close()
