"""`crawler sites`, for sites read through their sitemaps and feeds (issue 37): each site's
files, when each was read and is read next, and how many URLs it listed, added and dropped
at its last change, with the site's URLs no sitemap lists any more."""

from __future__ import annotations

import datetime as dt
from typing import Any

from crawler.db.queries import QUERIES

# The columns `crawler sites` prints for each file, in order.
COLUMNS = ("url", "kind", "source", "read_at", "status", "listed", "added", "dropped",
           "changed_at", "next_read_at", "problem")


def _iso(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return None if value.year in (1, 9999) else value.isoformat(timespec="seconds")
    return value


async def sitemap_sites(conn: Any) -> list[dict[str, Any]]:
    """One entry per host with sitemaps: its origin, its unlisted URLs, its files."""
    hosts = [r["host_id"] for r in await conn.fetch(QUERIES["sitemap_host_ids"])]
    if not hosts:
        return []
    unlisted = {r["host_id"]: r["unlisted"]
                for r in await conn.fetch(QUERIES["unlisted_counts"], hosts)}
    from crawler.core.hostid import host_id

    sites: dict[str, dict[str, Any]] = {}
    for r in await conn.fetch(QUERIES["host_sitemaps"], hosts):
        site = sites.setdefault(r["origin"], {
            "origin": r["origin"], "unlisted": unlisted.get(host_id(r["origin"]), 0),
            "sitemaps": []})
        site["sitemaps"].append({
            "url": r["url"], "kind": r["kind"], "source": r["source"],
            "found_on": r["found_on"], "robots_origin": r["robots_origin"],
            "depth": r["depth"], "read_at": _iso(r["read_at"]), "status": r["status"],
            "listed": r["listed"], "added": r["added"], "dropped": r["dropped"],
            "rejected": r["rejected"], "changed_at": _iso(r["changed_at"]),
            "next_read_at": _iso(r["next_read_at"]), "reads": r["reads"],
            "changes": r["changes"], "change_rate_per_day": r["change_rate_per_day"],
            "cut": r["cut"], "error": r["error"], "repaired": r["repaired"],
        })
    return list(sites.values())


def problem(sitemap: dict[str, Any]) -> str | None:
    """Why a file was not read whole, in a few words."""
    parts = []
    if sitemap["error"]:
        parts.append(str(sitemap["error"])[:60])
    if sitemap["cut"]:
        parts.append(f"cut at {sitemap['cut']}")
    if sitemap["repaired"]:
        parts.append(f"{sitemap['repaired']} bad bytes")
    return "; ".join(parts) or None


def render(sites: list[dict[str, Any]], table: Any) -> str:
    """The text of each site's files (``table``: the CLI's table printer)."""
    blocks = []
    for site in sites:
        rows = [{**s, "problem": problem(s)} for s in site["sitemaps"]]
        blocks.append(f"sitemaps of {site['origin']} ({site['unlisted']} URLs no longer "
                      f"listed)\n{table(rows, COLUMNS)}")
    return "\n\n".join(blocks)
