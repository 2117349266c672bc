"""The frontier in PostgreSQL: seed, claim, record, release. Batched where it matters.

Times cross this boundary as POSIX seconds; rows become ``crawler.core.model`` records.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import math
import operator
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import asyncpg
import numpy as np

from crawler.core import fingerprint
from crawler.core.backoff import HostHealth
from crawler.core.estimate import ChangeHistory, LastModifiedHistory
from crawler.core.hostid import HostIdCollision, host_id
from crawler.core.hostid import origin_of as origin_of
from crawler.core.model import UrlRecord, UrlState
from crawler.core.periodic import PeriodicModel
from crawler.core.region import effective_region
from crawler.core.robots import RobotsState
from crawler.core.transition import Transition
from crawler.db import queries
from crawler.db.queries import QUERIES

UTC = dt.UTC
# URLs per seeding transaction (COPY, then one insert).
SEED_BATCH = 20_000
# Seeding batches `crawler seed` keeps in flight at once, each on a connection of its own.
SEED_PARALLEL = 2
# Up to this many URLs are seeded by two array statements instead of COPY and staging.
SMALL_SEED = 100


def to_datetime(seconds: float | None) -> dt.datetime | None:
    if seconds is None:
        return None
    return dt.datetime.fromtimestamp(seconds, UTC)


_INFINITIES = frozenset((math.inf, -math.inf))


def to_seconds(value: dt.datetime | None) -> float | None:
    if value is None:
        return None
    if value.year in (1, 9999):  # ±infinity (datetime.max and .min); by year, cheaply
        return None
    return value.timestamp()


def finite(seconds: float | None) -> float | None:
    """POSIX seconds read as float8 (date_part('epoch', ...)); None for NULL and for
    ±Infinity (PostgreSQL's ±infinity), as ``to_seconds`` reads a timestamptz."""
    if seconds is None or seconds in _INFINITIES:
        return None
    return seconds


def to_iso(value: dt.datetime | None) -> str | None:
    """A timestamp for JSON output; None for NULL and for ±infinity (a parked URL)."""
    if value is None or to_seconds(value) is None:
        return None
    return value.isoformat()


def to_signed64(value: int | None) -> int | None:
    """PostgreSQL's BIGINT is signed; fingerprints are unsigned 64-bit."""
    return None if value is None else fingerprint.to_signed64(value)


def to_unsigned64(value: int | None) -> int | None:
    return None if value is None else fingerprint.from_signed64(value)


class LeaseLost(Exception):
    """A write for a leased host was refused: the lease expired or another daemon holds it."""

    def __init__(self, lease: Lease, what: str) -> None:
        super().__init__(f"lease on host {lease.host_id} (epoch {lease.epoch}) lost: {what}")
        self.lease = lease
        self.what = what


@dataclass(frozen=True, slots=True)
class Lease:
    """A lease token: every write for the host or its URLs is conditional on it, and on the
    lease being unexpired by the database's clock."""

    host_id: int
    owner: str
    epoch: int
    # When the lease ends on this process's monotonic clock: the database's expiry minus its
    # now(), counted from just before the claim was sent (so never later than the truth).
    expires_monotonic: float

    def remaining_seconds(self, now_monotonic: float) -> float:
        return self.expires_monotonic - now_monotonic


@dataclass(frozen=True, slots=True)
class HostClaim:
    """A host leased to this daemon, with the due URLs it may fetch before the lease ends."""

    host_id: int
    origin: str
    crawl_delay_seconds: float | None
    lease: Lease
    health: HostHealth = field(default_factory=HostHealth)
    robots: RobotsState | None = None
    urls: list[UrlRecord] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SeedResult:
    inserted: int
    already_known: int
    # False when ``stop`` was set before every batch had started: the counts are those of the
    # batches that committed.
    complete: bool = True
    # Known URLs made due: they had no next fetch time or were gone (``seed``).
    made_due: int = 0


# Called after each batch commits, with its URLs and how many of them were new.
AfterBatch = Callable[[list[str], int], Awaitable[None]]


async def seed(
    conn: asyncpg.Connection | asyncpg.Pool,
    urls: dict[str, float] | Iterable[tuple[str, float]],
    now: float,
    *,
    batch_size: int = SEED_BATCH,
    progress: Callable[[int, int], None] | None = None,
    after_batch: AfterBatch | None = None,
    stop: asyncio.Event | None = None,
) -> SeedResult:
    """Add normalised (url, importance) pairs, or a dict of them (read, not copied), due now.
    A known URL keeps its state and schedule, unless it has no next fetch time (a window page
    parked outside its window) or is gone: seeding it again asks for it, so it is due now too
    (counted in ``made_due``).

    Each batch is copied into a staging table (COPY) with its URLs' host_id computed here from
    their origins (crawler.core.hostid), and inserted by one statement for its new hosts and
    one for its URLs, in a transaction of its own: an interrupted seed keeps every batch it
    committed. Given a pool, up to SEED_PARALLEL batches run at once, each on a connection of
    its own. ``progress(0, total)`` is called before the first batch is sent; after each
    commit ``after_batch(urls, inserted)`` is awaited, then ``progress(done, total)`` called.
    Once ``stop`` is set no batch starts; those in flight commit, and the result (``complete``
    False) counts what committed. Raises ``HostIdCollision``, writing nothing of the batch,
    when an origin's key is already another origin's.
    """
    # The last importance given for a URL wins. A dict is used as it is: copying 10^7 of them
    # took 5.5 s, all before the first batch.
    importance = urls if isinstance(urls, dict) else dict(urls)
    unique = list(importance)
    due = to_datetime(now)
    if len(unique) > batch_size:
        seed_order(unique)
    batches = [unique[start : start + batch_size] for start in range(0, len(unique), batch_size)]
    if progress is not None:
        progress(0, len(unique))  # read and ordered: the first batch goes now
    seeding = _Seeding(importance, due, len(unique), progress, after_batch, stop)
    if not isinstance(conn, asyncpg.Pool):
        return await _seed_serial(conn, batches, seeding)
    if len(batches) > 1:
        return await _seed_pooled(conn, batches, seeding)
    async with conn.acquire() as acquired:
        return await _seed_serial(acquired, batches, seeding)


@dataclass(slots=True)
class _Seeding:
    """What the batches of one ``seed`` call share, and what they committed so far."""

    importance: dict[str, float]
    due: dt.datetime | None
    total: int
    progress: Callable[[int, int], None] | None
    after_batch: AfterBatch | None
    stop: asyncio.Event | None
    inserted: int = 0
    made_due: int = 0
    done: int = 0

    def stopped(self) -> bool:
        return self.stop is not None and self.stop.is_set()

    async def committed(self, batch: list[str], counts: tuple[int, int]) -> None:
        """A batch committed (``counts``: its new URLs, and its known ones made due):
        ``after_batch``, then counted, then ``progress``."""
        inserted, made_due = counts
        if self.after_batch is not None:
            await self.after_batch(batch, inserted)
        self.inserted += inserted
        self.made_due += made_due
        self.done += len(batch)
        if self.progress is not None:
            self.progress(self.done, self.total)

    def result(self, *, complete: bool) -> SeedResult:
        return SeedResult(self.inserted, self.done - self.inserted, complete, self.made_due)


async def _seed_serial(
    conn: asyncpg.Connection, batches: list[list[str]], seeding: _Seeding
) -> SeedResult:
    """The batches one after the other on ``conn`` (``seed``'s contract)."""
    for batch in batches:
        if seeding.stopped():
            return seeding.result(complete=False)
        if seeding.total <= SMALL_SEED:  # a redirect target, a window root: no staging
            new = await _seed_small(conn, batch, seeding.importance, seeding.due)
        else:
            new = await _seed_batch_retried(conn, batch, seeding.importance, seeding.due)
        await seeding.committed(batch, new)
    return seeding.result(complete=True)


async def _seed_pooled(
    pool: asyncpg.Pool, batches: list[list[str]], seeding: _Seeding
) -> SeedResult:
    """The batches, up to SEED_PARALLEL at once, each on a connection of its own: a batch's
    time is mostly one server process's CPU, so a second one overlaps it. Batches commit in
    any order. Once ``stop`` is set no batch starts and those in flight finish; on an error
    the ones in flight are cancelled (each rolls back whole) and the error is raised."""

    async def one(batch: list[str]) -> None:
        async with pool.acquire() as conn:
            new = await _seed_batch_retried(conn, batch, seeding.importance, seeding.due)
        await seeding.committed(batch, new)

    pending: set[asyncio.Task[None]] = set()
    queued = iter(batches)
    started = 0
    try:
        while True:
            while len(pending) < SEED_PARALLEL and not seeding.stopped():
                batch = next(queued, None)
                if batch is None:
                    break
                pending.add(asyncio.create_task(one(batch)))
                started += 1
            if not pending:
                break
            finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in finished:
                task.result()  # raises the batch's error
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    return seeding.result(complete=started == len(batches))


async def _seed_batch_retried(
    conn: asyncpg.Connection,
    batch: list[str],
    importance: dict[str, float],
    due: dt.datetime | None,
) -> tuple[int, int]:
    """``_seed_batch`` of these URLs, run again (up to three times in all) when it deadlocked:
    another seeder (or a daemon) locked the same hosts in another order, and the batch was
    rolled back whole."""
    records, hosts = seed_rows(batch, importance)
    attempts = 1
    while True:
        try:
            return await _seed_batch(conn, records, hosts, due)
        except asyncpg.DeadlockDetectedError:
            if attempts == 3:
                raise
            attempts += 1


# Origins' keys, remembered across batches and seeding calls (a SHA-256 costs about as much as
# the rest of building a URL's row; seed_order computes each origin's key, seed_rows again).
_host_key = lru_cache(maxsize=1 << 18)(host_id)


def seed_order(urls: list[str]) -> None:
    """Sort normalised URLs in place into the order the urls insert writes each batch in: by
    host key, then URL. Seeded in this order, consecutive batches cover consecutive key
    ranges, so the indexes keyed by host are written in one sweep (on a cold table, at their
    right edge), where a list interleaved across hosts put one URL of each of 20,000 hosts in
    every batch, written all over them.

    Sorted by URL first, an origin's URLs are consecutive (they share ``scheme://host[:port]/``),
    so each origin's key is computed once and the URLs after it only test that prefix; then a
    stable argsort of the keys (0.5 s per 10^6 URLs, where a sort keyed by each URL's key took
    0.95 s: at 10^7 that was 10 s before the first batch)."""
    urls.sort()
    keys: list[int] = []
    append = keys.append
    prefix = "\0"  # no URL starts with it
    key = 0
    for url in urls:
        if not url.startswith(prefix):  # once per origin, not per URL
            origin = origin_of(url)
            prefix = origin + "/"
            key = _host_key(origin)
        append(key)
    order = np.argsort(np.array(keys, dtype=np.int64), kind="stable")
    urls[:] = [urls[i] for i in order.tolist()]


SEED_COLUMNS = ("url", "host_id", "importance")
SEED_HOST_COLUMNS = ("host_id", "origin")


async def _seed_batch(
    conn: asyncpg.Connection,
    records: list[tuple[str, int, float]],
    hosts: list[tuple[int, str]],
    due: dt.datetime | None,
) -> tuple[int, int]:
    """One batch in one transaction: COPY into staging, then the hosts and the urls inserts.
    Returns how many URLs were new and how many known ones were made due
    (``_make_known_due``); raises ``HostIdCollision`` (the batch rolled back).

    The hosts insert locks the batch's known hosts as the foreign key would; the urls insert
    then runs without its per-row checks when the role may skip them (queries.sql,
    ``skip_redundant_checks``)."""
    async with conn.transaction():
        # Created (if need be) in the transaction that uses it: behind PgBouncer's
        # transaction pooling, each transaction may run on another server connection.
        await conn.execute(QUERIES["seed_staging"])
        await conn.copy_records_to_table("seed_staging", records=records, columns=SEED_COLUMNS)
        await conn.copy_records_to_table(
            "seed_staging_hosts", records=hosts, columns=SEED_HOST_COLUMNS
        )
        collisions = await queries.fetch(conn, "seed_hosts_from_staging", due)
        if collisions:
            c = collisions[0]
            raise HostIdCollision(c["host_id"], c["origin"], c["existing"])
        # Every staged URL's host is now inserted or locked by this transaction, and no URL
        # names a site: the foreign keys' per-URL checks could only pass, so they are skipped
        # where the role allows it (a third of the database's time per URL). The statement
        # asks has_parameter_privilege, which PostgreSQL 15 introduced: before it, the checks
        # simply run.
        if conn.get_server_version().major >= 15:
            await queries.fetchval(conn, "skip_redundant_checks")
        inserted = int(await queries.fetchval(conn, "seed_urls_from_staging", due))
        made_due = 0
        if inserted < len(records):
            made_due = await _make_known_due(conn, records, due, hosts)
        return inserted, made_due


async def _make_known_due(
    conn: asyncpg.Connection,
    records: list[tuple[str, int, float]],
    due: dt.datetime | None,
    hosts: list[tuple[int, str]] | None = None,
) -> int:
    """The known URLs among ``records`` that have no next fetch time (a window page parked
    outside its window) or are gone, due at ``due``; how many. Their hosts, named with their
    origins in ``hosts`` (key, origin), are due by ``due`` too (``upsert_hosts``, which only
    moves a due time earlier); the small path passes none, its own upsert having done it.

    Run only when a batch had known URLs: a fresh seed pays nothing for it."""
    made = await conn.fetch(
        QUERIES["seed_known_due"], [url for url, _, _ in records],
        [key for _, key, _ in records], due,
    )
    moved = {r["host_id"] for r in made}
    if moved and hosts is not None:
        # In key order, as every seeder locks hosts: two of them wait instead of deadlocking.
        keys = sorted(key for key, _ in hosts if key in moved)
        origin = dict(hosts)
        await conn.execute(QUERIES["upsert_hosts"], keys, [origin[k] for k in keys],
                           [due] * len(keys))
    return len(made)


def seed_rows(
    batch: Sequence[str], importance: dict[str, float]
) -> tuple[list[tuple[str, int, float]], list[tuple[int, str]]]:
    """The staging rows of a batch of normalised URLs (SEED_COLUMNS order) and of its distinct
    hosts (SEED_HOST_COLUMNS order).

    Two origins of one batch with one key are refused here, before the database sees them.
    """
    batch_hosts: dict[str, int] = {}
    records: list[tuple[str, int, float]] = []
    for u in batch:
        scheme, rest = u.split("://", 1)  # crawler.core.hostid.origin_of, inlined: hot loop
        origin = f"{scheme}://{rest.split('/', 1)[0]}"
        key = batch_hosts.get(origin)
        if key is None:
            key = batch_hosts[origin] = _host_key(origin)
        records.append((u, key, importance[u]))
    hosts = [(key, origin) for origin, key in batch_hosts.items()]
    if len({key for key, _ in hosts}) != len(hosts):
        seen: dict[int, str] = {}
        for key, origin in hosts:
            if key in seen:
                raise HostIdCollision(key, origin, seen[key])
            seen[key] = origin
    return records, hosts


async def _seed_small(
    conn: asyncpg.Connection,
    unique: list[str],
    importance: dict[str, float],
    due: dt.datetime | None,
) -> tuple[int, int]:
    """A few URLs (a redirect target, a window root): two array statements, no staging; new
    URLs and known ones made due, counted as ``_seed_batch`` counts them.
    Raises ``HostIdCollision`` when an origin's key is another origin's (before any URL is
    written; a host row is never written under another origin's key).

    One transaction (a savepoint inside the caller's): between the two statements a running
    daemon could otherwise claim the new host, find none of its URLs yet, and release it with
    no due time, and the URLs inserted next would never make it due again."""
    records, hosts = seed_rows(unique, importance)
    hosts.sort()
    async with conn.transaction():
        rows = await conn.fetch(
            QUERIES["upsert_hosts"], [k for k, _ in hosts], [o for _, o in hosts],
            [due] * len(hosts),
        )
        returned = {r["id"]: r["origin"] for r in rows}
        for key, origin in hosts:
            if returned.get(key) != origin:
                existing = await conn.fetchval("SELECT origin FROM hosts WHERE id = $1", key)
                raise HostIdCollision(key, origin, str(existing))
        inserted = await conn.fetch(
            QUERIES["insert_urls"],
            [url for url, _, _ in records],
            [key for _, key, _ in records],
            [weight for _, _, weight in records],
            [due] * len(records),
        )
        made_due = 0
        if len(inserted) < len(records):
            made_due = await _make_known_due(conn, records, due)
    return len(inserted), made_due


def robots_from_row(row: asyncpg.Record) -> RobotsState | None:
    """A claimed host's robots.txt state (its times as POSIX seconds: claim_due_work)."""
    fetched_at = finite(row["robots_fetched_at"])
    expires_at = finite(row["robots_expires_at"])
    if fetched_at is None or expires_at is None:
        return None
    return RobotsState(
        body=row["robots_body"],
        status=row["robots_status"],
        fetched_at=fetched_at,
        good_at=finite(row["robots_good_at"]),
        expires_at=expires_at,
        unreachable_since=finite(row["robots_unreachable_since"]),
    )


async def store_robots(
    conn: asyncpg.Connection | asyncpg.Pool,
    lease: Lease,
    state: RobotsState,
    crawl_delay_seconds: float | None,
    next_request_at: float,
    *,
    rules_changed: bool,
) -> None:
    """Store a host's robots.txt (and make the URLs it disallowed due when its rules
    changed); raises ``LeaseLost`` when the lease is no longer held."""
    row = _row(
        id=lease.host_id,
        robots_body=state.body,
        robots_status=state.status,
        robots_fetched_at=to_datetime(state.fetched_at),
        robots_good_at=to_datetime(state.good_at),
        robots_expires_at=to_datetime(state.expires_at),
        robots_unreachable_since=to_datetime(state.unreachable_since),
        crawl_delay_seconds=crawl_delay_seconds,
        next_request_at=to_datetime(next_request_at),
    )
    stored = await conn.fetchrow(
        QUERIES["store_robots"], row, lease.owner, lease.epoch, rules_changed
    )
    if stored is None:
        raise LeaseLost(lease, "robots.txt")


async def set_host_backoff(
    conn: asyncpg.Connection | asyncpg.Pool, lease: Lease, until: float
) -> None:
    """Leave the leased host alone until ``until``; raises ``LeaseLost`` without the lease."""
    done = await conn.fetchval(
        QUERIES["set_host_backoff"], lease.host_id, to_datetime(until), lease.owner, lease.epoch
    )
    if done is None:
        raise LeaseLost(lease, "backoff")


async def note_host_error(
    conn: asyncpg.Connection | asyncpg.Pool, lease: Lease, kind: str, at: float
) -> None:
    """Keep the leased host's last connection-level failure for ``crawler status``; raises
    ``LeaseLost`` without the lease."""
    done = await conn.fetchval(
        QUERIES["note_host_error"], lease.host_id, kind, to_datetime(at), lease.owner, lease.epoch
    )
    if done is None:
        raise LeaseLost(lease, "host error")


async def set_host_refused(
    conn: asyncpg.Connection | asyncpg.Pool, lease: Lease, reason: str | None
) -> bool:
    """Note (or, with None, clear) why the SSRF policy refused the leased host; whether the
    note changed. Raises ``LeaseLost`` without the lease."""
    row = await conn.fetchrow(
        QUERIES["set_host_refused"], lease.host_id, reason, lease.owner, lease.epoch
    )
    if row is None or not row["held"]:
        raise LeaseLost(lease, "refused note")
    return bool(row["changed"])


# Claims build thousands of records a second: a dict lookup, not the Enum's call.
_URL_STATES: dict[str, UrlState] = {state.value: state for state in UrlState}


def record_from_row(row: asyncpg.Record) -> UrlRecord:
    """The URL of a claimed (or planner) row, whose times are POSIX seconds (date_part, as
    claim_due_work and reschedule_records select them)."""
    period = row["update_period_days"]
    return UrlRecord(
        url_id=row["url_id"],
        url=row["url"],
        host_id=row["host_id"],
        state=_URL_STATES[row["state"]],
        importance=row["importance"],
        last_fetched_at=finite(row["last_fetched_at"]),
        last_status=row["last_status"],
        last_simhash=to_unsigned64(row["last_simhash"]),
        last_content_hash=row["last_content_hash"],
        etag=row["etag"],
        last_modified=finite(row["last_modified"]),
        fetch_count=row["fetch_count"],
        change_count=row["change_count"],
        consecutive_failures=row["consecutive_failures"],
        history=ChangeHistory(
            tuple(row["changed_intervals_days"] or ()),
            row["unchanged_days"],
            row["intervals_observed"],
        ),
        change_rate_per_day=row["change_rate_per_day"],
        change_brackets_days=tuple(row["change_brackets_days"] or ()),
        periodic=None if period is None
        else PeriodicModel(period, row["update_phase_days"], row["update_jitter_days"], 0.0),
        site_id=row["site_id"],
        depth=row["depth"],
        last_modified_history=LastModifiedHistory(
            row["lm_fetches"], row["lm_changes"], row["lm_observed_days"]),
        last_modified_evidence_days=tuple(row["lm_evidence_days"] or ()),
        # Read only where claimed (the planner's rows have no region and rewrite no fingerprint).
        region=effective_region(
            row.get("watch_css"), row.get("ignore_css"),
            row.get("site_watch_css"), row.get("site_ignore_css"),
        ),
        fingerprint_region=row.get("fingerprint_region") or "",
        out_links_read=bool(row.get("out_links_read")),
        exact=bool(row.get("watch_exact") or row.get("site_watch_exact")),
        last_text_hash=row.get("last_text_hash"),
        own_min_interval_seconds=row.get("own_min_interval_seconds"),
        own_max_interval_seconds=row.get("own_max_interval_seconds"),
        fetch_windows=row.get("fetch_windows") or "",
        hinted=row.get("hinted"),
    )


async def claim(
    conn: asyncpg.Connection | asyncpg.Pool,
    owner: str,
    *,
    max_hosts: int,
    urls_per_host: int,
    lease_seconds: float,
) -> list[HostClaim]:
    """Lease hosts with due work and their due URLs, in one statement.

    Each lease's expiry is taken on the monotonic clock from the database's own now() and
    expiry, counted from before the request was sent: the lease may end later than the
    daemon thinks, never earlier.
    """
    sent = time.monotonic()
    rows = await queries.fetch(
        conn, "claim_due_work", max_hosts, owner, urls_per_host, float(lease_seconds)
    )
    claims: dict[int, HostClaim] = {}
    for row in rows:
        host = claims.get(row["host_id"])
        if host is None:
            host = claims[row["host_id"]] = HostClaim(
                row["host_id"],
                row["origin"],
                row["crawl_delay_seconds"],
                Lease(row["host_id"], owner, row["lease_epoch"], sent + row["lease_seconds"]),
                HostHealth(row["host_failures"], finite(row["backoff_until"])),
                robots_from_row(row),
            )
        if row["url_id"] is not None:
            host.urls.append(record_from_row(row))
    return list(claims.values())


def _json_value(value: object) -> object:
    """A value as PostgreSQL reads it from JSON into a column of the row type."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, tuple | list):
        return [_json_value(v) for v in value]
    return value


def _row(**columns: object) -> str:
    """One row of a table as JSON, read by ``jsonb_populate_record`` (columns by name)."""
    return json.dumps({k: _json_value(v) for k, v in columns.items()}, separators=(",", ":"))


# The fields of the ``fetch_record`` type, in its order: one item of ``record_fetches``.
RECORD_COLUMNS = (
    "host_id", "lease_owner", "lease_epoch",
    "url_id", "fetched_at_us", "outcome", "status", "bytes", "duration_seconds", "simhash",
    "content_hash", "simhash_distance", "changed", "content_changed", "obs_last_modified_us",
    "error_kind", "truncated",
    "state", "next_fetch_at_us", "last_fetched_at_us", "last_status", "last_simhash",
    "last_content_hash", "fingerprint_region", "etag", "last_modified_us", "fetch_count",
    "change_count", "consecutive_failures", "changed_intervals_days", "unchanged_days",
    "intervals_observed", "change_rate_per_day", "fetch_rate_per_day", "redirect_to",
    "change_brackets_days", "update_period_days", "update_phase_days", "update_jitter_days",
    "lm_fetches", "lm_changes", "lm_observed_days", "lm_evidence_days",
    "next_request_at_us", "host_failures", "backoff_until_us", "release", "out_links_read",
    "last_text_hash",
)
# crawler_micros_time's ±infinity.
_MICROS_INFINITY = 2**63 - 1
_MICROS_NEGATIVE_INFINITY = -(2**63)


def to_micros(seconds: float | None) -> int | None:
    """POSIX seconds as integer microseconds, rounded as ``datetime.fromtimestamp`` rounds
    (the whole seconds, then the fraction's microseconds half to even), so that a time sent
    this way lands on the same timestamptz as the same time sent as a datetime. ±inf (a parked
    URL's next fetch) is crawler_micros_time's ±infinity."""
    if seconds is None:
        return None
    if seconds in _INFINITIES:
        return _MICROS_INFINITY if seconds > 0 else _MICROS_NEGATIVE_INFINITY
    whole = int(seconds)
    return whole * 1_000_000 + round((seconds - whole) * 1e6)


def _floats(values: Sequence[float]) -> list[float] | None:
    """A float8[] field: None when empty (stored as '{}'), else floats (float() first: a
    numpy float is not one asyncpg encodes)."""
    return list(map(float, values)) if values else None


RecordRow = tuple[object, ...]
# asyncpg encodes a composite by position: the row is built by name, then read out in the
# type's order (tests/integration/test_recorder.py checks RECORD_COLUMNS against the type).
_in_record_order = operator.itemgetter(*RECORD_COLUMNS)


def record_fields(t: Transition, lease: Lease, *, release: bool = False) -> dict[str, object]:
    """Everything a transition writes, by ``fetch_record`` field name. ``release``: the
    host's last fetch of this lease, which gives the host back."""
    obs, after, schedule, host = t.observation, t.record, t.schedule, t.host
    periodic = after.periodic
    history = after.history
    lm = after.last_modified_history
    return {
        "host_id": lease.host_id,
        "lease_owner": lease.owner,
        "lease_epoch": lease.epoch,
        "url_id": after.url_id,
        "fetched_at_us": to_micros(obs.fetched_at),
        "outcome": obs.outcome.value,
        "status": obs.status,
        "bytes": obs.size_bytes,
        "duration_seconds": obs.duration_seconds,
        "simhash": to_signed64(obs.simhash),
        "content_hash": obs.content_hash,
        "simhash_distance": obs.simhash_distance,
        "changed": obs.changed,
        "content_changed": obs.content_changed,
        "obs_last_modified_us": to_micros(obs.last_modified),
        "error_kind": obs.error_kind,
        "truncated": obs.truncated,
        "state": after.state.value,
        "next_fetch_at_us": to_micros(schedule.next_fetch_at),
        "last_fetched_at_us": to_micros(after.last_fetched_at),
        "last_status": after.last_status,
        "last_simhash": to_signed64(after.last_simhash),
        "last_content_hash": after.last_content_hash,
        "fingerprint_region": after.fingerprint_region,
        "etag": after.etag,
        "last_modified_us": to_micros(after.last_modified),
        "fetch_count": after.fetch_count,
        "change_count": after.change_count,
        "consecutive_failures": after.consecutive_failures,
        "changed_intervals_days": _floats(history.changed_intervals_days),
        "unchanged_days": history.unchanged_days,
        "intervals_observed": history.fetches,
        "change_rate_per_day": schedule.change_rate_per_day,
        "fetch_rate_per_day": schedule.fetch_rate_per_day,
        "redirect_to": t.redirect_to,
        "change_brackets_days": _floats(after.change_brackets_days),
        "update_period_days": periodic.period_days if periodic else None,
        "update_phase_days": periodic.phase_days if periodic else None,
        "update_jitter_days": periodic.jitter_days if periodic else None,
        "lm_fetches": lm.fetches,
        "lm_changes": lm.changes,
        "lm_observed_days": lm.observed_days,
        "lm_evidence_days": _floats(after.last_modified_evidence_days),
        "next_request_at_us": to_micros(host.next_request_at),
        "host_failures": host.consecutive_failures,
        "backoff_until_us": to_micros(host.backoff_until),
        "release": release,
        "out_links_read": after.out_links_read,
        "last_text_hash": after.last_text_hash,
    }


def record_row(t: Transition, lease: Lease, *, release: bool = False) -> RecordRow:
    """One item of ``record_fetches``: ``record_fields`` in the type's order."""
    row: RecordRow = _in_record_order(record_fields(t, lease, release=release))
    return row


async def record_fetches(
    conn: asyncpg.Connection | asyncpg.Pool, rows: Sequence[RecordRow]
) -> dict[int, bool]:
    """Commit many hosts' fetches (``record_row``, at most one per host) in one statement.

    Returns, for each item whose lease held, its url_id and whether its observation is new
    (False: a retry after a lost acknowledgement). An item absent from the result wrote
    nothing: its lease is gone.
    """
    if not rows:
        return {}
    result = await queries.fetch(conn, "record_fetches", rows)
    return {r["url_id"]: bool(r["written"]) for r in result}


async def record_fetch(
    conn: asyncpg.Connection | asyncpg.Pool, t: Transition, lease: Lease
) -> bool:
    """Commit one fetch's observation, URL row and host clock in one statement
    (``record_fetches`` with one item); False when it had already been recorded (a retry
    after a lost acknowledgement). Raises ``LeaseLost``, writing nothing, when ``lease`` is no
    longer held."""
    written = await record_fetches(conn, [record_row(t, lease)])
    if t.record.url_id not in written:
        raise LeaseLost(lease, "fetch record")
    return written[t.record.url_id]


async def recorded(conn: asyncpg.Connection | asyncpg.Pool, ts: Sequence[Transition]) -> set[int]:
    """The url ids of those fetches whose observation is already in the database: a record
    that also released its host, retried after a lost acknowledgement, finds no lease to
    check, yet was written."""
    rows = await conn.fetch(
        QUERIES["recorded_fetches"], [t.record.url_id for t in ts],
        [t.record.host_id for t in ts], [to_datetime(t.observation.fetched_at) for t in ts],
    )
    return {r["url_id"] for r in rows}


async def release_host(conn: asyncpg.Connection | asyncpg.Pool, lease: Lease) -> bool:
    """Give a leased host back (``release_hosts`` with one lease); False when the lease had
    already expired or moved on."""
    return lease.host_id in await release_hosts(conn, [lease])


async def release_hosts(
    conn: asyncpg.Connection | asyncpg.Pool, leases: Sequence[Lease]
) -> set[int]:
    """Give many leased hosts back in one statement; the ids of those released (a lease
    that had expired or moved on is not released)."""
    if not leases:
        return set()
    rows = await queries.fetch(
        conn, "release_hosts", [lease.host_id for lease in leases],
        [lease.owner for lease in leases], [lease.epoch for lease in leases],
    )
    return {r["id"] for r in rows}


async def release_owner(conn: asyncpg.Connection | asyncpg.Pool, owner: str) -> int:
    """Give back every host ``owner`` still holds (shutdown); how many."""
    released = await conn.fetchval(QUERIES["release_owner"], owner)
    return int(released or 0)


# Hosts per refresh_host_due statement in refresh_hosts: a fetcher recording on one of them
# waits at most as long as the statement (a few milliseconds), never for a chunk.
HOST_REFRESH_BATCH = 200


async def refresh_hosts(conn: asyncpg.Connection | asyncpg.Pool, hosts: set[int]) -> None:
    """Recompute the due time of ``hosts`` in id order and chunks; removes from the set those
    done. A host a fetcher holds locked is skipped (SKIP LOCKED), never waited for, and stays
    in the set for the caller to try again."""
    ordered = sorted(hosts)
    for first in range(0, len(ordered), HOST_REFRESH_BATCH):
        done = await queries.fetch(conn, "refresh_host_due",
                                   ordered[first:first + HOST_REFRESH_BATCH])
        hosts.difference_update(r["id"] for r in done)


async def earliest_due(conn: asyncpg.Connection | asyncpg.Pool) -> float | None:
    return to_seconds(await conn.fetchval(QUERIES["earliest_due"]))
