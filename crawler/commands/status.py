"""``crawler status`` and ``crawler show URL``: the frontier at a glance, and one URL's record."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from crawler.commands.context import load_settings, normalized, resolve_url
from crawler.commands.options import add_command, non_negative_int, positive_int
from crawler.status import LISTED, collect_status, collect_url, more_hint, render_status, render_url


def cmd_status(args: argparse.Namespace) -> int:
    status = asyncio.run(collect_status(resolve_url(load_settings(args)), args.limit,
                                        args.offset))
    if (hint := more_hint(status)) is not None:
        print(hint, file=sys.stderr)
    print(json.dumps(status, indent=2, sort_keys=True) if args.json else render_status(status))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    url = normalized(args.url)
    shown = asyncio.run(collect_url(resolve_url(load_settings(args)), url, args.limit))
    if shown is None:
        print(f"unknown URL: {url}", file=sys.stderr)
        return 1
    print(json.dumps(shown, indent=2, sort_keys=True) if args.json else render_url(shown))
    return 0


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
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
