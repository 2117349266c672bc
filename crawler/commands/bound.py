"""``crawler bound URL | --pattern REGEX | --host ORIGIN [--at-least-every D]
[--at-most-every D] [--window W ...] [--clear]``, and ``crawler bound --list``: a watcher's
own schedule for some URLs.

``--at-least-every 30s``: the URL is fetched at least that often, whatever the plan would
give it. ``--at-most-every 10m``: never more often. ``--window 'Mon-Fri 08:00-18:00'``
(UTC, repeatable): fetches happen only inside these weekly windows; a fetch due outside
waits for the next window. Durations take s, m, h, d or w.

The planner treats the bounds as constraints on each URL's rate and spends the rest of the
budget optimally on the others (docs/SCHEDULING.md). A rule replaces the URL's previous one;
``--clear`` removes it. ``--pattern`` (a regular expression, matched as PostgreSQL's ``~``
does) and ``--host`` set the rule on every known URL they match, and on every URL that
arrives later (seeded, discovered by a link, found in a sitemap). Where several rules match a
URL, the one set last holds, as it would on a URL known when they were all set; after
``--clear`` a URL takes the rule that then matches it last, or none. ``crawler show URL``
says which bound is binding.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import asyncpg

from crawler.commands.context import with_conn
from crawler.commands.options import add_collection_options, plain
from crawler.commands.windows import site_origin
from crawler.core.hostid import host_id
from crawler.core.links import normalize_url
from crawler.core.patterns import PatternError, compile_pattern
from crawler.core.url_bounds import (
    BoundError,
    check_bounds,
    next_allowed,
    parse_duration,
    parse_windows,
)
from crawler.db import rules
from crawler.db.frontier import refresh_hosts, to_datetime
from crawler.db.rules import BoundedUrl
from crawler.errors import UserError
from crawler.status import rule_shown


def duration_option(text: str) -> float:
    """An argparse type for a duration: a bad one is a one-line usage error."""
    try:
        return parse_duration(text)
    except BoundError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _target(args: argparse.Namespace) -> tuple[str, str]:
    """(kind, target) of the command line: a URL, a pattern or a host origin."""
    given = [k for k, v in (("url", args.url), ("pattern", args.pattern), ("host", args.host))
             if v is not None]
    if len(given) != 1:
        raise UserError("crawler bound: give one of URL, --pattern REGEX or --host ORIGIN")
    if args.pattern is not None:
        try:
            compile_pattern(args.pattern, "--pattern")
        except PatternError as error:
            raise UserError(str(error)) from None
        return "pattern", args.pattern
    if args.host is not None:
        origin = site_origin(args.host)
        if origin is None:
            raise UserError(f"--host {args.host!r} is not an origin (scheme://host[:port])")
        return "host", origin
    url = normalize_url(args.url)
    if url is None:
        raise UserError(f"{args.url!r} is not a URL (crawler bound URL)")
    return "url", url


def window_spans(windows: str) -> list[float] | None:
    """The rule's windows as stored for SQL (``schedule_rules.window_spans``): the week spans
    of ``parse_windows``, flattened [begin, end, begin, end, ...]; None for none."""
    parsed = parse_windows(windows)
    return None if parsed is None else [x for span in parsed.spans for x in span]


async def check_pattern(conn: asyncpg.Connection, pattern: str) -> None:
    """Refuse a regular expression PostgreSQL's ``~`` does not take, before a rule holding
    it is stored (every stored pattern is run on every new URL)."""
    try:
        await rules.check_pattern(conn, pattern)
    except asyncpg.InvalidRegularExpressionError as error:
        raise UserError(f"--pattern {pattern!r}: {error}") from None


async def _apply(
    conn: asyncpg.Connection, kind: str, target: str,
    min_seconds: float | None, max_seconds: float | None, windows: str, clear: bool,
) -> list[BoundedUrl]:
    """Copy the rule onto the matching URLs' rows, due times moved into its bounds and
    windows; the rows, with their new due times. With ``clear``, the URLs it matched take
    the rule now in force for them instead (another that matches them), or none."""
    bounds = (min_seconds, max_seconds, windows or None)
    if kind == "url":
        rows = await rules.set_url_bounds(conn, target, *bounds)
    elif kind == "host":
        rows = await rules.set_host_bounds(conn, host_id(target), *bounds)
    else:
        rows = await rules.set_pattern_bounds(conn, target, *bounds)
    if clear and rows:
        rows = await rules.apply_schedule_rules(conn, rows)
    if windows:
        await _into_windows(conn, rows, windows)
    return rows


async def _into_windows(conn: asyncpg.Connection, rows: list[BoundedUrl], windows: str) -> None:
    """Due times outside the windows move to the start of the next one."""
    allowed = parse_windows(windows)
    moved = [(r.id, next_allowed(allowed, r.next_fetch_at), r.host_id) for r in rows
             if math.isfinite(r.next_fetch_at)
             and next_allowed(allowed, r.next_fetch_at) != r.next_fetch_at]
    if moved:
        await rules.move_due_times(conn, [(i, to_datetime(due), h) for i, due, h in moved])


async def _bound(conn: asyncpg.Connection, args: argparse.Namespace) -> str:
    if args.list:
        return "\n".join(
            f"{r.kind:<8} {r.target}: "
            f"{rule_shown(r.min_interval_seconds, r.max_interval_seconds, r.windows)}"
            for r in await rules.schedule_rules(conn)
        ) or "no schedule rules"
    kind, target = _target(args)
    windows = "; ".join(args.window or ())
    try:
        check_bounds(args.at_most_every, args.at_least_every)
        parse_windows(windows)
    except BoundError as error:
        raise UserError(f"crawler bound: {error}") from None
    if args.clear:
        if args.at_most_every or args.at_least_every or windows:
            raise UserError("crawler bound: --clear removes the rule; give no bounds with it")
        min_seconds = max_seconds = None
    elif args.at_most_every is None and args.at_least_every is None and not windows:
        raise UserError("crawler bound: give --at-least-every, --at-most-every, --window, "
                        "--clear or --list")
    else:
        min_seconds, max_seconds = args.at_most_every, args.at_least_every
    rule = (kind, target, min_seconds, max_seconds, windows, args.clear)
    # The rule is committed first: from then on a trigger gives it to every URL that arrives.
    # sync_new_url_rules then enables that trigger (or disables it with no rule left) and
    # waits for the inserts that ran before the commit, so the update that follows finds them.
    rows: list[BoundedUrl] = []
    removed = False
    async with conn.transaction():
        if kind == "pattern":
            await check_pattern(conn, target)
        if args.clear:
            removed = await rules.delete_schedule_rule(conn, kind, target)
        else:
            await rules.store_schedule_rule(conn, kind, target, min_seconds, max_seconds,
                                            windows, window_spans(windows))
        if kind == "url":  # one known URL: its row in the same transaction
            rows = await _apply(conn, *rule)
            if not rows and not (args.clear and removed):
                raise UserError(f"unknown URL {target}: seed it first (crawler seed URL)")
    await rules.sync_new_url_rules(conn)
    if kind != "url":
        async with conn.transaction():
            rows = await _apply(conn, *rule)
    await refresh_hosts(conn, {r.host_id for r in rows})
    what = rule_shown(min_seconds, max_seconds, windows)
    if args.clear:  # the URLs another rule matches took it
        ruled = [r for r in rows if r.own_min_interval_seconds is not None
                 or r.own_max_interval_seconds is not None or r.fetch_windows]
        if kind == "url" and ruled:
            r = ruled[0]
            what = "rule removed; another rule matches it: " + rule_shown(
                r.own_min_interval_seconds, r.own_max_interval_seconds, r.fetch_windows or "")
        elif ruled:
            what += f" ({len(ruled)} of them under another rule that matches them)"
    if kind == "url":
        return f"{target}: {what}"
    return f"{len(rows)} URLs of {kind} '{target}': {what}"


def run(args: argparse.Namespace) -> int:
    print(with_conn(args, lambda conn: _bound(conn, args)))
    return 0


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    text = ("Bound how often URLs are fetched (at least / at most every D) and when "
            "(weekly windows, UTC); the planner spends the rest of the budget optimally.")
    parser = subparsers.add_parser("bound", help=text, description=plain(__doc__),
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url", metavar="URL", nargs="?", default=None)
    parser.add_argument("--pattern", metavar="REGEX", default=None,
                        help="Every URL this regular expression matches, known now or "
                             "arriving later.")
    parser.add_argument("--host", metavar="ORIGIN", default=None,
                        help="Every URL of this host (scheme://host[:port]), known now or "
                             "arriving later.")
    parser.add_argument("--at-least-every", type=duration_option, default=None, metavar="D",
                        help="Fetch at least this often (the longest interval): 30s, 1h, 1d.")
    parser.add_argument("--at-most-every", type=duration_option, default=None, metavar="D",
                        help="Never fetch more often than this (the shortest interval).")
    parser.add_argument("--window", action="append", default=None, metavar="W",
                        help="Fetch only inside this weekly window, UTC: 'Mon-Fri "
                             "08:00-18:00', 'Sat,Sun 10:00-12:00', '22:00-06:00' (repeatable).")
    parser.add_argument("--clear", action="store_true", help="Remove the rule.")
    parser.add_argument("--list", action="store_true", help="List every rule.")
    add_collection_options(parser)
    parser.set_defaults(func=run, needs_db="schema")
