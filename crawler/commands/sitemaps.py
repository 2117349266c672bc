"""`crawler seed --sitemaps ORIGIN` and `crawler seed --sitemap URL`: a site's
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
import multiprocessing
import sys
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import asyncpg

from crawler.commands.context import load_settings, plural, resolve_url
from crawler.commands.seed import SeedProgress, rejection_summary, seed_filters
from crawler.commands.watch import seed_region
from crawler.core import model
from crawler.core.hostid import HostIdCollision, host_id, origin_of
from crawler.core.links import normalize_url
from crawler.core.model import Outcome
from crawler.core.patterns import UrlFilter, rejection
from crawler.core.schedule import SchedulePolicy
from crawler.core.sitemap_schedule import SitemapRead as ReadSeen
from crawler.core.sitemap_schedule import after_read, listing_digest
from crawler.core.sitemaps import (
    CUT_DEPTH,
    INDEX,
    MAX_INDEX_DEPTH,
    default_sitemap,
    location_allows,
    location_prefixes,
    robots_sitemaps,
)
from crawler.daemon.hosthold import LEASE_POLL_SECONDS, LEASE_SECONDS, HostHold
from crawler.db import frontier
from crawler.db import sitemaps as db
from crawler.db.connect import create_pool
from crawler.db.hostlease import lease_host
from crawler.db.sitemaps import Hint, record_hints
from crawler.errors import PARTIAL, UserError
from crawler.net.session import new_session
from crawler.net.sitemapfetch import SitemapRead, parser_started, read_sitemap
from crawler.net.ssrf import AddressPolicy
from crawler.settings import Settings

# What one file added to a run, as it is read: the file, the URLs not taken from an earlier
# file, and its date hints.
FileTaken = Callable[["FileReport", list[str], list[Hint]], Awaitable[None]]

MAX_FILES = 1000  # sitemap files read per run: 5 * 10^7 URLs at the protocol's 50,000 each


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
    hints: dict[Hint, None] = field(default_factory=dict)
    files: list[FileReport] = field(default_factory=list)
    parents: dict[str, str] = field(default_factory=dict)  # file -> the index naming it first
    off_location: int = 0
    filtered: dict[str, int] = field(default_factory=dict)
    loops: int = 0
    too_deep: int = 0
    skipped_files: int = 0


async def open_host(conn: asyncpg.Connection, owner: str, origin: str,
                    settings: Settings) -> HostHold:
    """Lease ``origin``'s host (made known if need be), waiting while another holds it."""
    key = host_id(origin)
    await db.ensure_hosts(conn, [origin])
    while True:
        row = await lease_host(conn, key, owner, LEASE_SECONDS)
        if row is not None:
            return HostHold(conn, owner, key, origin, row["lease_epoch"], row, settings)
        await asyncio.sleep(LEASE_POLL_SECONDS)


class Reader:
    """Reads sitemaps one at a time, holding one host at a time."""

    def __init__(self, conn: asyncpg.Connection, session: aiohttp.ClientSession,
                 settings: Settings, filters: list[UrlFilter], on_file: FileTaken,
                 harvest: Harvest, parser: Executor) -> None:
        self.conn = conn
        self.on_file = on_file
        self.parser = parser
        self.session = session
        self.settings = settings
        self.filters = filters
        self.owner = f"sitemaps-{uuid.uuid4().hex[:12]}"
        self.hold: HostHold | None = None
        self.harvest = harvest

    async def host(self, origin: str) -> HostHold:
        if self.hold is not None and self.hold.origin == origin:
            return self.hold
        await self.close()
        self.hold = await open_host(self.conn, self.owner, origin, self.settings)
        await self.hold.robots(self.session, self.settings)
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
                    harvest.parents.setdefault(entry.url, url)
                    if not location_allows(url, entry.url, robots_origin):
                        report.rejected += 1
                        harvest.off_location += 1
                    elif entry.url in seen:
                        harvest.loops += 1
                    else:
                        queue.append((entry.url, depth + 1, robots_origin))
                continue
            await self.on_file(report, *self.take(report, read))
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
            read = await read_sitemap(self.session, report.url, self.settings,
                                      parser=self.parser)
        finally:
            await hold.sent()
        report.read = read
        if read.outcome != model.OK:
            report.error = read.error_kind or (f"http_{read.status}" if read.status else
                                               read.outcome)
            return None
        return read

    def take(self, report: FileReport, read: SitemapRead) -> tuple[list[str], list[Hint]]:
        """Keep what ``read`` listed that the bounds and filters allow; returns the URLs new
        to this run and the file's date hints."""
        harvest = self.harvest
        taken, known_hints = harvest.urls, harvest.hints
        new_urls: list[str] = []
        new_hints: list[Hint] = []
        # location_allows as prefixes of the (normalised) URLs: one C call an entry, not two
        # URL parses.
        allowed = location_prefixes(report.url, report.robots_origin)
        filters = [f for f in self.filters if not f.empty]
        source = report.url
        for entry in read.entries:
            url = entry.url
            if not url.startswith(allowed):
                report.rejected += 1
                harvest.off_location += 1
                continue
            if filters:
                reason = rejection(filters, url)
                if reason is not None:
                    report.rejected += 1
                    harvest.filtered[reason] = harvest.filtered.get(reason, 0) + 1
                    continue
            report.taken += 1
            if url not in taken:
                taken[url] = None
                new_urls.append(url)
            for hint in entry.hints:
                key = (url, hint.kind, hint.claimed, source)
                if key not in known_hints:
                    known_hints[key] = None
                    new_hints.append(key)
        return new_urls, new_hints


async def harvest_sitemaps(conn: asyncpg.Connection, session: aiohttp.ClientSession,
                           settings: Settings, filters: list[UrlFilter],
                           *, origins: list[str], sitemaps: list[str], on_file: FileTaken,
                           harvest: Harvest, parser: Executor) -> Harvest:
    """Read the sitemaps of ``origins`` (found through robots.txt) and the ``sitemaps`` given
    into ``harvest``, parsed in ``parser``; ``on_file`` is awaited with what each file added,
    as it is read."""
    reader = Reader(conn, session, settings, filters, on_file, harvest, parser)
    try:
        starts: list[tuple[str, str | None]] = []
        for origin in origins:
            starts += await reader.site_sitemaps(origin)
        starts += [(url, None) for url in sitemaps]
        return await reader.run(starts)
    finally:
        await reader.close()


def file_values(report: FileReport, now: float) -> dict[str, Any]:
    """A file as read, as its ``sitemaps`` row (``crawler.db.sitemaps.record_file``)."""
    read = report.read
    return {
        "host_id": host_id(origin_of(report.url)), "url": report.url,
        "robots_origin": report.robots_origin, "kind": read.kind if read else None,
        "depth": report.depth, "read_at": read.fetched_at if read else now,
        "status": read.status if read else None, "listed": report.listed,
        "added": report.taken, "rejected": report.rejected, "cut": report.cut,
        "error": report.error, "etag": read.etag if read else None,
        "last_modified": read.last_modified if read else None,
    }


async def record_seeded(pool: asyncpg.Pool, harvest: Harvest, report: FileReport, now: float,
                        settings: Settings, policy: SchedulePolicy) -> None:
    """A file the seeder read, recorded as the daemon records a read (its first, or one more
    when it was read before): its row, its schedule, and what it lists, so that its next
    read tells what it added and dropped. The seeder has seeded every URL itself; a URL the
    patterns turned away is no part of a listing."""
    await db.record_file(pool, file_values(report, now))
    row = await db.sitemap_state(pool, report.url)
    if row is None:
        return
    read = report.read
    if read is None:  # not requested: its host refused, or robots.txt disallowed it
        outcome = (Outcome.DISALLOWED if report.error == "disallowed by robots.txt"
                   else Outcome.BLOCKED)
        seen = ReadSeen(now, outcome)
    else:
        outcome = Outcome(read.outcome)
        # Tens of milliseconds of Python for 50,000 entries: off the event loop's thread.
        digest = (await asyncio.to_thread(listing_digest, read.entries)
                  if outcome == model.OK else None)
        seen = ReadSeen(read.fetched_at, outcome, read.status, digest, read.etag,
                        read.last_modified)
    after = after_read(row.state, seen, policy,
                       max_interval_seconds=settings.sitemap_max_interval)
    counts: dict[str, int] = {}
    if read is not None and outcome == model.OK and read.kind != INDEX:
        allowed = location_prefixes(report.url, report.robots_origin)
        taken = harvest.urls
        urls = [e.url for e in read.entries if e.url in taken and e.url.startswith(allowed)]
        whole = read.kind is not None and read.error is None and read.cut is None
        change = await db.apply_listing(pool, row, urls, whole=whole, now=seen.fetched_at,
                                        seed_new=False)
        counts = {"added": change.added, "dropped": change.dropped}
    source = db.INDEX if report.depth else (db.ROBOTS if report.robots_origin else db.SEED)
    values = db.read_values(
        after, read_at=seen.fetched_at, status=seen.status,
        kind=read.kind if read is not None else None, source=source,
        found_on=harvest.parents.get(report.url) if report.depth else None, cut=report.cut,
        error=report.error, repaired=read.repaired if read is not None else None, **counts)
    await db.record_read(pool, row, values)


class Pipeline:
    """Seeds each file's URLs, then records its hints and the file with what it lists,
    while the next file is read: parsing runs in a process of its own (``read_sitemap``'s
    ``parser``) and the database works on its own cores meanwhile. One file's writes are in
    flight at a time, so a file's hints always find the URLs an earlier file seeded."""

    def __init__(self, pool: asyncpg.Pool, harvest: Harvest, importance: float,
                 progress: Callable[[int, int], None], after_batch: frontier.AfterBatch,
                 settings: Settings) -> None:
        self.pool = pool
        self.harvest = harvest
        self.settings = settings
        self.policy = SchedulePolicy(settings)
        self.importance = importance
        self.progress = progress
        self.after_batch = after_batch
        self.pending: asyncio.Task[None] | None = None
        self.recorded: set[str] = set()  # files whose read is recorded
        self.inserted = self.already_known = self.made_due = self.listed = self.done = 0

    async def __call__(self, report: FileReport, urls: list[str], hints: list[Hint]) -> None:
        await self.finish()
        self.listed += len(urls)
        self.pending = asyncio.create_task(self.write(report, urls, hints))

    async def write(self, report: FileReport, urls: list[str], hints: list[Hint]) -> None:
        offset = self.done

        def progress(done: int, _total: int) -> None:
            self.progress(offset + done, self.listed)

        result = await frontier.seed(self.pool, dict.fromkeys(urls, self.importance),
                                     time.time(), progress=progress,
                                     after_batch=self.after_batch)
        self.done += len(urls)
        self.inserted += result.inserted
        self.already_known += result.already_known
        self.made_due += result.made_due
        # The hints and the listing, on two connections at once: each is mostly the
        # database's work, and neither writes what the other reads.
        await asyncio.gather(self.hinted(hints), self.record(report))

    async def hinted(self, hints: list[Hint]) -> None:
        async with self.pool.acquire() as conn:
            await record_hints(conn, hints, time.time(), self.settings)

    async def record(self, report: FileReport) -> None:
        """``report``'s file recorded (``record_seeded``), once."""
        if report.url not in self.recorded:
            self.recorded.add(report.url)
            await record_seeded(self.pool, self.harvest, report, time.time(), self.settings,
                                self.policy)

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
    given: dict[str, list[str]] = {"--sitemaps": [], "--sitemap": []}
    for option, what, texts in (("--sitemaps", "origin", args.sitemaps),
                                ("--sitemap", "URL", args.sitemap)):
        for text in texts or []:
            url = normalize_url(text.strip())
            if url is None:
                raise UserError(f"{option}: malformed {what} {text.strip()!r}")
            given[option].append(url)
    return [origin_of(url) for url in given["--sitemaps"]], given["--sitemap"]


def cmd_seed_sitemaps(args: argparse.Namespace) -> int:
    """`crawler seed --sitemaps ORIGIN` / `--sitemap URL`: read, then seed what they list."""
    if args.window is not None:
        raise UserError("--sitemaps and --sitemap seed a site's listed URLs; --window N "
                        "registers a breadth-first window: seed one, then the other")
    settings = load_settings(args)
    origins, sitemaps = sitemap_args(args)
    filters = seed_filters(args, settings)

    # What the run found, set by go(), which returns nothing: when asyncio.run gives the
    # SIGINT handler back, Python 3.11 formats that handler, and with it the main task and its
    # result, as text; a Harvest returned would be written out whole (10^6 URLs, seconds).
    found: list[tuple[Harvest, frontier.SeedResult]] = []

    async def go() -> None:
        pool = await create_pool(resolve_url(settings))
        try:
            try:
                session = new_session(settings.user_agent,
                                      address_policy=AddressPolicy(settings.allow_networks),
                                      ca_bundle=settings.ca_bundle)
            except ValueError as error:
                raise UserError(str(error)) from None
            async def committed_batch(batch: list[str], inserted: int) -> None:
                async with pool.acquire() as conn:
                    await seed_region(conn, batch, args, window=False)

            harvest = Harvest()
            pipeline = Pipeline(pool, harvest, args.importance, SeedProgress(sys.stderr),
                                committed_batch, settings)
            # Parsing (mostly normalising URLs) in a process of its own: on a thread it would hold
            # the interpreter's lock against the seeding and recording of the file before.
            parser = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=parser_started)
            parser.submit(int)  # started now, while robots.txt and the index are fetched
            try:
                async with pool.acquire() as conn:
                    await harvest_sitemaps(conn, session, settings, filters, origins=origins,
                                           sitemaps=sitemaps, on_file=pipeline,
                                           harvest=harvest, parser=parser)
                await pipeline.finish()
            finally:
                parser.shutdown(wait=False, cancel_futures=True)
                await session.close()
                if pipeline.pending is not None:
                    pipeline.pending.cancel()
            for report in harvest.files:
                print(describe_file(report), file=sys.stderr)
            # The files not recorded as they were seeded (indexes, failed reads): what each
            # lists, and when the daemon reads it again (docs/SITEMAPS.md).
            for report in harvest.files:
                await pipeline.record(report)
            found.append((harvest, pipeline.result()))
        finally:
            await pool.close()

    try:
        asyncio.run(go())
    except HostIdCollision as collision:
        raise UserError(f"seed: {collision}") from collision
    [(harvest, result)] = found
    failed = sum(1 for f in harvest.files if f.error)
    extras = [f"{harvest.off_location} outside their sitemap's location"]
    if harvest.loops:
        extras.append(f"{plural(harvest.loops, 'repeated sitemap')} not read again")
    if harvest.too_deep:
        extras.append(f"{plural(harvest.too_deep, 'sitemap')} past depth {MAX_INDEX_DEPTH}")
    if harvest.skipped_files:
        extras.append(f"{plural(harvest.skipped_files, 'sitemap')} past {MAX_FILES} files")
    print(f"read {plural(len(harvest.files), 'sitemap')} ({failed} failed): "
          f"{', '.join(extras)}{rejection_summary(harvest.filtered)}; "
          f"{plural(len(harvest.hints), 'date hint')}")
    made_due = f", {result.made_due} of them due now" if result.made_due else ""
    print(f"seeded {plural(result.inserted, 'new URL')} ({result.already_known} already known"
          f"{made_due})")
    return PARTIAL if failed and not harvest.urls else 0
