"""``crawler watch URL [--watch CSS] [--ignore CSS] [--clear] [--window]``: the watched region.

A region restricts the visible text that the fingerprint, the change decision and the diff use
(crawler.core.region): ``--watch`` keeps only the matching elements, ``--ignore`` removes them.
It is stored on the URL, or with ``--window`` on its windowed site for every page without a
region of its own. The next fetch after a change of region takes a new baseline fingerprint
and is not counted as a change of the page.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import asyncpg

from crawler.commands.errors import UserError
from crawler.commands.options import plain
from crawler.core.region import Region, SelectorError, checked_selector
from crawler.db.queries import QUERIES
from crawler.status import region_shown


def css_option(option: str) -> Any:
    """An argparse type that checks a CSS selector: a bad one is a one-line usage error."""

    def check(text: str) -> str:
        try:
            return checked_selector(text, option) or ""
        except SelectorError as error:
            # argparse names the option itself.
            raise argparse.ArgumentTypeError(str(error).removeprefix(f"{option}: ")) from None

    return check


def add_region_options(parser: argparse.ArgumentParser, target: str) -> None:
    parser.add_argument(
        "--watch", type=css_option("--watch"), default=None, metavar="CSS",
        help=f"Only the text of the elements this CSS selector matches counts for {target} "
             "(fingerprint, change decision, diff).",
    )
    parser.add_argument(
        "--ignore", type=css_option("--ignore"), default=None, metavar="CSS",
        help=f"The elements this CSS selector matches do not count for {target} "
             "(a navigation bar, an advertisement, a clock).",
    )


def wanted(args: argparse.Namespace) -> bool:
    """Whether the command line set any part of a region."""
    return args.watch is not None or args.ignore is not None


async def store_region(
    conn: asyncpg.Connection, urls: Sequence[str], region: Region, *, window: bool
) -> int:
    """Store ``region`` on ``urls`` (or, with ``window``, on the site rooted at ``urls[0]``);
    how many rows took it."""
    if window:
        done = await conn.fetch(QUERIES["set_site_region"], urls[0], region.watch, region.ignore)
    else:
        done = await conn.fetch(QUERIES["set_url_region"], list(urls), region.watch,
                                region.ignore)
    return len(done)


def _merged(old: Region, args: argparse.Namespace) -> Region:
    """The options given replace their part ('' removes it); --clear starts from nothing."""
    base = Region() if args.clear else old
    watch = base.watch if args.watch is None else (args.watch or None)
    ignore = base.ignore if args.ignore is None else (args.ignore or None)
    return Region(watch, ignore)


async def _watch(conn: asyncpg.Connection, args: argparse.Namespace) -> str:
    from crawler.commands.windows import resolve_site
    from crawler.core.links import normalize_url

    url = normalize_url(args.url)
    if url is None:
        raise UserError(f"{args.url!r} is not a URL (crawler watch URL)")
    row = await conn.fetchrow(QUERIES["url_region"], url)
    if args.window:
        root = await resolve_site(conn, url, f"watch --window: the site of {url}")
        site = await conn.fetchrow(QUERIES["url_region"], root)
        old = Region(site["site_watch_css"], site["site_ignore_css"]) if site else Region()
        if not (wanted(args) or args.clear):
            return f"window of {root}: {old.describe()}"
        region = _merged(old, args)
        await store_region(conn, [root], region, window=True)
        return f"window of {root}: {region.describe()}"
    if row is None:
        raise UserError(f"unknown URL {url}: seed it first (crawler seed URL)")
    if not (wanted(args) or args.clear):
        return f"{url}: {region_shown(row)}"
    region = _merged(Region(row["watch_css"], row["ignore_css"]), args)
    await store_region(conn, [url], region, window=False)
    return f"{url}: {region_shown(await conn.fetchrow(QUERIES['url_region'], url))}"


def run(args: argparse.Namespace) -> int:
    from crawler.commands.collection_args import with_conn

    print(with_conn(args, lambda conn: _watch(conn, args)), file=sys.stdout)
    return 0


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    text = "Show or change the watched region of a URL (or, with --window, of its site)."
    parser = subparsers.add_parser("watch", help=text, description=plain(__doc__),
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url", metavar="URL")
    add_region_options(parser, "this URL")
    parser.add_argument("--clear", action="store_true",
                        help="Remove the region (the whole page counts again); with --watch "
                             "or --ignore, start from nothing rather than the current region.")
    parser.add_argument("--window", action="store_true",
                        help="Set the region of the URL's windowed site (every page of the "
                             "window without a region of its own).")
    from crawler.commands.collection_args import add_options

    add_options(parser)
    parser.set_defaults(func=run, needs_db="schema")


async def seed_region(
    conn: asyncpg.Connection, urls: Sequence[str], args: argparse.Namespace, *, window: bool
) -> None:
    """``crawler seed --watch/--ignore``: the region given, stored on what was just seeded
    (a re-seed without the options leaves a stored region alone)."""
    if wanted(args):
        region = Region(args.watch or None, args.ignore or None)
        await store_region(conn, urls, region, window=window)
