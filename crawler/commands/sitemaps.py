"""`crawler seed --sitemaps ORIGIN` and `crawler seed --sitemap URL` (issue 37): a site's
URLs taken from its sitemaps and feeds, then seeded in bulk like `seed --file`.

Politeness is the daemon's: before any request to a host this reader takes the host's lease
exactly as a daemon claims one (``sitemap_lease_host``: no daemon sends that host a request
while it is held, and a host a daemon holds is waited for), waits for the host's politeness
clock (``hosts.next_request_at``, its backoff), and after each request moves that clock by
the host's delay (``CRAWLER_POLITENESS_DELAY``, or its robots.txt Crawl-delay when longer).
Requests go one at a time, sequentially, through ``crawler.net.fetch`` (address policy,
timeouts, caps). Sitemaps robots.txt disallows are not fetched; robots.txt is read from the
host's cache when fresh, else fetched (a request like any other).

Bounds: each file is read under the protocol's limits (``crawler.core.sitemaps``); indexes
are followed ``MAX_INDEX_DEPTH`` levels deep, each file at most once (a loop is counted,
never followed), at most ``MAX_FILES`` files per run. A file cut at a limit or invalid keeps
what it listed before the fault, and is recorded as such in ``sitemaps``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import asyncpg

from crawler.core import model
from crawler.core.hostid import HostIdCollision, host_id, origin_of
from crawler.core.patterns import UrlFilter, rejection
from crawler.core.robots import RobotsPolicy, RobotsState, decide_robots, product_token
from crawler.core.sitemaps import (
    INDEX,
    MAX_INDEX_DEPTH,
    default_sitemap,
    location_allows,
    robots_sitemaps,
)
from crawler.db import frontier
from crawler.db.queries import QUERIES
from crawler.net.fetch import FetchLimits, fetch_robots
from crawler.net.sitemapfetch import SitemapRead, read_sitemap
from crawler.settings import Settings

# What one file added to a run: the URLs not taken from an earlier file, and its date hints.
FileTaken = Callable[[list[str], list[tuple[str, str, float, str]]], Awaitable[None]]

MAX_FILES = 1000  # sitemap files read per run: 5 * 10^7 URLs at the protocol's 50,000 each
LEASE_SECONDS = 120.0  # renewed after every request; longer than any one request may take
LEASE_POLL_SECONDS = 0.5  # how often a host another process holds is asked for again
CUT_DEPTH = "max_depth"


@dataclass(slots=True)
class FileReport:
    """One sitemap or feed as read: what it was, what it listed and what became of it."""

    url: str
    depth: int
    robots_origin: str | None
    read: SitemapRead | None = None
    listed: int = 0
    taken: int = 0
    rejected: int = 0
    cut: str | None = None
    error: str | None = None


@dataclass(slots=True)
class Harvest:
    """What a run found: the URLs to seed, their date hints (url, kind, claimed, source), the
    files read, and what was turned away and why."""

    urls: dict[str, None] = field(default_factory=dict)
    hints: dict[tuple[str, str, float, str], None] = field(default_factory=dict)
    files: list[FileReport] = field(default_factory=list)
    off_location: int = 0
    filtered: dict[str, int] = field(default_factory=dict)
    loops: int = 0
    too_deep: int = 0
    skipped_files: int = 0


class HostHold:
    """This reader's lease on one host: its politeness clock, delay and robots.txt policy."""

    def __init__(self, conn: asyncpg.Connection, owner: str, host: int, origin: str,
                 epoch: int, row: asyncpg.Record, settings: Settings) -> None:
        self.conn = conn
        self.owner = owner
        self.host = host
        self.origin = origin
        self.epoch = epoch
        self.settings = settings
        self.refused = row["refused_reason"] or ("paused" if row["paused"] else None)
        self.next_request = max(_finite(row["next_request_at"]), _finite(row["backoff_until"]))
        self.stored_delay = row["crawl_delay_seconds"] or 0.0
        self.robots_state: RobotsState | None = None
        if row["robots_expires_at"] is not None and row["robots_fetched_at"] is not None:
            self.robots_state = RobotsState(
                body=row["robots_body"], status=row["robots_status"],
                fetched_at=row["robots_fetched_at"], good_at=row["robots_good_at"],
                expires_at=row["robots_expires_at"],
                unreachable_since=row["robots_unreachable_since"],
            )
        self.policy = RobotsPolicy.from_state(self.robots_state, product_token(settings.user_agent))

    @property
    def delay(self) -> float:
        crawl_delay, _ = self.policy.crawl_delay(self.settings.max_crawl_delay)
        return max(self.settings.politeness_delay, crawl_delay or 0.0, self.stored_delay)

    async def turn(self) -> None:
        """Wait until the host may be sent a request."""
        wait = self.next_request - time.time()
        if wait > 0:
            await asyncio.sleep(wait)

    async def sent(self) -> None:
        """A request ended now: the next one waits the host's delay; the lease is renewed."""
        self.next_request = time.time() + self.delay
        await self._hold(release=False)

    async def release(self) -> None:
        await self._hold(release=True)

    async def _hold(self, *, release: bool) -> None:
        held = await self.conn.fetchval(QUERIES["sitemap_hold_host"], self.host, self.owner,
                                        self.epoch, self.next_request, LEASE_SECONDS, release)
        if held is None and not release:
            raise RuntimeError(f"lost the lease on {self.origin}")

    async def robots(self, session: aiohttp.ClientSession, limits: FetchLimits) -> None:
        """The host's robots.txt, fetched (a request like any other) unless cached and fresh.
        Not stored: the daemon keeps its own copy current."""
        now = time.time()
        if self.robots_state is not None and now < self.robots_state.expires_at:
            return
        await self.turn()
        fetched = await fetch_robots(session, self.origin, limits)
        await self.sent()
        self.robots_state = decide_robots(self.robots_state, fetched, time.time())
        self.policy = RobotsPolicy.from_state(self.robots_state,
                                              product_token(self.settings.user_agent))


def _finite(value: float | None) -> float:
    return value if value is not None and value == value and abs(value) != float("inf") else 0.0


async def open_host(conn: asyncpg.Connection, owner: str, origin: str,
                    settings: Settings) -> HostHold:
    """Lease ``origin``'s host (made known if need be), waiting while another holds it."""
    key = host_id(origin)
    known = await conn.fetchval(QUERIES["sitemap_host"], key, origin)
    if known != origin:
        raise HostIdCollision(key, origin, known)
    while True:
        row = await conn.fetchrow(QUERIES["sitemap_lease_host"], key, owner, LEASE_SECONDS)
        if row is not None:
            return HostHold(conn, owner, key, origin, row["lease_epoch"], row, settings)
        await asyncio.sleep(LEASE_POLL_SECONDS)


class Reader:
    """Reads sitemaps one at a time, holding one host at a time."""

    def __init__(self, conn: asyncpg.Connection, session: aiohttp.ClientSession,
                 settings: Settings, limits: FetchLimits, filters: list[UrlFilter],
                 on_file: FileTaken | None = None) -> None:
        self.conn = conn
        self.on_file = on_file
        self.session = session
        self.settings = settings
        self.limits = limits
        self.filters = filters
        self.owner = f"sitemaps-{uuid.uuid4().hex[:12]}"
        self.hold: HostHold | None = None
        self.harvest = Harvest()

    async def host(self, origin: str) -> HostHold:
        if self.hold is not None and self.hold.origin == origin:
            return self.hold
        await self.close()
        self.hold = await open_host(self.conn, self.owner, origin, self.settings)
        await self.hold.robots(self.session, self.limits)
        return self.hold

    async def close(self) -> None:
        if self.hold is not None:
            hold, self.hold = self.hold, None
            await hold.release()

    async def site_sitemaps(self, origin: str) -> list[tuple[str, str | None]]:
        """Where ``origin``'s sitemaps are: its robots.txt's ``Sitemap:`` lines (each listed
        by that origin), else /sitemap.xml."""
        hold = await self.host(origin)
        body = hold.robots_state.body if hold.robots_state is not None else None
        listed = robots_sitemaps(body or "")
        if listed:
            return [(url, origin) for url in listed]
        return [(default_sitemap(origin), None)]

    async def run(self, starts: list[tuple[str, str | None]]) -> Harvest:
        """Read ``starts`` (sitemap URL, origin whose robots.txt listed it) and everything
        their indexes lead to, within the bounds."""
        queue: deque[tuple[str, int, str | None]] = deque((u, 0, o) for u, o in starts)
        seen: set[str] = set()
        harvest = self.harvest
        while queue:
            url, depth, robots_origin = queue.popleft()
            if url in seen:
                harvest.loops += 1
                continue
            if len(seen) >= MAX_FILES:
                harvest.skipped_files += 1
                continue
            seen.add(url)
            report = FileReport(url, depth, robots_origin)
            harvest.files.append(report)
            read = await self.fetch(report)
            if read is None:
                continue
            report.listed = len(read.entries)
            report.cut, report.error = read.cut, read.error
            if read.kind == INDEX:
                if depth >= MAX_INDEX_DEPTH:
                    harvest.too_deep += len(read.entries)
                    report.cut = report.cut or CUT_DEPTH
                    continue
                for entry in read.entries:
                    if not location_allows(url, entry.url, robots_origin):
                        report.rejected += 1
                        harvest.off_location += 1
                    elif entry.url in seen:
                        harvest.loops += 1
                    else:
                        queue.append((entry.url, depth + 1, robots_origin))
                continue
            urls, hints = self.take(report, read)
            if self.on_file is not None:
                await self.on_file(urls, hints)
        await self.close()
        return harvest

    async def fetch(self, report: FileReport) -> SitemapRead | None:
        hold = await self.host(origin_of(report.url))
        if hold.refused is not None:
            report.error = f"host refused: {hold.refused}"
            return None
        if not hold.policy.allowed(report.url):
            report.error = "disallowed by robots.txt"
            return None
        await hold.turn()
        try:
            read = await read_sitemap(self.session, report.url, self.limits)
        finally:
            await hold.sent()
        report.read = read
        if read.outcome != model.OK:
            report.error = read.error_kind or (f"http_{read.status}" if read.status else
                                               read.outcome)
            return None
        return read

    def take(self, report: FileReport, read: SitemapRead
             ) -> tuple[list[str], list[tuple[str, str, float, str]]]:
        """Keep what ``read`` listed that the bounds and filters allow; returns the URLs new
        to this run and the file's date hints."""
        harvest = self.harvest
        new_urls: list[str] = []
        new_hints: list[tuple[str, str, float, str]] = []
        for entry in read.entries:
            if not location_allows(report.url, entry.url, report.robots_origin):
                report.rejected += 1
                harvest.off_location += 1
                continue
            reason = rejection(self.filters, entry.url)
            if reason is not None:
                report.rejected += 1
                harvest.filtered[reason] = harvest.filtered.get(reason, 0) + 1
                continue
            report.taken += 1
            if entry.url not in harvest.urls:
                harvest.urls[entry.url] = None
                new_urls.append(entry.url)
            for hint in entry.hints:
                key = (entry.url, hint.kind, hint.claimed, report.url)
                if key not in harvest.hints:
                    harvest.hints[key] = None
                    new_hints.append(key)
        return new_urls, new_hints


async def harvest_sitemaps(conn: asyncpg.Connection, session: aiohttp.ClientSession,
                           settings: Settings, limits: FetchLimits, filters: list[UrlFilter],
                           *, origins: list[str], sitemaps: list[str],
                           on_file: FileTaken | None = None) -> Harvest:
    """Read the sitemaps of ``origins`` (found through robots.txt) and the ``sitemaps`` given;
    ``on_file`` is awaited with what each file added, as it is read."""
    reader = Reader(conn, session, settings, limits, filters, on_file)
    try:
        starts: list[tuple[str, str | None]] = []
        for origin in origins:
            starts += await reader.site_sitemaps(origin)
        starts += [(url, None) for url in sitemaps]
        return await reader.run(starts)
    finally:
        await reader.close()


HINT_BATCH = 5000


async def record_files(conn: asyncpg.Connection, harvest: Harvest, now: float) -> None:
    """The files read, in ``sitemaps``."""
    import json

    for report in harvest.files:
        read = report.read
        row: dict[str, Any] = {
            "host_id": host_id(origin_of(report.url)), "url": report.url,
            "robots_origin": report.robots_origin, "kind": read.kind if read else None,
            "depth": report.depth, "read_at": read.fetched_at if read else now,
            "status": read.status if read else None, "listed": report.listed,
            "added": report.taken, "rejected": report.rejected, "cut": report.cut,
            "error": report.error, "etag": read.etag if read else None,
            "last_modified": read.last_modified if read else None,
        }
        await conn.execute(QUERIES["sitemap_record"], json.dumps(row))


async def record_hints(conn: asyncpg.Connection, hints: list[tuple[str, str, float, str]],
                       now: float) -> None:
    """Date hints (url, kind, claimed, source file) of known URLs, in ``url_hints``; what
    they announce is scheduled by how far their host's source is trusted (issue 38,
    ``crawler.db.hints.record_claims``)."""
    from crawler.db.hints import record_claims, refresh_due

    origin_ids: dict[str, int] = {}
    moved: set[int] = set()
    for start in range(0, len(hints), HINT_BATCH):
        batch = hints[start : start + HINT_BATCH]
        hosts = []
        for h in batch:
            origin = origin_of(h[0])
            key = origin_ids.get(origin)
            if key is None:
                key = origin_ids[origin] = host_id(origin)
            hosts.append(key)
        moved |= await record_claims(
            conn, [h[0] for h in batch], hosts, [h[1] for h in batch], [h[2] for h in batch],
            [h[3] for h in batch], now,
        )
    if moved:
        await refresh_due(conn, moved)


class Pipeline:
    """Seeds each file's URLs, then records its hints, while the next file is read: parsing
    runs on a thread (``read_sitemap``) and the database works on its own core meanwhile.
    One file's writes are in flight at a time, so a file's hints always find the URLs an
    earlier file seeded."""

    def __init__(self, pool: asyncpg.Pool, importance: float,
                 progress: Callable[[int, int], None] | None,
                 after_batch: frontier.AfterBatch | None) -> None:
        self.pool = pool
        self.importance = importance
        self.progress = progress
        self.after_batch = after_batch
        self.pending: asyncio.Task[None] | None = None
        self.inserted = self.already_known = self.made_due = self.listed = self.done = 0

    async def __call__(self, urls: list[str], hints: list[tuple[str, str, float, str]]) -> None:
        await self.finish()
        self.listed += len(urls)
        self.pending = asyncio.create_task(self.write(urls, hints))

    async def write(self, urls: list[str], hints: list[tuple[str, str, float, str]]) -> None:
        offset = self.done

        def progress(done: int, _total: int) -> None:
            if self.progress is not None:
                self.progress(offset + done, self.listed)

        result = await frontier.seed(self.pool, dict.fromkeys(urls, self.importance),
                                     time.time(), progress=progress,
                                     after_batch=self.after_batch)
        self.done += len(urls)
        self.inserted += result.inserted
        self.already_known += result.already_known
        self.made_due += result.made_due
        async with self.pool.acquire() as conn:
            await record_hints(conn, hints, time.time())

    async def finish(self) -> None:
        if self.pending is not None:
            pending, self.pending = self.pending, None
            await pending

    def result(self) -> frontier.SeedResult:
        return frontier.SeedResult(self.inserted, self.already_known, made_due=self.made_due)


def describe_file(report: FileReport) -> str:
    """One line per file for the seed's summary."""
    read = report.read
    kind = read.kind if read is not None and read.kind else "?"
    parts = [f"{report.url}: {kind}, {report.listed} listed"]
    if report.rejected:
        parts.append(f"{report.rejected} rejected")
    if report.cut:
        parts.append(f"cut at {report.cut}")
    if report.error:
        parts.append(report.error)
    return ", ".join(parts)


def sitemap_args(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The origins (``--sitemaps``) and sitemap URLs (``--sitemap``) given, normalised."""
    from crawler.commands.errors import UserError
    from crawler.core.links import normalize_url

    origins: list[str] = []
    for text in args.sitemaps or []:
        url = normalize_url(text.strip())
        if url is None:
            raise UserError(f"--sitemaps: malformed origin {text.strip()!r}")
        origins.append(origin_of(url))
    urls: list[str] = []
    for text in args.sitemap or []:
        url = normalize_url(text.strip())
        if url is None:
            raise UserError(f"--sitemap: malformed URL {text.strip()!r}")
        urls.append(url)
    return origins, urls


def cmd_seed_sitemaps(args: argparse.Namespace) -> int:
    """`crawler seed --sitemaps ORIGIN` / `--sitemap URL`: read, then seed what they list."""
    import sys

    from crawler.cli import (
        SeedProgress,
        load_settings,
        plural,
        rejection_summary,
        resolve_url,
        seed_filters,
    )
    from crawler.commands.errors import PARTIAL, UserError
    from crawler.commands.watch import seed_region
    from crawler.daemon.config import fetch_limits
    from crawler.db.connect import create_pool
    from crawler.net.session import new_session
    from crawler.net.ssrf import AddressPolicy

    if args.window is not None:
        raise UserError("--sitemaps and --sitemap seed a site's listed URLs; --window N "
                        "registers a breadth-first window: seed one, then the other")
    settings = load_settings(args)
    origins, sitemaps = sitemap_args(args)
    filters = seed_filters(args, settings)

    async def go() -> tuple[Harvest, frontier.SeedResult]:
        pool = await create_pool(resolve_url(settings))
        try:
            limits = fetch_limits(settings)
            try:
                session = new_session(settings.user_agent, limits,
                                      address_policy=AddressPolicy(settings.allow_networks),
                                      ca_bundle=settings.ca_bundle)
            except ValueError as error:
                raise UserError(str(error)) from None
            async def committed_batch(batch: list[str], inserted: int) -> None:
                async with pool.acquire() as conn:
                    await seed_region(conn, batch, args, window=False)

            pipeline = Pipeline(pool, args.importance, SeedProgress(sys.stderr), committed_batch)
            try:
                async with pool.acquire() as conn:
                    harvest = await harvest_sitemaps(conn, session, settings, limits, filters,
                                                     origins=origins, sitemaps=sitemaps,
                                                     on_file=pipeline)
                await pipeline.finish()
            finally:
                await session.close()
                if pipeline.pending is not None:
                    pipeline.pending.cancel()
            for report in harvest.files:
                print(describe_file(report), file=sys.stderr)
            async with pool.acquire() as conn:
                await record_files(conn, harvest, time.time())
            # What each file lists, and when the daemon reads it again (docs/SITEMAPS.md).
            from crawler.daemon.sitemaps import record_seeded

            await record_seeded(pool, harvest, time.time(), settings)
            return harvest, pipeline.result()
        finally:
            await pool.close()

    try:
        harvest, result = asyncio.run(go())
    except HostIdCollision as collision:
        raise UserError(f"seed: {collision}") from collision
    failed = sum(1 for f in harvest.files if f.error)
    turned = dict(harvest.filtered)
    extras = [f"{harvest.off_location} outside their sitemap's location"]
    if harvest.loops:
        extras.append(f"{plural(harvest.loops, 'repeated sitemap')} not read again")
    if harvest.too_deep:
        extras.append(f"{plural(harvest.too_deep, 'sitemap')} past depth {MAX_INDEX_DEPTH}")
    if harvest.skipped_files:
        extras.append(f"{plural(harvest.skipped_files, 'sitemap')} past {MAX_FILES} files")
    print(f"read {plural(len(harvest.files), 'sitemap')} ({failed} failed): "
          f"{', '.join(extras)}{rejection_summary(turned)}; "
          f"{plural(len(harvest.hints), 'date hint')}")
    made_due = f", {result.made_due} of them due now" if result.made_due else ""
    print(f"seeded {plural(result.inserted, 'new URL')} ({result.already_known} already known"
          f"{made_due})")
    return PARTIAL if failed and not harvest.urls else 0
