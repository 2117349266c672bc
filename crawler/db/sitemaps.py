"""Sitemaps and feeds in PostgreSQL: what each file lists, and when it is read next.

Shared by the daemon's reader (``crawler.daemon.sitemaps``), which reads due files again, and
the seeder (``crawler seed --sitemaps``), which reads them the first time. A URL a file lists
loses its unlisted flag; after a whole read (not cut, not invalid) the URLs it no longer lists
are forgotten, and each that no sitemap of its host lists any more is flagged
(``urls.unlisted_at``). The feeds a fetched page announces join as sitemaps of its host when
the host is read through its sitemaps already: at most ``MAX_PAGE_FEEDS`` a host, since a
blog announces a comment feed on every post.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from crawler.core.estimate import ChangeHistory
from crawler.core.hostid import HostIdCollision, host_id, origin_of
from crawler.core.sitemap_schedule import AfterRead, SitemapState
from crawler.core.sitemaps import robots_sitemaps
from crawler.core.transition import Transition
from crawler.db import frontier
from crawler.db.frontier import HostClaim, finite
from crawler.db.hints import record_claims, refresh_due
from crawler.db.queries import QUERIES
from crawler.db.record import ExtraWrite
from crawler.settings import Settings

# How a sitemap was found (``sitemaps.source``).
ROBOTS = "robots"  # a Sitemap: line of the host's robots.txt
SEED = "seed"  # given to `crawler seed --sitemap`, or the /sitemap.xml of a site without one
INDEX = "index"  # named by a sitemap index (found_on)
PAGE = "page"  # a feed a page of the host announces (found_on)

# Sitemaps one host may have: as many files as one seeding run reads.
MAX_SITEMAPS_PER_HOST = 1000
MAX_PAGE_FEEDS = 16
_KNOWN_FEEDS_SECONDS = 600.0
_KNOWN_FEEDS_MAX = 4096


def sitemap_id(url: str) -> int:
    """A sitemap's key in ``sitemap_urls``: its URL's hash, as SQL's crawler_host_id(url)."""
    return host_id(url)


@dataclass(frozen=True, slots=True)
class SitemapRow:
    """One row of ``sitemaps`` as the reader claims it (or the seeder reads it)."""

    host_id: int
    url: str
    robots_origin: str | None
    kind: str | None
    depth: int
    source: str | None
    found_on: str | None
    epoch: int | None  # the reader's claim; None for the seeder, which writes unfenced
    state: SitemapState
    listed: int = 0

    @property
    def origin(self) -> str:
        return origin_of(self.url)

    @property
    def vouching_origin(self) -> str | None:
        """The origin any of whose URLs this file may list wherever it lives: the one whose
        robots.txt named it (sitemaps.org cross-submission), or for a feed a page announced,
        the page's own (the site named the feed on its own page)."""
        if self.robots_origin is not None:
            return self.robots_origin
        if self.source == PAGE and self.found_on:
            return origin_of(self.found_on)
        return None

    @property
    def member_hosts(self) -> list[int]:
        """The hosts of the URLs it may list: its own, and its vouching origin's."""
        return sorted({host_id(o) for o in (self.origin, self.vouching_origin) if o is not None})


def row_from_record(record: asyncpg.Record, *, fenced: bool = True) -> SitemapRow:
    """A ``claim_due_sitemaps`` (or ``sitemap_state``) row."""
    state = SitemapState(
        host_id=record["host_id"], answered_at=finite(record["answered_at"]),
        digest=None if record["digest"] is None else bytes(record["digest"]),
        reads=record["reads"], changes=record["changes"],
        consecutive_failures=record["consecutive_failures"],
        history=ChangeHistory(tuple(record["changed_intervals_days"] or ()),
                              record["unchanged_days"], record["intervals_observed"]),
        change_rate_per_day=record["change_rate_per_day"], etag=record["etag"],
        last_modified=finite(record["last_modified"]),
    )
    return SitemapRow(
        host_id=record["host_id"], url=record["url"], robots_origin=record["robots_origin"],
        kind=record["kind"], depth=record["depth"], source=record["source"],
        found_on=record["found_on"], epoch=record["lease_epoch"] if fenced else None,
        state=state, listed=record["listed"],
    )


async def claim_due(conn: asyncpg.Connection | asyncpg.Pool, count: int,
                    seconds: float) -> list[SitemapRow]:
    """Up to ``count`` due sitemaps, the reader's for ``seconds``."""
    rows = await conn.fetch(QUERIES["claim_due_sitemaps"], count, seconds)
    return [row_from_record(r) for r in rows]


async def next_due(conn: asyncpg.Connection | asyncpg.Pool) -> float | None:
    """When the next sitemap falls due (epoch seconds), None when none is scheduled."""
    return finite(await conn.fetchval(QUERIES["sitemaps_next_due"]))


async def postpone(conn: asyncpg.Connection | asyncpg.Pool, row: SitemapRow,
                   at: float) -> None:
    """A claimed sitemap not read now: due at ``at`` instead."""
    await conn.execute(QUERIES["sitemap_postpone"], row.host_id, row.url, row.epoch, at)


async def sitemap_state(conn: asyncpg.Connection | asyncpg.Pool, url: str) -> SitemapRow | None:
    """The row of sitemap ``url`` as it stands (the seeder's, unfenced)."""
    record = await conn.fetchrow(QUERIES["sitemap_state"], host_id(origin_of(url)), url)
    return None if record is None else row_from_record(record, fenced=False)


@dataclass(frozen=True, slots=True)
class ListingChange:
    """What a read changed in the collection: URLs seeded (new to the collection), URLs the
    file lists that it did not before, URLs it no longer lists, and the URLs flagged
    unlisted (no sitemap of their host lists them) or no longer flagged."""

    seeded: int = 0
    added: int = 0
    dropped: int = 0
    unlisted: int = 0
    relisted: int = 0


class HostKeys:
    """Host keys of normalised URLs, one SHA-256 per origin. A listing's URLs come in runs
    of one origin: a URL that starts with the last one's ``origin/`` has its key at once."""

    def __init__(self) -> None:
        self.keys: dict[str, int] = {}
        self.prefix = "\0"  # no URL starts with it
        self.key = 0

    def of(self, url: str) -> int:
        if url.startswith(self.prefix):
            return self.key
        scheme, rest = url.split("://", 1)
        origin = f"{scheme}://{rest.split('/', 1)[0]}"
        key = self.keys.get(origin)
        if key is None:
            key = self.keys[origin] = host_id(origin)
        self.prefix, self.key = origin + "/", key
        return key


# Hints per statement, each in a transaction that locks their hosts: a 50,000-URL file in two.
HINT_BATCH = 25_000
Hint = tuple[str, str, float, str]  # url, kind, claimed (epoch seconds), source file


async def record_hints(conn: asyncpg.Connection, hints: list[Hint], now: float,
                       settings: Settings) -> None:
    """Date hints (url, kind, claimed, source file) of known URLs, in ``url_hints``; what
    they announce is scheduled by how far their host's source is trusted
    (``crawler.db.hints.record_claims``). Nothing under ``CRAWLER_HINTS=off``: a URL without
    hints is never tested, and its schedule is its fetches' alone."""
    if not settings.hints:
        return
    keys = HostKeys()
    moved: set[int] = set()
    for start in range(0, len(hints), HINT_BATCH):
        batch = hints[start : start + HINT_BATCH]
        urls, kinds, claimed, sources = map(list, zip(*batch, strict=True))
        moved |= await record_claims(conn, urls, [keys.of(u) for u in urls], kinds, claimed,
                                     sources, now)
    if moved:
        await refresh_due(conn, moved)


async def apply_listing(
    pool: asyncpg.Pool, row: SitemapRow, urls: Sequence[str], *, whole: bool, now: float,
    seed_new: bool,
) -> ListingChange:
    """Record that ``row``'s file lists ``urls`` (normalised, accepted by its location and the URL
    patterns) as read at ``now``; ``whole``: the read was complete, so what it does not list is no
    longer listed. With ``seed_new`` the URLs it did not list before are seeded first (the seeder
    seeds every URL itself). The difference with the last read is taken here, on id sets, and
    written by statements each driven by the ids they change: none of them joins two large sets, so
    no plan (on statistics not gathered yet, just after a seed) can make one quadratic."""
    keys = HostKeys()
    url_hosts = [keys.of(u) for u in urls]
    hosts = sorted(set(row.member_hosts) | set(url_hosts))
    key = sitemap_id(row.url)
    seeded = 0
    if seed_new and urls:
        new = [r["url"] for r in await pool.fetch(
            QUERIES["sitemap_new_listings"], key, list(urls), url_hosts, hosts)]
        if new:
            try:
                result = await frontier.seed(pool, dict.fromkeys(new, 1.0), now)
                seeded = result.inserted
            except HostIdCollision:
                pass  # the colliding URLs stay unknown, and out of the listing
    async with pool.acquire() as conn, conn.transaction():
        members = {(r["url_id"], r["host_id"])
                   for r in await conn.fetch(QUERIES["sitemap_members"], key, hosts)}
        unlisted_now = {(r["id"], r["host_id"])
                        for r in await conn.fetch(QUERIES["unlisted_ids"], hosts)}
        if not members and not unlisted_now:
            # Nothing listed before, nothing to unflag: the listing is all there is to write.
            added_count = await conn.fetchval(QUERIES["sitemap_list_new"], key, list(urls),
                                              url_hosts, hosts) if urls else 0
            return ListingChange(seeded, added_count)
        listed = {(r["id"], r["host_id"]) for r in await conn.fetch(
            QUERIES["sitemap_listed_ids"], list(urls), url_hosts, hosts)} if urls else set()
        flagged = unlisted_now & listed
        added = sorted(listed - members)
        if added or flagged:
            await conn.execute(QUERIES["sitemap_list"], key, [a[0] for a in added],
                               [a[1] for a in added], hosts, [f[0] for f in flagged],
                               [f[1] for f in flagged])
        dropped = sorted(members - listed) if whole else []
        unlisted = 0
        if dropped:
            unlisted = await conn.fetchval(QUERIES["sitemap_unlist"], key,
                                           [d[0] for d in dropped], [d[1] for d in dropped],
                                           hosts, now)
    return ListingChange(seeded, len(added), len(dropped), unlisted, len(flagged))


def read_values(
    after: AfterRead, *, read_at: float, status: int | None, kind: str | None,
    source: str | None = None, found_on: str | None = None, cut: str | None = None,
    error: str | None = None, repaired: int | None = None, listed: int | None = None,
    added: int | None = None, dropped: int | None = None, rejected: int | None = None,
) -> dict[str, Any]:
    """The ``sitemap_read_record`` values of a read: its answer, and the state and next read
    time ``after`` gives. None leaves a count (or the kind, source and where it was found)
    as it was."""
    state, schedule = after.state, after.schedule
    return {
        "kind": kind, "source": source, "found_on": found_on, "read_at": read_at,
        "status": status, "listed": listed, "added": added, "dropped": dropped,
        "rejected": rejected, "cut": cut, "error": error, "etag": state.etag,
        "last_modified": state.last_modified, "next_read_at": schedule.next_fetch_at,
        "answered_at": state.answered_at,
        "digest": None if state.digest is None else state.digest.hex(),
        "changed": bool(after.changed), "repaired": repaired, "reads": state.reads,
        "changes": state.changes, "consecutive_failures": state.consecutive_failures,
        "changed_intervals_days": list(state.history.changed_intervals_days),
        "unchanged_days": state.history.unchanged_days,
        "intervals_observed": state.history.fetches,
        "change_rate_per_day": state.change_rate_per_day,
        "read_rate_per_day": schedule.fetch_rate_per_day,
    }


async def record_read(conn: asyncpg.Connection | asyncpg.Pool, row: SitemapRow,
                      values: dict[str, Any]) -> bool:
    """Write ``values`` on ``row``; False when another reader took its claim over."""
    written = await conn.fetchval(QUERIES["sitemap_read_record"], row.host_id, row.url,
                                  row.epoch, json.dumps(values))
    return written is not None


async def record_file(conn: asyncpg.Connection | asyncpg.Pool, values: dict[str, Any]) -> None:
    """A file as the seeder read it (``sitemap_record``: ``values`` its ``sitemaps`` row, times
    in epoch seconds), made or updated; its read and schedule are ``record_read``'s."""
    await conn.execute(QUERIES["sitemap_record"], json.dumps(values))


async def ensure_hosts(conn: asyncpg.Connection | asyncpg.Pool, urls: Iterable[str]) -> None:
    """The hosts of ``urls`` made known (a sitemap row needs its host's); raises
    ``HostIdCollision`` for an origin whose key another origin holds."""
    for origin in sorted({origin_of(u) for u in urls}):
        key = host_id(origin)
        known = await conn.fetchval(QUERIES["sitemap_host"], key, origin)
        if known != origin:
            raise HostIdCollision(key, origin, str(known))


async def register(
    conn: asyncpg.Connection | asyncpg.Pool, urls: Sequence[str], *, robots_origin: str | None,
    depth: int, source: str, found_on: str | None,
) -> list[str]:
    """Sitemaps found by reading an index (or a page), due at once; those that were new."""
    if not urls:
        return []
    await ensure_hosts(conn, urls)
    rows = await conn.fetch(
        QUERIES["sitemap_register"], [host_id(origin_of(u)) for u in urls], list(urls),
        robots_origin, depth, source, found_on, MAX_SITEMAPS_PER_HOST,
    )
    return [r["url"] for r in rows]


async def follow_robots(conn: asyncpg.Connection | asyncpg.Pool, host: int, origin: str,
                        before: str | None, body: str | None) -> list[str]:
    """A re-read of ``origin``'s robots.txt (``before``: the body it replaces, ``body``: the
    new one): the ``Sitemap:`` lines it adds join as the host's sitemaps, due at once, when
    the host is read through its sitemaps already (a host seeded from URLs keeps being
    crawled from them alone). Returns the sitemaps that were new."""
    known = set(robots_sitemaps(before or ""))
    added = [url for url in robots_sitemaps(body or "") if url not in known]
    if not added or not await conn.fetchval(QUERIES["host_reads_sitemaps"], host):
        return []
    try:
        return await register(conn, added, robots_origin=origin, depth=0, source=ROBOTS,
                              found_on=None)
    except HostIdCollision:
        return []  # a line on an origin whose key another holds: not followed


async def forget_children(
    conn: asyncpg.Connection | asyncpg.Pool, index: SitemapRow, listed: Sequence[str],
    now: float,
) -> tuple[int, int]:
    """The sitemaps ``index`` named and no longer lists (``listed``: those it lists now) are
    forgotten with what they listed, and theirs in turn when they were indexes: how many
    files, and how many URLs that left unlisted."""
    forgotten = unlisted = 0
    pending: list[tuple[SitemapRow, Sequence[str]]] = [(index, listed)]
    while pending:
        parent, still = pending.pop()
        rows = await conn.fetch(QUERIES["forget_sitemaps"], parent.member_hosts, parent.url,
                                list(still), parent.member_hosts, now)
        forgotten += len(rows)
        if rows:  # the count of the whole statement, on every row
            unlisted += rows[0]["unlisted"]
        for r in rows:
            if r["kind"] == "sitemapindex":
                host = host_id(origin_of(r["url"]))
                pending.append((SitemapRow(
                    host_id=host, url=r["url"], robots_origin=parent.robots_origin,
                    kind=r["kind"], depth=parent.depth + 1, source=INDEX, found_on=parent.url,
                    epoch=None, state=SitemapState(host_id=host)), ()))
    return forgotten, unlisted


class _KnownFeeds:
    """Feeds this process registered (or found refused) lately: a blog announces its feed
    on every page, and one write per feed and process in ``_KNOWN_FEEDS_SECONDS`` is enough."""

    def __init__(self) -> None:
        self.seen: OrderedDict[str, float] = OrderedDict()

    def fresh(self, url: str, now: float) -> bool:
        at = self.seen.get(url)
        return at is not None and now - at < _KNOWN_FEEDS_SECONDS

    def add(self, url: str, now: float) -> None:
        self.seen[url] = now
        self.seen.move_to_end(url)
        while len(self.seen) > _KNOWN_FEEDS_MAX:
            self.seen.popitem(last=False)


_known_feeds = _KnownFeeds()


def page_feeds(host: HostClaim, t: Transition) -> ExtraWrite | None:
    """The write that registers the feeds page ``t`` announces on its own host, in the
    fetch's transaction; None when it announces none not registered lately (nearly every
    page: no write at all)."""
    if not t.feeds:
        return None
    now = t.observation.fetched_at
    page = t.before.url
    feeds = [f for f in t.feeds
             if origin_of(f) == host.origin and not _known_feeds.fresh(f, now)]
    if not feeds:
        return None

    async def write(conn: asyncpg.Connection, _t: Transition) -> None:
        await conn.execute(QUERIES["register_page_feeds"], host.host_id, feeds, page,
                           MAX_PAGE_FEEDS)
        for feed in feeds:
            _known_feeds.add(feed, now)

    return write
