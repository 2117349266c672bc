"""Naming a windowed site from the command line, and (re)registering its window.

A site is its scheme and host: ``http://h:8765/``, ``http://h:8765`` and the seeded
root URL all name the same one, and an origin has one window at most.
"""

from __future__ import annotations

import asyncpg

from crawler.core.links import normalize_url
from crawler.core.patterns import describe
from crawler.db.frontier import origin_of
from crawler.db.windows import (
    WindowedSite,
    recompute_window,
    register_site,
    set_site_patterns,
    windowed_sites,
)
from crawler.errors import UserError


def site_origin(text: str) -> str | None:
    """The origin a user's spelling of a site names, or None when it is not a URL."""
    normalized = normalize_url(text.strip())
    return None if normalized is None else origin_of(normalized)


async def resolve_site(conn: asyncpg.Connection, text: str, named: str | None = None) -> str:
    """The root URL of the windowed site ``text`` names; an error listing the known ones.

    ``named``: how the error names ``text`` (default ``--site 'TEXT'``, the option that gave
    it; `watch --window` has no --site)."""
    sites = await windowed_sites(conn)
    origin = site_origin(text)
    for site in sites:
        if origin is not None and origin_of(site.root_url) == origin:
            return site.root_url
    known = ", ".join(origin_of(s.root_url) for s in sites) or "none (seed one with --window)"
    what = "not a site URL" if origin is None else "not a windowed site"
    named = f"--site {text!r}" if named is None else named
    raise UserError(f"{named} is {what}; known sites: {known}")


async def window_of_origin(conn: asyncpg.Connection, root_url: str) -> WindowedSite | None:
    """The existing window of ``root_url``'s site; refuses a second root on one origin."""
    origin = origin_of(root_url)
    existing = [s for s in await windowed_sites(conn) if origin_of(s.root_url) == origin]
    if existing and existing[0].root_url != root_url:
        raise UserError(f"site {origin} already has a window rooted at "
                        f"{existing[0].root_url}; a site has one window: seed that root "
                        "with --window N to resize it")
    return existing[0] if existing else None


async def register_window(conn: asyncpg.Connection, root_url: str, size: int,
                          now: float, patterns: tuple[list[str], list[str]] | None = None
                          ) -> str:
    """Register (or resize) the window of ``root_url``'s site; what happened, in one line.

    A new size takes effect at once (recomputed in the same transaction). ``patterns``
    (include, exclude), when given, replace the site's own in that transaction, before its
    root can be fetched: no link escapes them.
    """
    origin = origin_of(root_url)
    existing = await window_of_origin(conn, root_url)
    async with conn.transaction():
        site_id = await register_site(conn, root_url, size)
        if patterns is not None:
            await set_site_patterns(conn, site_id, *patterns)
        if existing is None:
            return f"site {origin}: window of {size} pages rooted at {root_url}"
        old = existing.window_size
        if old == size:
            return f"site {origin}: window of {size} pages rooted at {root_url} (unchanged)"
        changed = await recompute_window(conn, site_id, now)
        return (f"site {origin}: window resized from {old} to {size} pages, in effect now "
                f"({changed} pages changed membership)")


def describe_patterns(include: list[str], exclude: list[str]) -> str:
    """A site's own patterns in one cell: ``+INCLUDE ... -EXCLUDE ...`` ('-' when none)."""
    return describe(include, exclude) or "-"


def patterns_line(root_url: str, include: list[str], exclude: list[str]) -> str:
    """What `seed --window --include/--exclude` put in force, in one line."""
    return (f"site {origin_of(root_url)}: URL patterns {describe_patterns(include, exclude)} "
            "(after CRAWLER_INCLUDE / CRAWLER_EXCLUDE)")
