"""Every URL that is not removed has a next fetch time (issue 33), in PostgreSQL, through the
statements the daemon and `crawler seed` run.

A window page that answers 404 leaves its window but keeps its gone recheck; a page newly
linking to it makes it due at once; found back, it re-enters the window and a `back` event
goes to the outbox. Seeding again a known URL that has no next fetch time (parked outside
its window), or is gone, makes it due; any other keeps its schedule.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import asyncpg
import pytest
from invariants import assert_every_url_scheduled, unscheduled_urls

from crawler.core.backoff import HostHealth
from crawler.core.model import FetchResult, Outcome
from crawler.core.patterns import EVERY_URL
from crawler.core.schedule import SchedulePolicy
from crawler.core.transition import HostContext, Transition, transition
from crawler.db import frontier, windows
from crawler.db.queries import QUERIES
from crawler.db.record import write_transition
from crawler.settings import default_settings
from crawler.store.collect import Collection

pytestmark = pytest.mark.timeout(120)

ORIGIN = "http://127.0.0.2:8000"
ROOT, A, B = ORIGIN + "/", ORIGIN + "/a", ORIGIN + "/b"
INTERVAL = 3600.0
POLICY = SchedulePolicy(default_settings(schedule="uniform", default_interval=INTERVAL))
HOST = HostContext(HostHealth(), delay_seconds=0.0, next_request_at=0.0)


def page(*links: str) -> FetchResult:
    anchors = "".join(f'<a href="{link}">{link}</a>' for link in links)
    body = f"<html><body><p>{'words ' * 40}</p>{anchors}</body></html>".encode()
    return FetchResult(time.time(), 0.01, Outcome.OK, status=200, body=body,
                       content_type="text/html")


def gone() -> FetchResult:
    return FetchResult(time.time(), 0.01, Outcome.GONE, status=404)


async def fetch(pool: asyncpg.Pool, url: str, result: FetchResult) -> Transition:
    """One fetch of ``url`` as the daemon records it: made due, its host claimed, the
    transition written with its collection rows (the change-event outbox), the host given
    back."""
    await pool.execute(QUERIES["recheck_urls"], [url])
    await frontier.refresh_hosts(pool, {await pool.fetchval(
        "SELECT host_id FROM urls WHERE url = $1", url)})
    claims = await frontier.claim(pool, "test", max_hosts=1, urls_per_host=100,
                                  lease_seconds=60)
    assert len(claims) == 1
    record = next(r for r in claims[0].urls if r.url == url)
    result = FetchResult(time.time(), result.duration_seconds, result.outcome,
                         status=result.status, body=result.body,
                         content_type=result.content_type)
    t = transition(record, result, HOST, POLICY, url_filter=EVERY_URL, now=result.fetched_at,
                   rng_value=0.5)
    write = await Collection(None, pool).prepare(t, result)
    await write_transition(pool, t, claims[0].lease, extra_writes=[write] if write else [])
    assert await frontier.release_host(pool, claims[0].lease)
    return t


async def row(pool: asyncpg.Pool, url: str) -> asyncpg.Record:
    found = await pool.fetchrow(
        "SELECT state, in_window, isfinite(next_fetch_at) AS scheduled, "
        "next_fetch_at <= now() AS due, date_part('epoch', next_fetch_at) AS at "
        "FROM urls WHERE url = $1", url)
    assert found is not None, url
    return found


async def test_a_gone_window_page_keeps_its_recheck_and_comes_back_when_linked_again(
    db_url: str, statements: str
) -> None:
    pool = await asyncpg.create_pool(db_url)
    try:
        await frontier.seed(pool, [(ROOT, 1.0)], time.time())
        async with pool.acquire() as conn:
            await windows.register_site(conn, ROOT, 2)
        await fetch(pool, ROOT, page("/a", "/b"))
        assert (await row(pool, A))["in_window"] and not (await row(pool, B))["in_window"]

        t = await fetch(pool, A, gone())
        assert t.event is not None and t.event.kind == "gone"
        a = await row(pool, A)
        assert (a["state"], a["in_window"], a["scheduled"]) == ("gone", False, True)
        assert a["at"] == pytest.approx(t.observation.fetched_at + INTERVAL, abs=1.0)
        assert (await row(pool, B))["in_window"]  # the next page took its place
        assert await unscheduled_urls(db_url) == []

        await fetch(pool, ROOT, page("/b"))  # the link to the gone page goes away
        assert not (await row(pool, A))["due"]
        await fetch(pool, ROOT, page("/a", "/b"))  # ... and comes back: worth a look now
        assert (await row(pool, A))["due"]

        back = await fetch(pool, A, page())
        assert back.event is not None and back.event.kind == "back"
        a, b = await row(pool, A), await row(pool, B)
        assert (a["state"], a["in_window"]) == ("active", True)
        assert not b["in_window"] and not b["scheduled"]  # pushed out, parked
        kinds = [r["kind"] for r in await pool.fetch(
            "SELECT e.kind FROM change_events AS e JOIN urls AS u ON u.id = e.url_id "
            "WHERE u.url = $1 ORDER BY e.fetched_at", A)]
        assert kinds == ["gone", "back"]
        await assert_every_url_scheduled(db_url)
    finally:
        await pool.close()


def seed(db_url: str, *urls: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CRAWLER_DATABASE_URL": db_url}
    return subprocess.run([sys.executable, "-m", "crawler", "seed", *urls], env=env,
                          capture_output=True, text=True, timeout=60)


async def test_seeding_again_makes_a_parked_or_gone_url_due_and_leaves_the_rest(
    db_url: str, statements: str
) -> None:
    pool = await asyncpg.create_pool(db_url)
    try:
        await frontier.seed(pool, [(ROOT, 1.0)], time.time())
        async with pool.acquire() as conn:
            await windows.register_site(conn, ROOT, 1)
        await fetch(pool, ROOT, page("/a", "/b"))  # a window of one: /a and /b parked
        await fetch(pool, ROOT, page("/a", "/b"))
        scheduled = (await row(pool, ROOT))["at"]
        await pool.execute("UPDATE urls SET state = 'gone', next_fetch_at = now() + "
                           "interval '30 days' WHERE url = $1", B)
        await pool.execute("UPDATE hosts SET next_due_at = 'infinity'")
        assert not (await row(pool, A))["scheduled"]

        again = seed(db_url, ROOT, A, B)
        assert again.returncode == 0, again.stderr
        assert "seeded 0 new URLs (3 already known, 2 of them due now, 0 malformed)" \
            in again.stdout
        assert (await row(pool, A))["due"] and (await row(pool, B))["due"]
        assert (await row(pool, ROOT))["at"] == scheduled  # scheduled: left alone
        assert await pool.fetchval("SELECT next_due_at <= now() FROM hosts")

        # The bulk path (COPY and staging) does the same, and moves the hosts too.
        await pool.execute("UPDATE urls SET next_fetch_at = CASE WHEN url = $1 THEN "
                           "'infinity' ELSE now() + interval '1 day' END", A)
        await frontier.refresh_hosts(pool, {await pool.fetchval("SELECT id FROM hosts")})
        assert not await pool.fetchval("SELECT next_due_at <= now() FROM hosts")
        many = [f"{ORIGIN}/new{i}" for i in range(frontier.SMALL_SEED)] + [A]
        result = await frontier.seed(pool, [(u, 1.0) for u in many], time.time())
        assert (result.inserted, result.already_known, result.made_due) == (len(many) - 1, 1, 1)
        assert (await row(pool, A))["due"]
        assert await pool.fetchval("SELECT next_due_at <= now() FROM hosts")
        await assert_every_url_scheduled(db_url)
    finally:
        await pool.close()
