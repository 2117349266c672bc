"""``crawler status`` and ``crawler show URL``: the frontier at a glance, and one URL's record."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from crawler.commands.context import load_settings, resolve_url
from crawler.commands.options import add_command, non_negative_int, positive_int
from crawler.core.links import normalize_url
from crawler.status import LISTED, collect_status, collect_url, more_hint, render_status, render_url


def cmd_status(args: argparse.Namespace) -> int:
    settings = load_settings(args)
    status = asyncio.run(collect_status(resolve_url(settings), args.limit, args.offset))
    hint = more_hint(status)
    if hint is not None:
        print(hint, file=sys.stderr)
    if args.json:
        print(json.dumps(status, indent=2, sort_keys=True))
    else:
        print(render_status(status))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    settings = load_settings(args)
    url = normalize_url(args.url) or args.url
    shown = asyncio.run(collect_url(resolve_url(settings), url, args.limit))
    if shown is None:
        print(f"unknown URL: {url}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(shown, indent=2, sort_keys=True))
    else:
        print(render_url(shown))
    return 0


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add `status` and `show`."""
    p = add_command(subparsers, "status", cmd_status, "Summary of the frontier and recent "
                    "fetching, with its lists (most overdue URLs, hosts in backoff, paused, "
                    "refused) paged.")
    p.add_argument("--limit", type=positive_int, default=LISTED,
                   help=f"Rows of each list per page (default {LISTED}); the most "
                   "overdue URLs are the first this many.")
    p.add_argument("--offset", type=non_negative_int, default=0,
                   help="Hosts skipped in each host list (the next page).")
    p.add_argument("--json", action="store_true", help="Machine-readable output.")

    p = add_command(subparsers, "show", cmd_show,
                    "One URL's row and its observations, newest first.")
    p.add_argument("url", metavar="URL")
    p.add_argument("--limit", type=non_negative_int, default=50,
                   help="Observations shown (default 50).")
    p.add_argument("--json", action="store_true", help="Machine-readable output.")
