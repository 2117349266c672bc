"""The statements of ``crawler watch`` and ``crawler bound``: the watched region, exactness and
schedule bounds of URLs, of windowed sites and of URL patterns (rules kept for URLs that
arrive later)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from crawler.db.queries import QUERIES, row_as

# --- watched regions and exactness ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UrlRegion:
    """A URL's own watched region and its window's (CSS selectors; None for none)."""

    watch_css: str | None
    ignore_css: str | None
    site_root_url: str | None
    site_watch_css: str | None
    site_ignore_css: str | None


async def url_region(conn: asyncpg.Connection, url: str) -> UrlRegion | None:
    """The regions of a known URL; None when it is not known."""
    row = await conn.fetchrow(QUERIES["url_region"], url)
    return None if row is None else row_as(UrlRegion, row)


async def set_url_region(conn: asyncpg.Connection, urls: Sequence[str], watch: str | None,
                         ignore: str | None) -> int:
    """Store a region on known URLs; how many took it."""
    return len(await conn.fetch(QUERIES["set_url_region"], list(urls), watch, ignore))


async def set_site_region(conn: asyncpg.Connection, root_url: str, watch: str | None,
                          ignore: str | None) -> int:
    """Store a region on the windowed site rooted at ``root_url``; 1 when it exists, else 0."""
    return len(await conn.fetch(QUERIES["set_site_region"], root_url, watch, ignore))


async def set_url_exact(conn: asyncpg.Connection, urls: Sequence[str], exact: bool) -> None:
    await conn.fetch(QUERIES["set_url_exact"], list(urls), exact)


async def set_site_exact(conn: asyncpg.Connection, root_url: str, exact: bool) -> None:
    await conn.fetch(QUERIES["set_site_exact"], root_url, exact)


async def url_exact(conn: asyncpg.Connection, url: str) -> tuple[bool, bool] | None:
    """Whether any change of a known URL's text counts, set on it and on its window; None
    when it is not known."""
    row = await conn.fetchrow(QUERIES["url_exact"], url)
    return None if row is None else (bool(row["watch_exact"]), bool(row["site_watch_exact"]))


async def site_exact(conn: asyncpg.Connection, root_url: str) -> bool:
    return bool(await conn.fetchval(QUERIES["site_exact"], root_url))


async def check_pattern(conn: asyncpg.Connection, pattern: str) -> None:
    """Raises ``asyncpg.InvalidRegularExpressionError`` when PostgreSQL's ``~`` refuses
    ``pattern`` (every stored pattern is run on every new URL)."""
    await conn.fetchval(QUERIES["valid_pattern"], pattern)


async def store_watch_rule(conn: asyncpg.Connection, pattern: str, parts: dict[str, str]
                           ) -> None:
    """Keep ``parts`` ('exact', 'watch', 'ignore') of a pattern's rule for URLs that arrive
    later, dropping rules that set nothing any more."""
    await conn.fetch(QUERIES["store_watch_rule"], pattern, list(parts), list(parts.values()))
    await conn.fetch(QUERIES["prune_watch_rules"])


async def sync_new_url_rules(conn: asyncpg.Connection) -> None:
    """Enable (or, with no rule left, disable) the trigger that gives new URLs their rules,
    and wait for the inserts that started before the last rule committed."""
    await conn.fetchval(QUERIES["sync_new_url_rules"])


async def set_pattern_rule(conn: asyncpg.Connection, pattern: str, exact: bool | None,
                           watch: str | None, ignore: str | None, clear: bool) -> int:
    """Set a pattern's rule on every known URL it matches; how many."""
    return len(await conn.fetch(QUERIES["set_pattern_rule"], pattern, exact, watch, ignore,
                                clear))


# --- schedule bounds ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BoundedUrl:
    """A URL a schedule rule was applied to: its key, its due time (POSIX seconds) and, once
    the rules in force were applied again, the bounds it took."""

    id: int
    host_id: int
    next_fetch_at: float
    own_min_interval_seconds: float | None = None
    own_max_interval_seconds: float | None = None
    fetch_windows: str | None = None


def _bounded(row: asyncpg.Record) -> BoundedUrl:
    return BoundedUrl(row["id"], row["host_id"], row["next_fetch_at"])


async def set_url_bounds(conn: asyncpg.Connection, url: str, min_seconds: float | None,
                         max_seconds: float | None, windows: str | None) -> list[BoundedUrl]:
    rows = await conn.fetch(QUERIES["set_url_bounds"], [url], min_seconds, max_seconds, windows)
    return [_bounded(r) for r in rows]


async def set_host_bounds(conn: asyncpg.Connection, host_id: int, min_seconds: float | None,
                          max_seconds: float | None, windows: str | None) -> list[BoundedUrl]:
    rows = await conn.fetch(QUERIES["set_host_bounds"], host_id, min_seconds, max_seconds,
                            windows)
    return [_bounded(r) for r in rows]


async def set_pattern_bounds(conn: asyncpg.Connection, pattern: str, min_seconds: float | None,
                             max_seconds: float | None, windows: str | None
                             ) -> list[BoundedUrl]:
    rows = await conn.fetch(QUERIES["set_pattern_bounds"], pattern, min_seconds, max_seconds,
                            windows)
    return [_bounded(r) for r in rows]


async def apply_schedule_rules(conn: asyncpg.Connection, urls: Sequence[BoundedUrl]
                               ) -> list[BoundedUrl]:
    """Give these URLs the rule now in force for them (or none), due times moved into it."""
    rows = await conn.fetch(QUERIES["apply_schedule_rules"], [u.id for u in urls],
                            [u.host_id for u in urls])
    return [row_as(BoundedUrl, r) for r in rows]


async def move_due_times(conn: asyncpg.Connection,
                         moves: Sequence[tuple[int, dt.datetime | None, int]]) -> None:
    """New due times: (URL id, due, host id) each."""
    await conn.fetch(QUERIES["move_due_times"], [m[0] for m in moves], [m[1] for m in moves],
                     [m[2] for m in moves])


@dataclass(frozen=True, slots=True)
class ScheduleRule:
    """A stored schedule rule: its kind ('url', 'host' or 'pattern'), target and bounds."""

    kind: str
    target: str
    min_interval_seconds: float | None
    max_interval_seconds: float | None
    windows: str


async def schedule_rules(conn: asyncpg.Connection) -> list[ScheduleRule]:
    return [row_as(ScheduleRule, r) for r in await conn.fetch(QUERIES["schedule_rules"])]


async def delete_schedule_rule(conn: asyncpg.Connection, kind: str, target: str) -> bool:
    """Delete a rule; whether there was one."""
    return bool(await conn.fetch(QUERIES["delete_schedule_rule"], kind, target))


async def store_schedule_rule(conn: asyncpg.Connection, kind: str, target: str,
                              min_seconds: float | None, max_seconds: float | None,
                              windows: str, window_spans: list[float] | None) -> None:
    await conn.fetch(QUERIES["store_schedule_rule"], kind, target, min_seconds, max_seconds,
                     windows, window_spans)
