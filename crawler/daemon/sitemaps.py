"""Side task: read sitemaps and feeds again on their own schedule.

Every row of ``sitemaps`` has a next read time (``crawler.core.sitemap_schedule``). The reader
claims due files (``db.claim_due``: under a new fencing epoch, so two daemons never read one
file at once and a reader whose claim ran out writes nothing), groups them by host, and reads
each host's under the host's lease (``crawler.db.hostlease``, as the seeder takes it). Under
the lease, a file is fetched like a page: after the host's politeness clock and backoff,
through robots.txt and the address policy, conditionally (a 304 is an unchanged file), each
request moving the politeness clock by the host's delay.

A file whose listing changed (``listing_digest``) is compared with what it listed before
(``crawler.db.sitemaps.apply_listing``): new URLs join the collection, URLs no sitemap of
their host lists any more are flagged unlisted, and the dates it claims are stored as hints.
An index's new files join as sitemaps of their own, due at once; those it no longer names are
forgotten with what they listed. The feeds pages announce join as sitemaps of their host
(``crawler.db.sitemaps.page_feeds``) and are read here like the others.

One process per machine runs the reader (the one that runs the planner); the claims make
any number of machines safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Callable

import aiohttp
import asyncpg

from crawler.core import model
from crawler.core.hostid import HostIdCollision
from crawler.core.model import Observation, Outcome
from crawler.core.patterns import UrlFilter, global_filter
from crawler.core.robots import (
    RobotsPolicy,
    decide_robots,
    needs_fetch,
    product_token,
    rules_changed,
)
from crawler.core.schedule import SchedulePolicy
from crawler.core.sitemap_schedule import SitemapRead as ReadSeen
from crawler.core.sitemap_schedule import after_read, listing_digest
from crawler.core.sitemaps import (
    ATOM,
    CUT_DEPTH,
    INDEX,
    MAX_INDEX_DEPTH,
    RSS,
    Entry,
    location_allows,
    location_prefixes,
)
from crawler.daemon.hosthold import LEASE_SECONDS, HostHold, wait_for_lease
from crawler.db import frontier
from crawler.db import sitemaps as db
from crawler.db.errors import retried_later
from crawler.db.frontier import Lease
from crawler.db.hostlease import hold_host
from crawler.metrics import Events
from crawler.net.fetch import fetch_robots
from crawler.net.session import host_session
from crawler.net.sitemapfetch import SitemapRead, read_sitemap
from crawler.settings import Settings

log = logging.getLogger(__name__)

CLAIM_SECONDS = 900.0  # a claimed file is this reader's for so long (host waits and reads)
CLAIM_BATCH = 16  # at HOSTS_AT_ONCE, each host waited for at most HOST_WAIT_SECONDS
IDLE_SECONDS = 5.0  # longest sleep: files registered by the seeder or a page are seen then
HOSTS_AT_ONCE = 2  # each holds a connection of the daemon's pool while it reads
# A host another process holds is asked for again this often, for at most this long, then
# its files wait BUSY_RETRY_SECONDS: a host drained by the fetch loop is given back after each
# batch of URLs, and free until its politeness clock allows the next request.
HOST_POLL_SECONDS = 0.2
HOST_WAIT_SECONDS = 60.0
BUSY_RETRY_SECONDS = 5.0
# A host whose politeness clock or backoff is further away than this is given back, its
# files due then: the lease is not held through a long wait.
MAX_TURN_WAIT_SECONDS = 30.0
FEED = "feed"
SITEMAP = "sitemap"


def fetch_kind(kind: str | None, source: str | None) -> str:
    """The ``kind`` label of a read in the fetch metrics."""
    if kind in (RSS, ATOM) or (kind is None and source == db.PAGE):
        return FEED
    return SITEMAP


def _observation(read: SitemapRead) -> Observation:
    """A read as the fetch metrics count it (no change of a page: ``changed`` unset)."""
    return Observation(
        fetched_at=read.fetched_at, outcome=Outcome(read.outcome), status=read.status,
        size_bytes=read.size, duration_seconds=read.duration_seconds, simhash=None,
        content_hash=None, simhash_distance=None, changed=None, content_changed=None,
        last_modified=read.last_modified, error_kind=read.error_kind,  # type: ignore[arg-type]
        truncated=False,
    )


def _accepted(
    entries: list[Entry], allowed: tuple[str, ...], patterns: UrlFilter, source: str,
) -> tuple[list[str], list[tuple[str, str, float, str]], int]:
    """The URLs of a listing its location and the URL patterns allow, each once, their
    date hints (url, kind, claimed, ``source``), and how many entries were turned away."""
    accepted: dict[str, None] = {}
    hints: dict[tuple[str, str, float, str], None] = {}
    rejected = 0
    for entry in entries:
        if not entry.url.startswith(allowed) or patterns.rejection(entry.url) is not None:
            rejected += 1
            continue
        accepted[entry.url] = None
        for hint in entry.hints:
            hints[(entry.url, hint.kind, hint.claimed, source)] = None
    return list(accepted), list(hints), rejected


class SitemapKeeper:
    """Reads due sitemaps and feeds, one host lease at a time per host, until cancelled."""

    def __init__(self, pool: asyncpg.Pool, session: aiohttp.ClientSession, settings: Settings,
                 events: Events, owner: str, policy: Callable[[], SchedulePolicy]) -> None:
        self.pool = pool
        self.session = session
        self.settings = settings
        self.events = events
        self.owner = f"{owner}:sitemaps"
        self.policy = policy
        self.filter = global_filter(settings.include, settings.exclude)
        self.token = product_token(settings.user_agent)

    async def run(self) -> None:
        while True:
            wait = IDLE_SECONDS
            with retried_later("the sitemap reader", log):
                wait = await self.read_due()
            await asyncio.sleep(wait)

    async def read_due(self) -> float:
        """Read what is due now; how long to sleep before looking again."""
        rows = await db.claim_due(self.pool, CLAIM_BATCH, CLAIM_SECONDS)
        if not rows:
            due = await db.next_due(self.pool)
            return IDLE_SECONDS if due is None else min(IDLE_SECONDS, max(0.05, due - time.time()))
        by_host: dict[int, list[db.SitemapRow]] = defaultdict(list)
        for row in rows:
            by_host[row.host_id].append(row)
        gate = asyncio.Semaphore(HOSTS_AT_ONCE)

        async def one(host_rows: list[db.SitemapRow]) -> None:
            async with gate:
                try:
                    await self.read_host(host_rows)
                except Exception:  # one host's trouble is not the other hosts'
                    log.exception("reading the sitemaps of %s failed; they are read again "
                                  "once their claim runs out", host_rows[0].origin)

        await asyncio.gather(*(one(r) for r in by_host.values()))
        return 0.0

    async def read_host(self, rows: list[db.SitemapRow]) -> None:
        """Read one host's due files under its lease (waited for a while if another holds
        it); files not read are postponed."""
        leased = await wait_for_lease(self.pool, rows[0].host_id, self.owner, HOST_WAIT_SECONDS,
                                      HOST_POLL_SECONDS)
        if leased is None:
            await self._postpone(self.pool, rows, time.time() + BUSY_RETRY_SECONDS)
            return
        async with self.pool.acquire() as conn:
            hold = HostHold(conn, self.owner, rows[0].host_id, rows[0].origin,
                            leased["lease_epoch"], leased, self.settings)
            try:
                async with host_session(self.session) as session:
                    await self._read_all(conn, hold, session, rows)
            finally:
                await asyncio.shield(self._give_back(hold))

    async def _give_back(self, hold: HostHold) -> None:
        """The host's lease given back, when it can be (at shutdown the pool may close
        first): otherwise it expires."""
        with contextlib.suppress(Exception):
            await hold_host(self.pool, hold.host, hold.owner, hold.epoch, hold.next_request,
                            LEASE_SECONDS, True)

    async def _postpone(self, conn: asyncpg.Connection | asyncpg.Pool,
                        rows: list[db.SitemapRow], at: float) -> None:
        for row in rows:
            await db.postpone(conn, row, at)

    async def _read_all(self, conn: asyncpg.Connection, hold: HostHold,
                        session: aiohttp.ClientSession, rows: list[db.SitemapRow]) -> None:
        for done, row in enumerate(rows):
            wait = hold.next_request - time.time()
            if wait > MAX_TURN_WAIT_SECONDS:
                await self._postpone(conn, rows[done:], hold.next_request)
                return
            if hold.refused is None:
                await self._robots(conn, hold, session)
            await self.read_one(hold, session, row)

    async def _robots(self, conn: asyncpg.Connection, hold: HostHold,
                      session: aiohttp.ClientSession) -> None:
        """The host's robots.txt, fetched (a request like any other) and stored when stale."""
        state = hold.robots_state
        if not needs_fetch(state, time.time()):
            return
        await hold.turn()
        fetched = await fetch_robots(session, hold.origin, self.settings)
        new_state = decide_robots(state, fetched, time.time(),
                                  cache_seconds=self.settings.robots_cache_seconds)
        hold.robots_state = new_state
        hold.policy = RobotsPolicy.from_state(new_state, self.token)
        crawl_delay, _ = hold.policy.crawl_delay(self.settings.max_crawl_delay)
        hold.stored_delay = crawl_delay or 0.0
        next_request = time.time() + hold.delay
        lease = Lease(hold.host, hold.owner, hold.epoch, time.monotonic() + LEASE_SECONDS / 2)
        await frontier.store_robots(conn, lease, new_state, crawl_delay, next_request,
                                    rules_changed=rules_changed(state, new_state))
        followed = await db.follow_robots(conn, hold.host, hold.origin,
                                          state.body if state is not None else None,
                                          new_state.body)
        if followed:
            log.info("robots.txt of %s names new sitemaps, read from now on: %s",
                     hold.origin, ", ".join(followed))
        await hold.sent()

    async def read_one(self, hold: HostHold, session: aiohttp.ClientSession,
                       row: db.SitemapRow) -> None:
        """Read one file under the host's lease and record what it changed."""
        now = time.time()
        if hold.refused is not None:
            await self.record(row, ReadSeen(now, Outcome.BLOCKED), error=f"host refused: "
                              f"{hold.refused}")
            return
        if not hold.policy.allowed(row.url):
            expires = hold.robots_state.expires_at if hold.robots_state is not None else None
            await self.record(row, ReadSeen(now, Outcome.DISALLOWED),
                              error="disallowed by robots.txt", robots_expires_at=expires)
            return
        await hold.turn()
        try:
            read = await read_sitemap(session, row.url, self.settings, etag=row.state.etag,
                                      last_modified=row.state.last_modified)
        finally:
            await hold.sent()
        self.events.fetch_completed(_observation(read),
                                    fetch_kind(read.kind or row.kind, row.source))
        await self.apply(row, read)

    async def apply(self, row: db.SitemapRow, read: SitemapRead) -> None:
        """A read's effect: on the collection when its listing changed, then on its row."""
        outcome = Outcome(read.outcome)
        ok = outcome == model.OK
        # A 50,000-URL listing is tens of milliseconds of Python: off the fetch loop's thread.
        digest = await asyncio.to_thread(listing_digest, read.entries) if ok else None
        seen = ReadSeen(read.fetched_at, outcome, read.status, digest, read.etag,
                        read.last_modified)
        error = None
        if outcome not in (model.OK, model.NOT_MODIFIED):
            error = read.error_kind or (f"http_{read.status}" if read.status else read.outcome)
        elif ok:
            error = read.error
        if not ok or digest == row.state.digest:
            await self.record(row, seen, error=error, cut=read.cut if ok else None,
                              repaired=read.repaired if ok else None, kind=read.kind)
            return
        whole = read.kind is not None and read.error is None and read.cut is None
        cut = read.cut
        if read.kind == INDEX:
            counts = await self._index(row, read, whole)
            if row.depth >= MAX_INDEX_DEPTH:
                cut = cut or CUT_DEPTH
        else:
            counts = await self._listing(row, read, whole)
        await self.record(row, seen, error=error, cut=cut, repaired=read.repaired,
                          kind=read.kind, **counts)

    async def _index(self, row: db.SitemapRow, read: SitemapRead,
                     whole: bool) -> dict[str, int]:
        vouching = row.vouching_origin
        children = [e.url for e in read.entries
                    if e.url != row.url and location_allows(row.url, e.url, vouching)]
        rejected = sum(1 for e in read.entries if not location_allows(row.url, e.url, vouching))
        counts = {"listed": len(read.entries), "added": 0, "dropped": 0, "rejected": rejected}
        if row.depth >= MAX_INDEX_DEPTH:  # the files it names are not read (the seeder's rule)
            return counts
        try:
            added = await db.register(self.pool, children, robots_origin=row.robots_origin,
                                      depth=row.depth + 1, source=db.INDEX, found_on=row.url)
        except HostIdCollision as collision:
            log.warning("sitemap index %s: %s", row.url, collision)
            added = []
        counts["added"] = len(added)
        if whole:
            forgotten, unlisted = await db.forget_children(self.pool, row, children,
                                                           read.fetched_at)
            counts["dropped"] = forgotten
            if forgotten:
                log.info("sitemap index %s: %d files no longer listed, %d URLs unlisted",
                         row.url, forgotten, unlisted)
        return counts

    async def _listing(self, row: db.SitemapRow, read: SitemapRead,
                       whole: bool) -> dict[str, int]:
        accepted, hints, rejected = await asyncio.to_thread(
            _accepted, read.entries, location_prefixes(row.url, row.vouching_origin),
            self.filter, row.url)
        change = await db.apply_listing(self.pool, row, accepted, whole=whole,
                                        now=read.fetched_at, seed_new=True)
        if hints:
            async with self.pool.acquire() as conn:
                await db.record_hints(conn, hints, read.fetched_at, self.settings)
        if change.added or change.dropped:
            log.info("sitemap %s: %d listed, %d newly listed (%d new URLs), %d no longer "
                     "listed (%d URLs unlisted)", row.url, len(accepted), change.added,
                     change.seeded, change.dropped, change.unlisted)
        return {"listed": len(read.entries), "added": change.added, "dropped": change.dropped,
                "rejected": rejected}

    async def record(self, row: db.SitemapRow, seen: ReadSeen, *, error: str | None = None,
                     cut: str | None = None, repaired: int | None = None,
                     kind: str | None = None, robots_expires_at: float | None = None,
                     **counts: int) -> None:
        """The file's row after ``seen``, with its next read time."""
        after = after_read(row.state, seen, self.policy(),
                           max_interval_seconds=self.settings.sitemap_max_interval,
                           robots_expires_at=robots_expires_at)
        values = db.read_values(after, read_at=seen.fetched_at, status=seen.status, kind=kind,
                                cut=cut, error=error, repaired=repaired)
        values.update(counts)
        if not await db.record_read(self.pool, row, values):
            log.warning("sitemap %s: read, but another reader claimed it meanwhile; its "
                        "record is that reader's", row.url)
