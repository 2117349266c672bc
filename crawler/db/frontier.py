"""The frontier in PostgreSQL: seed, claim, record, release. Batched where it matters.

Times cross this boundary as POSIX seconds; rows become ``crawler.core.model`` records.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from crawler.core import fingerprint
from crawler.core.backoff import HostHealth
from crawler.core.estimate import ChangeHistory
from crawler.core.model import Observation, Schedule, UrlRecord
from crawler.core.periodic import PeriodicModel
from crawler.db.queries import QUERIES
from crawler.robots import RobotsState

UTC = dt.UTC
SEED_BATCH = 5000


def to_datetime(seconds: float | None) -> dt.datetime | None:
    if seconds is None:
        return None
    return dt.datetime.fromtimestamp(seconds, UTC)


def to_seconds(value: dt.datetime | None) -> float | None:
    if value is None:
        return None
    if value in (dt.datetime.max, dt.datetime.min) or value.year in (1, 9999):
        return None  # ±infinity
    return value.timestamp()


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


def origin_of(url: str) -> str:
    """scheme://host[:port] of a normalised URL: the politeness unit."""
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{rest.split('/', 1)[0]}"


@dataclass(frozen=True, slots=True)
class HostClaim:
    """A host leased to this daemon, with the due URLs it may fetch before the lease ends."""

    host_id: int
    origin: str
    crawl_delay_seconds: float | None
    lease_expires_at: float
    health: HostHealth = field(default_factory=HostHealth)
    robots: RobotsState | None = None
    urls: list[UrlRecord] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SeedResult:
    inserted: int
    already_known: int


async def seed(
    conn: asyncpg.Connection | asyncpg.Pool,
    urls: Sequence[tuple[str, float]],
    now: float,
    *,
    batch_size: int = SEED_BATCH,
) -> SeedResult:
    """Add normalised (url, importance) pairs, due now. Seeding a known URL is a no-op."""
    inserted = 0
    unique = list(dict.fromkeys(u for u, _ in urls))
    importance = {u: w for u, w in urls}
    due = to_datetime(now)
    for start in range(0, len(unique), batch_size):
        batch = unique[start : start + batch_size]
        origins = sorted({origin_of(u) for u in batch})
        rows = await conn.fetch(QUERIES["upsert_hosts"], origins, [due] * len(origins))
        host_ids = {r["origin"]: r["id"] for r in rows}
        inserted += len(
            await conn.fetch(
                QUERIES["insert_urls"],
                batch,
                [host_ids[origin_of(u)] for u in batch],
                [importance[u] for u in batch],
                [due] * len(batch),
            )
        )
    return SeedResult(inserted=inserted, already_known=len(unique) - inserted)


def robots_from_row(row: asyncpg.Record) -> RobotsState | None:
    fetched_at = to_seconds(row["robots_fetched_at"])
    expires_at = to_seconds(row["robots_expires_at"])
    if fetched_at is None or expires_at is None:
        return None
    return RobotsState(
        body=row["robots_body"],
        status=row["robots_status"],
        fetched_at=fetched_at,
        good_at=to_seconds(row["robots_good_at"]),
        expires_at=expires_at,
        unreachable_since=to_seconds(row["robots_unreachable_since"]),
    )


async def store_robots(
    conn: asyncpg.Connection | asyncpg.Pool,
    host_id: int,
    state: RobotsState,
    crawl_delay_seconds: float | None,
    next_request_at: float,
) -> None:
    await conn.execute(
        QUERIES["store_robots"],
        host_id,
        state.body,
        state.status,
        to_datetime(state.fetched_at),
        to_datetime(state.good_at),
        to_datetime(state.expires_at),
        to_datetime(state.unreachable_since),
        crawl_delay_seconds,
        to_datetime(next_request_at),
    )


def record_from_row(row: asyncpg.Record) -> UrlRecord:
    return UrlRecord(
        url_id=row["url_id"],
        url=row["url"],
        host_id=row["host_id"],
        state=row["state"],
        importance=row["importance"],
        last_fetched_at=to_seconds(row["last_fetched_at"]),
        last_status=row["last_status"],
        last_simhash=to_unsigned64(row["last_simhash"]),
        last_content_hash=row["last_content_hash"],
        etag=row["etag"],
        last_modified=to_seconds(row["last_modified"]),
        fetch_count=row["fetch_count"],
        change_count=row["change_count"],
        consecutive_failures=row["consecutive_failures"],
        history=ChangeHistory(
            changed_intervals_days=tuple(row["changed_intervals_days"] or ()),
            unchanged_days=row["unchanged_days"],
            fetches=row["intervals_observed"],
        ),
        change_rate_per_day=row["change_rate_per_day"],
        change_brackets_days=tuple(row["change_brackets_days"] or ()),
        periodic=None
        if row["update_period_days"] is None
        else PeriodicModel(
            row["update_period_days"], row["update_phase_days"], row["update_jitter_days"], 0.0
        ),
        site_id=row["site_id"],
        depth=row["depth"],
    )


async def claim(
    conn: asyncpg.Connection | asyncpg.Pool,
    owner: str,
    *,
    max_hosts: int,
    urls_per_host: int,
    lease_seconds: float,
) -> list[HostClaim]:
    """Lease hosts with due work and their due URLs, in one statement."""
    rows = await conn.fetch(
        QUERIES["claim_due_work"], max_hosts, owner, urls_per_host, float(lease_seconds)
    )
    claims: dict[int, HostClaim] = {}
    for row in rows:
        host = claims.get(row["host_id"])
        if host is None:
            expires = to_seconds(row["host_lease_expires_at"])
            assert expires is not None
            host = claims[row["host_id"]] = HostClaim(
                row["host_id"],
                row["origin"],
                row["crawl_delay_seconds"],
                expires,
                HostHealth(row["host_failures"], to_seconds(row["backoff_until"])),
                robots_from_row(row),
            )
        if row["url_id"] is not None:
            host.urls.append(record_from_row(row))
    return list(claims.values())


def record_args(
    record: UrlRecord,
    obs: Observation,
    schedule: Schedule,
    *,
    host_next_request_at: float,
    host_consecutive_failures: int = 0,
    host_backoff_until: float | None = None,
    redirect_to: str | None = None,
) -> list[Any]:
    """Positional parameters of ``record_fetch``: the URL row after the fetch, absolute."""
    return [
        record.url_id,
        to_datetime(obs.fetched_at),
        obs.outcome,
        obs.status,
        obs.size_bytes,
        obs.duration_seconds,
        to_signed64(obs.simhash),
        obs.content_hash,
        obs.simhash_distance,
        obs.changed,
        obs.content_changed,
        to_datetime(obs.last_modified),
        obs.error_kind,
        obs.truncated,
        record.state,
        to_datetime(schedule.next_fetch_at),
        to_signed64(record.last_simhash),
        record.last_content_hash,
        record.etag,
        to_datetime(record.last_modified),
        record.fetch_count,
        record.change_count,
        record.consecutive_failures,
        list(record.history.changed_intervals_days),
        record.history.unchanged_days,
        record.history.fetches,
        schedule.change_rate_per_day,
        schedule.fetch_rate_per_day,
        redirect_to,
        to_datetime(host_next_request_at),
        host_consecutive_failures,
        to_datetime(host_backoff_until),
        to_datetime(record.last_fetched_at),
        list(record.change_brackets_days),
        record.periodic.period_days if record.periodic else None,
        record.periodic.phase_days if record.periodic else None,
        record.periodic.jitter_days if record.periodic else None,
    ]


async def record_fetch(conn: asyncpg.Connection | asyncpg.Pool, args: Sequence[Any]) -> bool:
    """Commit one fetch (see ``record_args``); False when it had already been recorded."""
    written = await conn.fetchval(QUERIES["record_fetch"], *args)
    return bool(written)


async def release_host(conn: asyncpg.Connection | asyncpg.Pool, host_id: int, owner: str) -> None:
    await conn.execute(QUERIES["release_host"], host_id, owner)


async def release_owner(conn: asyncpg.Connection | asyncpg.Pool, owner: str) -> int:
    released = await conn.fetchval(QUERIES["release_owner"], owner)
    return int(released or 0)


async def refresh_host_due(
    conn: asyncpg.Connection | asyncpg.Pool, host_ids: Iterable[int]
) -> None:
    await conn.execute(QUERIES["refresh_host_due"], list(host_ids))


async def earliest_due(conn: asyncpg.Connection | asyncpg.Pool) -> float | None:
    return to_seconds(await conn.fetchval(QUERIES["earliest_due"]))
