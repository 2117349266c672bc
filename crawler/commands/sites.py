"""``crawler sites`` and ``crawler urls``: the windowed and sitemap-read sites, and URLs by page."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import asyncpg

from crawler.commands.context import table, with_conn
from crawler.commands.hosts import host_origin
from crawler.commands.options import add_command, non_negative_int, positive_int
from crawler.commands.sitemap_sites import render
from crawler.commands.windows import describe_patterns, resolve_site
from crawler.core.model import UrlState
from crawler.db.admin import list_urls, sitemap_sites
from crawler.db.windows import site_urls, sites_summary
from crawler.errors import UserError


def cmd_sites(args: argparse.Namespace) -> int:
    async def both(conn: asyncpg.Connection) -> tuple[Any, Any]:
        return await sites_summary(conn), await sitemap_sites(conn)

    sites, sitemapped = with_conn(args, both)
    if args.json:  # windowed sites (root_url), then sites read through sitemaps (origin)
        print(json.dumps(sites + sitemapped, indent=2))
    else:
        rows = [{**s, "patterns": describe_patterns(s["include"], s["exclude"])} for s in sites]
        if sites or not sitemapped:
            print(table(rows, ("root_url", "window_size", "in_window", "discovered",
                               "entered", "left", "patterns")))
        if sitemapped:
            print(("\n" if sites else "") + render(sitemapped, table))
    return 0


def cmd_urls(args: argparse.Namespace) -> int:
    """A windowed site's URLs (--site), or any URLs by host and state, one page at a time."""
    states = [state.value for state in UrlState]
    if args.state is not None and args.state not in states:
        raise UserError(f"--state {args.state!r} is not a URL state; states: "
                        + ", ".join(states))
    if args.site is not None:
        if args.host is not None:
            raise UserError("urls: --site already names one host; give --site or --host, "
                            "not both")

        async def fetch(conn: asyncpg.Connection) -> Any:
            # One row past the page: whether there is a next one.
            return await site_urls(conn, await resolve_site(conn, args.site),
                                   state=args.state, limit=args.limit + 1, offset=args.offset)

        rows = with_conn(args, fetch)
        urls = rows[: args.limit]
        columns: tuple[str, ...] = ("url", "depth", "in_window", "status", "entered_at",
                                    "left_at")
        more = len(rows) > args.limit
    else:
        origin = host_origin(args.host) if args.host else None
        urls = with_conn(args, lambda conn: list_urls(conn, origin, args.state, args.offset,
                                                      args.limit))
        columns = ("url", "state", "importance", "last_status", "last_outcome",
                   "last_attempt_at", "last_fetched_at", "next_fetch_at", "unlisted_at")
        more = len(urls) == args.limit
    if more:
        print(f"more: crawler urls ... --offset {args.offset + args.limit}", file=sys.stderr)
    print(json.dumps(urls, indent=2) if args.json else table(urls, columns))
    return 0


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    p = add_command(subparsers, "sites", cmd_sites, "Windowed sites: window size, pages in it, "
                    "discovered, entered and left; sites read through sitemaps: each file, when "
                    "it was read, URLs it listed, added and dropped.")
    p.add_argument("--json", action="store_true", help="Machine-readable output.")

    p = add_command(subparsers, "urls", cmd_urls, "List URLs, paged: any URL by host and "
                    "state, or a windowed site's with depth, membership and times.")
    p.add_argument("--site", metavar="URL", help="A windowed site (any URL of its origin); "
                   "--state, --limit and --offset apply to it too.")
    p.add_argument("--host", metavar="ORIGIN", help="Only this host's URLs.")
    p.add_argument("--state", help="Only URLs in this state (new, active, gone, ...).")
    p.add_argument("--limit", type=positive_int, default=100, help="URLs per page (default 100).")
    p.add_argument("--offset", type=non_negative_int, default=0,
                   help="URLs skipped (the next page).")
    p.add_argument("--json", action="store_true", help="Machine-readable output.")
