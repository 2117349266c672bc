"""A host leased outside the fetch loop (the sitemap reader, the IndexNow key check) as a
daemon's claim holds it, so no daemon sends the host a request meanwhile, and each request
under it moves the host's politeness clock as the fetch loop's would."""

from __future__ import annotations

from typing import TypedDict, cast

import asyncpg

from crawler.db.queries import QUERIES


class LeasedHost(TypedDict):
    """A leased host's row, by column name (``crawler.commands.sitemaps.HostHold`` reads it).
    Times are POSIX seconds, possibly ±inf."""

    lease_epoch: int
    paused: bool
    refused_reason: str | None
    crawl_delay_seconds: float | None
    next_request_at: float | None
    backoff_until: float | None
    robots_body: str | None
    robots_status: int | None
    robots_fetched_at: float | None
    robots_good_at: float | None
    robots_expires_at: float | None
    robots_unreachable_since: float | None


async def known_host(conn: asyncpg.Connection | asyncpg.Pool, origin: str) -> int | None:
    """The id of the host of ``origin`` when the crawler knows it."""
    found: int | None = await conn.fetchval(QUERIES["host_id_of"], origin)
    return found


async def lease_host(
    conn: asyncpg.Connection | asyncpg.Pool, host_id: int, owner: str, seconds: float
) -> LeasedHost | None:
    """Host ``host_id`` leased to ``owner`` for ``seconds``; None when another lease holds it."""
    row = await conn.fetchrow(QUERIES["sitemap_lease_host"], host_id, owner, seconds)
    if row is None:
        return None
    return cast(LeasedHost, {column: row[column] for column in LeasedHost.__annotations__})


async def hold_host(
    conn: asyncpg.Connection | asyncpg.Pool, host_id: int, owner: str, epoch: int,
    next_request: float, seconds: float, release: bool,
) -> bool:
    """After a request under the lease: the host's politeness clock moved to
    ``next_request`` (never back), the lease extended by ``seconds`` or given back
    (``release``). Whether the lease still held."""
    held = await conn.fetchval(QUERIES["sitemap_hold_host"], host_id, owner, epoch,
                               next_request, seconds, release)
    return held is not None
