"""The statements of the administration commands: listing, pausing, re-weighting and removing
URLs and hosts. Each function is one command's use of the database, typed by what it returns."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from crawler.core import hostid
from crawler.db.frontier import to_iso
from crawler.db.queries import QUERIES


async def list_urls(conn: asyncpg.Connection, origin: str | None, state: str | None,
                    offset: int, limit: int) -> list[dict[str, Any]]:
    """One page of URLs in primary-key order, by host and state when given; times in ISO 8601."""
    rows = await conn.fetch(QUERIES["list_urls"], origin, state, offset, limit)
    return [{k: (to_iso(v) if hasattr(v, "tzinfo") else v) for k, v in r.items()} for r in rows]


async def set_host_paused(conn: asyncpg.Connection, origin: str, paused: bool) -> bool:
    """Pause or resume the host of ``origin``; False when no such host is known."""
    return await conn.fetchval(QUERIES["set_host_paused"], origin, paused) is not None


@dataclass(frozen=True, slots=True)
class UrlOfHost:
    """A URL's key: its id and its host's (what a removal or a recheck touched)."""

    id: int
    host_id: int


async def set_importance(conn: asyncpg.Connection, pairs: Sequence[tuple[str, float]]
                         ) -> set[str]:
    """New importance weights for known URLs; the URLs found."""
    rows = await conn.fetch(QUERIES["set_importance"], [u for u, _ in pairs],
                            [w for _, w in pairs])
    return {str(r["url"]) for r in rows}


async def remove_urls(conn: asyncpg.Connection, urls: Sequence[str]) -> list[UrlOfHost]:
    """Delete these URLs (their links and collection rows cascade); those that were known."""
    rows = await conn.fetch(QUERIES["remove_urls"], list(urls))
    return [UrlOfHost(r["id"], r["host_id"]) for r in rows]


async def lock_host(conn: asyncpg.Connection, origin: str) -> int | None:
    """The id of ``origin``'s host, locked until the transaction ends; None when unknown."""
    host_id: int | None = await conn.fetchval(QUERIES["lock_host"], origin)
    return host_id


async def remove_host_urls(conn: asyncpg.Connection, host_id: int) -> list[UrlOfHost]:
    """Delete every URL of a host; those deleted."""
    rows = await conn.fetch(QUERIES["remove_host_urls"], host_id)
    return [UrlOfHost(r["id"], r["host_id"]) for r in rows]


async def remove_host(conn: asyncpg.Connection, host_id: int) -> None:
    await conn.execute(QUERIES["remove_host"], host_id)


async def remove_url_history(conn: asyncpg.Connection, removed: Sequence[UrlOfHost]) -> None:
    """The observations, sitemap date hints, sitemap listings and hint state of the URLs just
    removed, which no foreign key cascades to."""
    if not removed:
        return
    ids, hosts = [r.id for r in removed], [r.host_id for r in removed]
    for name in ("remove_observations", "remove_url_hints", "remove_sitemap_urls",
                 "remove_url_hint_state"):
        await conn.execute(QUERIES[name], ids, hosts)


async def recheck_urls(conn: asyncpg.Connection, urls: Sequence[str]) -> list[tuple[str, int]]:
    """Make these URLs due now; (URL, host id) of each that was known."""
    rows = await conn.fetch(QUERIES["recheck_urls"], list(urls))
    return [(str(r["url"]), int(r["host_id"])) for r in rows]


async def recheck_host_urls(conn: asyncpg.Connection, host_id: int) -> int:
    """Make every URL of a host due now, except those parked outside a page window; how many."""
    return int(await conn.fetchval(QUERIES["recheck_host_urls"], host_id))


async def host_parked_urls(conn: asyncpg.Connection, host_id: int) -> int:
    """How many URLs of a host are parked (outside their page window)."""
    return int(await conn.fetchval(QUERIES["host_parked_urls"], host_id))


# What `crawler sites` shows of each sitemap, times in ISO 8601.
_SITEMAP_COLUMNS = (
    "url", "kind", "source", "found_on", "robots_origin", "depth", "read_at", "status", "listed",
    "added", "dropped", "rejected", "changed_at", "next_read_at", "reads", "changes",
    "change_rate_per_day", "cut", "error", "repaired",
)


def _iso(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return None if value.year in (1, 9999) else value.isoformat(timespec="seconds")
    return value


async def sitemap_sites(conn: asyncpg.Connection) -> list[dict[str, Any]]:
    """`crawler sites`' sites read through sitemaps: one entry per host with sitemaps, its
    origin, its URLs no sitemap lists any more, its files (times in ISO 8601)."""
    hosts = [r["host_id"] for r in await conn.fetch(QUERIES["sitemap_host_ids"])]
    if not hosts:
        return []
    unlisted = {r["host_id"]: r["unlisted"]
                for r in await conn.fetch(QUERIES["unlisted_counts"], hosts)}
    sites: dict[str, dict[str, Any]] = {}
    for r in await conn.fetch(QUERIES["host_sitemaps"], hosts):
        site = sites.setdefault(r["origin"], {
            "origin": r["origin"], "unlisted": unlisted.get(hostid.host_id(r["origin"]), 0),
            "sitemaps": []})
        site["sitemaps"].append({column: _iso(r[column]) for column in _SITEMAP_COLUMNS})
    return list(sites.values())
