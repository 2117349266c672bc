"""Page windows in PostgreSQL: register sites, store observed out-links, update windows.

A fetch of a windowed site's page, its new out-links and the window it implies commit in one
transaction (``apply_window_update`` runs inside ``crawler.db.record.write_transition``). The
window moves from the links that changed (crawler.core.window_incremental), reading only the
rows and links they reach. Only the daemon holding the site's host lease touches a site, so
updating a site's window never races another daemon.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from crawler.core.model import UrlState
from crawler.core.patterns import site_filter
from crawler.core.transition import Transition
from crawler.core.window import (
    Lifespan,
    Membership,
    bfs_window,
    lifespan_histogram,
    visible_lifespan,
    window_changes,
)
from crawler.core.window_incremental import Facts, Need, Row, window_update
from crawler.db import frontier
from crawler.db.queries import QUERIES, row_as


@dataclass(frozen=True, slots=True)
class WindowedSite:
    """A site registered with a page window: its root URL and the window's size in pages."""

    id: int
    root_url: str
    window_size: int


async def windowed_sites(conn: asyncpg.Connection) -> list[WindowedSite]:
    """Every windowed site, by root URL (one row per site: a small table)."""
    return [row_as(WindowedSite, r) for r in await conn.fetch(QUERIES["list_sites"])]


async def register_site(conn: asyncpg.Connection, root_url: str, window_size: int) -> int:
    """A windowed site rooted at an already-seeded ``root_url``; returns its id."""
    site_id: int = await conn.fetchval(QUERIES["upsert_site"], root_url, window_size)
    await conn.execute(QUERIES["attach_window_root"], root_url, site_id)
    return site_id


async def set_site_patterns(
    conn: asyncpg.Connection, site_id: int, include: Sequence[str], exclude: Sequence[str]
) -> None:
    """A windowed site's own URL patterns (checked by the caller), replacing its old ones."""
    await conn.execute(QUERIES["set_site_patterns"], site_id, list(include), list(exclude))


async def site_link_filter(conn: asyncpg.Connection, site_id: int, targets: Sequence[str]
                           ) -> list[str]:
    """``targets`` the site's own patterns pass (the global ones ran in the transition). A
    stored pattern that no longer compiles is not skipped: it fails the fetch's transaction."""
    row = await conn.fetchrow(QUERIES["site_patterns"], site_id)
    if row is None or not (row["include_patterns"] or row["exclude_patterns"]):
        return list(targets)
    f = site_filter(row["include_patterns"], row["exclude_patterns"])
    return [t for t in targets if f.rejection(t) is None]


async def discover(conn: asyncpg.Connection, site_id: int, host_id: int,
                   targets: Sequence[str], first_fetch: bool) -> list[int]:
    """The ids of ``targets`` (unique), inserting the new ones; known rows are not rewritten.
    A URL a concurrent transaction inserted between the statement's read and its insert is
    left out of its answer; asking again (a new snapshot) finds it."""
    ids: dict[str, int] = {}
    for _ in range(3):
        missing = [t for t in targets if t not in ids]
        if not missing:
            break
        rows = await conn.fetch(
            QUERIES["discover_urls"], missing, [host_id] * len(missing), site_id, first_fetch
        )
        ids.update((r["url"], r["id"]) for r in rows)
    if len(ids) < len(targets):
        raise RuntimeError("discovered URLs kept vanishing under concurrent inserts")
    return [ids[t] for t in targets]


async def replace_out_links(
    conn: asyncpg.Connection, url_id: int, site_id: int, host_id: int, targets: Sequence[str],
    *, first_fetch: bool = False,
) -> tuple[list[int], list[int]]:
    """Replace a page's out-links with ``targets`` (same-site, normalised, in page order);
    the page's link ids before and after. New URLs join the site parked; those found on the
    page's first fetch existed before observation began."""
    unique = await site_link_filter(conn, site_id, list(dict.fromkeys(targets)))
    ids = await discover(conn, site_id, host_id, unique, first_fetch) if unique else []
    old = [r["to_url_id"] for r in await conn.fetch(QUERIES["out_links"], url_id, host_id)]
    if old != ids:
        gone = set(old) - set(ids)
        if gone:
            await conn.execute(QUERIES["delete_out_links_to"], url_id, list(gone), host_id)
        if ids:
            await conn.execute(QUERIES["upsert_out_links"], url_id, ids, host_id)
    return old, ids


async def _write_changes(conn: asyncpg.Connection, changes: Sequence[Membership], now: float,
                         host_id: int) -> None:
    if changes:
        await conn.execute(QUERIES["apply_window"], [c.url_id for c in changes],
                           [c.depth for c in changes], [c.in_window for c in changes],
                           frontier.to_datetime(now), host_id)


async def recompute_window(conn: asyncpg.Connection, site_id: int, now: float) -> int:
    """Recompute depths and membership from the whole stored graph (what a resize runs);
    returns rows changed. Links to another site's pages are not followed."""
    root = await conn.fetchrow(QUERIES["site_root"], site_id)
    if root is None:
        return 0
    graph: dict[int, list[int]] = defaultdict(list)
    for row in await conn.fetch(QUERIES["site_graph"], site_id, root["host_id"]):
        graph[row["from_url_id"]].append(row["to_url_id"])
    members = await conn.fetch(QUERIES["site_members"], site_id, root["host_id"])
    ours = {r["id"] for r in members}
    gone = {r["id"] for r in members if r["state"] == "gone"}
    foreign = {t for targets in graph.values() for t in targets if t not in ours}
    window, depths = bfs_window(graph, root["root_id"], root["window_size"], gone | foreign)
    changes = window_changes({r["id"]: (r["depth"], r["in_window"]) for r in members}, window,
                             depths)
    await _write_changes(conn, changes, now, root["host_id"])
    return len(changes)


def _row(r: asyncpg.Record) -> Row | None:
    return None if r["in_window"] is None else Row(r["depth"], r["in_window"], r["gone"])


async def _answer(conn: asyncpg.Connection, site_id: int, host_id: int, need: Need) -> Facts:
    """Answer a ``Need`` of the incremental update from indexed lookups only. Links come
    with the rows at their other end (none for another site's page), which it would ask next."""
    facts = Facts()
    if need.rows:
        for r in await conn.fetch(QUERIES["window_rows"], list(need.rows), site_id, host_id):
            facts.rows[r["id"]] = Row(r["depth"], r["in_window"], r["gone"])
    for pages, query, near, far, links in (
        (need.out_links, "window_out_links", "from_url_id", "to_url_id", facts.out_links),
        (need.in_links, "window_in_links", "to_url_id", "from_url_id", facts.in_links),
    ):
        if not pages:
            continue
        found: dict[int, list[int]] = defaultdict(list)
        for r in await conn.fetch(QUERIES[query], list(pages), site_id, host_id):
            found[r[near]].append(r[far])
            facts.rows.setdefault(r[far], _row(r))
        links.update(found)
    if need.summary:
        r = await conn.fetchrow(QUERIES["window_summary"], site_id, host_id)
        facts.window_count, facts.window_depth = r["pages"], r["deepest"]
    if need.members:
        rows = await conn.fetch(QUERIES["window_members"], site_id, host_id)
        facts.members = {r["id"]: r["depth"] for r in rows}
    return facts


async def update_window(
    conn: asyncpg.Connection, site_id: int, page: int, old_links: Sequence[int],
    new_links: Sequence[int], *, page_was_gone: bool, now: float,
) -> int:
    """Move the site's window after ``page``'s out-links changed (already stored), reading
    only the rows and links the change reaches; returns rows changed."""
    root = await conn.fetchrow(QUERIES["site_root"], site_id)
    if root is None:
        return 0
    if root["window_size"] <= 0:
        return await recompute_window(conn, site_id, now)
    update = window_update(root["root_id"], root["window_size"], page, old_links, new_links,
                           page_was_gone=page_was_gone)
    try:
        need = next(update)
        while True:
            need = update.send(await _answer(conn, site_id, root["host_id"], need))
    except StopIteration as stop:
        changes: list[Membership] = stop.value
    await _write_changes(conn, changes, now, root["host_id"])
    return len(changes)


async def apply_window_update(conn: asyncpg.Connection, t: Transition) -> None:
    """A windowed page's new out-links and the site's window, inside the fetch's transaction.
    ``out_links`` is None when the fetch saw no content (an error keeps the old links); a gone
    page loses its links. A gone page the page newly links to is due at once: the link says
    it may be back, and only a fetch that finds it back lets it into the window again."""
    window = t.window
    if window is None:
        return
    was_gone, now_gone = t.before.state == UrlState.GONE, t.record.state == UrlState.GONE
    if window.out_links is not None:
        old, new = await replace_out_links(
            conn, t.url_id, window.site_id, t.record.host_id, window.out_links,
            first_fetch=window.first_fetch,
        )
        added = set(new).difference(old)
        if added:
            await conn.execute(QUERIES["recheck_linked_gone"], list(added), t.record.host_id,
                               frontier.to_datetime(t.observation.fetched_at))
    elif was_gone != now_gone:
        old = new = [r["to_url_id"] for r in await conn.fetch(QUERIES["out_links"], t.url_id,
                                                               t.record.host_id)]
    else:
        return
    if old != new or was_gone != now_gone:
        await update_window(conn, window.site_id, t.url_id, old, new,
                            page_was_gone=was_gone, now=t.observation.fetched_at)


async def sites_summary(conn: asyncpg.Connection) -> list[dict[str, Any]]:
    sites = [
        {
            "root_url": r["root_url"], "window_size": r["window_size"],
            "include": list(r["include_patterns"]), "exclude": list(r["exclude_patterns"]),
            "in_window": r["in_window"], "discovered": r["discovered"], "entered": r["entered"],
            "left": r["left_window"], "created_at": frontier.to_iso(r["created_at"]),
        }
        for r in await conn.fetch(QUERIES["sites_summary"])
    ]
    for site in sites:
        site["lifespans"] = await site_lifespans(conn, site["root_url"])
    return sites


def _lifespan(row: asyncpg.Record) -> Lifespan | None:
    entered = row["entered_window_at"]
    if entered is None:
        return None
    left = row["left_window_at"]
    return visible_lifespan(
        entered.timestamp(),
        None if left is None or row["in_window"] else left.timestamp(),
        row["observed_until"].timestamp(),
        existed_before=row["discovered_initially"],
    )


async def site_urls(
    conn: asyncpg.Connection, root_url: str, *, state: str | None = None,
    limit: int | None = None, offset: int = 0,
) -> list[dict[str, Any]]:
    rows = await conn.fetch(QUERIES["site_urls"], root_url, state, limit, offset)
    return [
        {
            "url": r["url"], "depth": r["depth"], "in_window": r["in_window"],
            "status": r["last_status"], "state": r["state"],
            "entered_at": frontier.to_iso(r["entered_window_at"]),
            "left_at": frontier.to_iso(r["left_window_at"]),
            "last_fetched_at": frontier.to_iso(r["last_fetched_at"]),
            "last_attempt_at": frontier.to_iso(r["last_attempt_at"]),
            "last_outcome": r["last_outcome"], "fetch_count": r["fetch_count"],
            "change_count": r["change_count"], **_lifespan_fields(_lifespan(r)),
        }
        for r in rows
    ]


def _lifespan_fields(lifespan: Lifespan | None) -> dict[str, Any]:
    if lifespan is None:
        return {"lifespan_days": None, "lifespan_days_method2": None, "lifespan_censored": None}
    return {"lifespan_days": lifespan.method1_days, "lifespan_days_method2": lifespan.method2_days,
            "lifespan_censored": lifespan.censored}


async def site_lifespans(conn: asyncpg.Connection, root_url: str) -> dict[str, Any]:
    """Cho & Garcia-Molina's visible-lifespan histograms (Fig. 4) for a site, both methods."""
    rows = await conn.fetch(QUERIES["site_urls"], root_url, None, None, 0)
    lifespans = [span for span in map(_lifespan, rows) if span is not None]
    return {
        "pages": len(lifespans),
        "censored": sum(span.censored for span in lifespans),
        "method1": lifespan_histogram([s.method1_days for s in lifespans]),
        "method2": lifespan_histogram([s.method2_days for s in lifespans]),
    }
