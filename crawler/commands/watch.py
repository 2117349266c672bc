"""``crawler watch URL [--watch CSS] [--ignore CSS] [--clear] [--exact | --no-exact]
[--window | --pattern]``: the watched region, and how its changes are judged.

A region restricts the visible text that the fingerprint, the change decision and the diff use
(crawler.core.region): ``--watch`` keeps only the matching elements, ``--ignore`` removes them.
``--exact`` makes any change of that text a change, numbers included (a price from 12.50 to
15.99); by default a change is a simhash distance of at least the threshold, which a few
changed words on a long page do not reach. ``--no-exact`` goes back to that.

Both are stored on the URL, or with ``--window`` on its windowed site for every page without
a region of its own, or with ``--pattern`` (URL is then a regular expression, matched as
PostgreSQL's ``~`` does) on every known URL it matches and on every URL that arrives later
(seeded, discovered by a link, found in a sitemap): for each part (exactness, ``--watch``,
``--ignore``), of the patterns matching a URL the one that set it last, as on a URL known when
they were all run. The next fetch after a change of rule is compared with the previous stored
version under the new rule (when versions are stored), not taken as a new baseline.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import asyncpg

from crawler.commands.bound import check_pattern
from crawler.commands.context import with_conn
from crawler.commands.options import add_collection_options, plain
from crawler.commands.windows import resolve_site
from crawler.core.links import normalize_url
from crawler.core.patterns import PatternError, compile_pattern
from crawler.core.region import Region, SelectorError, checked_selector
from crawler.db import rules
from crawler.errors import UserError
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
        "--exact", action=argparse.BooleanOptionalAction, default=None,
        help=f"Any change of the visible text of {target} (of its watched region) is a "
             "change, numbers included; --no-exact: a change is a simhash distance of at "
             "least the threshold (the default).",
    )
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
    """Whether the command line set a part of a region."""
    return args.watch is not None or args.ignore is not None


def rule_shown(exact: bool, source: str | None = None) -> str:
    """How the URL's changes are judged, for ``crawler watch``'s answer."""
    if not exact:
        return "changes: simhash distance of at least the threshold"
    return "changes: any change of the text (exact" + (f", {source})" if source else ")")


async def store_exact(
    conn: asyncpg.Connection, urls: Sequence[str], exact: bool, *, window: bool
) -> None:
    """Store exactness on ``urls`` (or, with ``window``, on the site rooted at ``urls[0]``)."""
    if window:
        await rules.set_site_exact(conn, urls[0], exact)
    else:
        await rules.set_url_exact(conn, urls, exact)


async def _url_rule(conn: asyncpg.Connection, url: str) -> str:
    exact = await rules.url_exact(conn, url)
    if exact is None or not any(exact):
        return rule_shown(False)
    return rule_shown(True, "the URL's own" if exact[0] else "its window's")


def _pattern_parts(args: argparse.Namespace) -> dict[str, str]:
    """The parts a ``--pattern`` command sets, as ``watch_rules`` stores them: 'exact' ('true'
    or 'false'), 'watch' and 'ignore' (a selector, '' for none; ``--clear`` empties both
    unless given)."""
    parts: dict[str, str] = {}
    if args.exact is not None:
        parts["exact"] = "true" if args.exact else "false"
    for part, given in (("watch", args.watch), ("ignore", args.ignore)):
        if given is not None:
            parts[part] = given
        elif args.clear:
            parts[part] = ""
    return parts


async def _watch_pattern(conn: asyncpg.Connection, args: argparse.Namespace) -> str:
    """``--pattern``: the rule set on every known URL the regular expression matches, and
    stored for those that arrive later."""
    try:
        compile_pattern(args.url, "--pattern")
    except PatternError as error:
        raise UserError(str(error)) from None
    if args.window:
        raise UserError("--pattern and --window name different things; give one")
    if not (wanted(args) or args.clear or args.exact is not None):
        raise UserError("--pattern: give what to set (--exact, --no-exact, --watch, "
                        "--ignore or --clear)")
    # Stored for the URLs that arrive later, committed before the known URLs are updated, as
    # crawler bound does.
    async with conn.transaction():
        await check_pattern(conn, args.url)
        await rules.store_watch_rule(conn, args.url, _pattern_parts(args))
    await rules.sync_new_url_rules(conn)
    done = await rules.set_pattern_rule(conn, args.url, args.exact, args.watch, args.ignore,
                                        args.clear)
    what = [] if args.exact is None else [rule_shown(args.exact)]
    if wanted(args) or args.clear:
        what.append("region " + Region(args.watch or None, args.ignore or None).describe())
    # Quoted as typed: repr would double every backslash of the expression.
    return f"{done} URLs matching '{args.url}': {'; '.join(what)}"


async def store_region(
    conn: asyncpg.Connection, urls: Sequence[str], region: Region, *, window: bool
) -> int:
    """Store ``region`` on ``urls`` (or, with ``window``, on the site rooted at ``urls[0]``);
    how many rows took it."""
    if window:
        return await rules.set_site_region(conn, urls[0], region.watch, region.ignore)
    return await rules.set_url_region(conn, urls, region.watch, region.ignore)


def _merged(old: Region, args: argparse.Namespace) -> Region:
    """The options given replace their part ('' removes it); --clear starts from nothing."""
    base = Region() if args.clear else old
    watch = base.watch if args.watch is None else (args.watch or None)
    ignore = base.ignore if args.ignore is None else (args.ignore or None)
    return Region(watch, ignore)


async def _watch(conn: asyncpg.Connection, args: argparse.Namespace) -> str:
    if args.pattern:
        return await _watch_pattern(conn, args)
    url = normalize_url(args.url)
    if url is None:
        raise UserError(f"{args.url!r} is not a URL (crawler watch URL)")
    row = await rules.url_region(conn, url)
    if args.window:
        root = await resolve_site(conn, url, f"watch --window: the site of {url}")
        site = await rules.url_region(conn, root)
        region = Region(site.site_watch_css, site.site_ignore_css) if site else Region()
        if wanted(args) or args.clear:
            region = _merged(region, args)
            await store_region(conn, [root], region, window=True)
        if args.exact is not None:
            await store_exact(conn, [root], args.exact, window=True)
        exact = await rules.site_exact(conn, root)
        return f"window of {root}: {region.describe()}; {rule_shown(exact)}"
    if row is None:
        raise UserError(f"unknown URL {url}: seed it first (crawler seed URL)")
    if wanted(args) or args.clear:
        region = _merged(Region(row.watch_css, row.ignore_css), args)
        await store_region(conn, [url], region, window=False)
        row = await rules.url_region(conn, url)
        assert row is not None  # a URL removed meanwhile: as if it had no region
    if args.exact is not None:
        await store_exact(conn, [url], args.exact, window=False)
    return f"{url}: {region_shown(row)}; {await _url_rule(conn, url)}"


def run(args: argparse.Namespace) -> int:
    print(with_conn(args, lambda conn: _watch(conn, args)))
    return 0


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    text = ("Show or change the watched region of a URL (or, with --window, of its site), "
            "and whether any change of its text counts (--exact).")
    parser = subparsers.add_parser("watch", help=text, description=plain(__doc__),
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url", metavar="URL")
    add_region_options(parser, "this URL")
    parser.add_argument("--pattern", action="store_true",
                        help="URL is a regular expression: set the rule on every known URL it "
                             "matches and on every URL that arrives later (a window's pages "
                             "take its rule with --window).")
    parser.add_argument("--clear", action="store_true",
                        help="Remove the region (the whole page counts again); with --watch "
                             "or --ignore, start from nothing rather than the current region.")
    parser.add_argument("--window", action="store_true",
                        help="Set the region of the URL's windowed site (every page of the "
                             "window without a region of its own).")
    add_collection_options(parser)
    parser.set_defaults(func=run, needs_db="schema")


async def seed_region(
    conn: asyncpg.Connection, urls: Sequence[str], args: argparse.Namespace, *, window: bool
) -> None:
    """``crawler seed --watch/--ignore``: the region given, stored on what was just seeded
    (a re-seed without the options leaves a stored region alone)."""
    if wanted(args):
        region = Region(args.watch or None, args.ignore or None)
        await store_region(conn, urls, region, window=window)
    if args.exact is not None:
        await store_exact(conn, urls, args.exact, window=window)
