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
import sys
from typing import Any

import asyncpg

from crawler.commands.errors import UserError
from crawler.commands.options import plain
from crawler.core.url_bounds import (
    BoundError,
    binding_bound,
    check_bounds,
    duration_shown,
    next_allowed,
    parse_duration,
    parse_windows,
)
from crawler.db.queries import QUERIES


def duration_option(option: str) -> Any:
    """An argparse type for a duration: a bad one is a one-line usage error."""

    def check(text: str) -> float:
        try:
            return parse_duration(text)
        except BoundError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    del option
    return check


def rule_shown(min_seconds: float | None, max_seconds: float | None, windows: str) -> str:
    """A rule in the words of its options."""
    parts = []
    if max_seconds is not None:
        parts.append(f"at least every {duration_shown(max_seconds)}")
    if min_seconds is not None:
        parts.append(f"at most every {duration_shown(min_seconds)}")
    if windows:
        parts.append(f"only in {windows} (UTC)")
    return ", ".join(parts) or "no bounds"


def _target(args: argparse.Namespace) -> tuple[str, str]:
    """(kind, target) of the command line: a URL, a pattern or a host origin."""
    from crawler.commands.windows import site_origin
    from crawler.core.links import normalize_url

    given = [k for k, v in (("url", args.url), ("pattern", args.pattern), ("host", args.host))
             if v is not None]
    if len(given) != 1:
        raise UserError("crawler bound: give one of URL, --pattern REGEX or --host ORIGIN")
    if args.pattern is not None:
        from crawler.core.patterns import PatternError, compile_pattern

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
        await conn.fetchval(QUERIES["valid_pattern"], pattern)
    except asyncpg.InvalidRegularExpressionError as error:
        raise UserError(f"--pattern {pattern!r}: {error}") from None


async def _apply(
    conn: asyncpg.Connection, kind: str, target: str,
    min_seconds: float | None, max_seconds: float | None, windows: str, clear: bool,
) -> list[asyncpg.Record]:
    """Copy the rule onto the matching URLs' rows, due times moved into its bounds and
    windows; the rows, with their new due times. With ``clear``, the URLs it matched take
    the rule now in force for them instead (another that matches them), or none."""
    from crawler.core.hostid import host_id

    bounds = (min_seconds, max_seconds, windows or None)
    if kind == "url":
        rows = list(await conn.fetch(QUERIES["set_url_bounds"], [target], *bounds))
    elif kind == "host":
        rows = list(await conn.fetch(QUERIES["set_host_bounds"], host_id(target), *bounds))
    else:
        rows = list(await conn.fetch(QUERIES["set_pattern_bounds"], target, *bounds))
    if clear and rows:
        rows = list(await conn.fetch(QUERIES["apply_schedule_rules"], [r["id"] for r in rows],
                                     [r["host_id"] for r in rows]))
    if windows:
        await _into_windows(conn, rows, windows)
    return rows


async def _into_windows(conn: asyncpg.Connection, rows: list[asyncpg.Record], windows: str) -> None:
    """Due times outside the windows move to the start of the next one."""
    from crawler.db.frontier import to_datetime

    allowed = parse_windows(windows)
    moved = [(r["id"], next_allowed(allowed, r["next_fetch_at"]), r["host_id"]) for r in rows
             if math.isfinite(r["next_fetch_at"])
             and next_allowed(allowed, r["next_fetch_at"]) != r["next_fetch_at"]]
    if moved:
        await conn.fetch(QUERIES["move_due_times"], [m[0] for m in moved],
                         [to_datetime(m[1]) for m in moved], [m[2] for m in moved])


async def _bound(conn: asyncpg.Connection, args: argparse.Namespace) -> str:
    from crawler.db.frontier import refresh_hosts

    if args.list:
        rules = await conn.fetch(QUERIES["schedule_rules"])
        return "\n".join(
            f"{r['kind']:<8} {r['target']}: "
            f"{rule_shown(r['min_interval_seconds'], r['max_interval_seconds'], r['windows'])}"
            for r in rules
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
    # The rule is committed first: from then on the trigger of migration 0032 gives it to
    # every URL that arrives. sync_new_url_rules then enables that trigger (or disables it
    # with no rule left) and waits for the inserts that ran before the commit, so that the
    # update of the known URLs that follows finds those too.
    rows: list[asyncpg.Record] = []
    removed: list[asyncpg.Record] = []
    async with conn.transaction():
        if kind == "pattern":
            await check_pattern(conn, target)
        if args.clear:
            removed = await conn.fetch(QUERIES["delete_schedule_rule"], kind, target)
        else:
            await conn.fetch(QUERIES["store_schedule_rule"], kind, target, min_seconds,
                             max_seconds, windows, window_spans(windows))
        if kind == "url":  # one known URL: its row in the same transaction
            rows = await _apply(conn, *rule)
            if not rows and not (args.clear and removed):
                raise UserError(f"unknown URL {target}: seed it first (crawler seed URL)")
    await conn.fetchval(QUERIES["sync_new_url_rules"])
    if kind != "url":
        async with conn.transaction():
            rows = await _apply(conn, *rule)
    await refresh_hosts(conn, {r["host_id"] for r in rows})
    what = rule_shown(min_seconds, max_seconds, windows)
    if args.clear:  # the URLs another rule matches took it
        ruled = [r for r in rows if r["own_min_interval_seconds"] is not None
                 or r["own_max_interval_seconds"] is not None or r["fetch_windows"]]
        if kind == "url" and ruled:
            r = ruled[0]
            what = "rule removed; another rule matches it: " + rule_shown(
                r["own_min_interval_seconds"], r["own_max_interval_seconds"],
                r["fetch_windows"] or "")
        elif ruled:
            what += f" ({len(ruled)} of them under another rule that matches them)"
    if kind == "url":
        return f"{target}: {what}"
    return f"{len(rows)} URLs of {kind} '{target}': {what}"


def run(args: argparse.Namespace) -> int:
    from crawler.commands.collection_args import with_conn

    print(with_conn(args, lambda conn: _bound(conn, args)), file=sys.stdout)
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
    parser.add_argument("--at-least-every", type=duration_option("--at-least-every"),
                        default=None, metavar="D",
                        help="Fetch at least this often (the longest interval): 30s, 1h, 1d.")
    parser.add_argument("--at-most-every", type=duration_option("--at-most-every"),
                        default=None, metavar="D",
                        help="Never fetch more often than this (the shortest interval).")
    parser.add_argument("--window", action="append", default=None, metavar="W",
                        help="Fetch only inside this weekly window, UTC: 'Mon-Fri "
                             "08:00-18:00', 'Sat,Sun 10:00-12:00', '22:00-06:00' (repeatable).")
    parser.add_argument("--clear", action="store_true", help="Remove the rule.")
    parser.add_argument("--list", action="store_true", help="List every rule.")
    from crawler.commands.collection_args import add_options

    add_options(parser)
    parser.set_defaults(func=run, needs_db="schema")


def bounds_shown(row: Any, plan: Any) -> dict[str, Any] | None:
    """``crawler show``'s account of a URL's own schedule: its rule, the optimum's interval
    without it (under the newest plan's μ), and which bound is binding; None without a rule.

    ``row``: the URL's row (url_row); ``plan``: the newest plans row or None."""
    min_seconds = row["own_min_interval_seconds"]
    max_seconds = row["own_max_interval_seconds"]
    windows = row["fetch_windows"] or ""
    if min_seconds is None and max_seconds is None and not windows:
        return None
    shown: dict[str, Any] = {
        "rule": rule_shown(min_seconds, max_seconds, windows),
        "own_min_interval_seconds": min_seconds,
        "own_max_interval_seconds": max_seconds,
        "windows": windows or None,
        "optimal_interval_seconds": None,
        "binding": None,
    }
    if plan is None or plan["mu"] is None:
        return shown
    from crawler.core.estimate import GammaPrior
    from crawler.core.plan import fetch_rate_for

    rate = row["change_rate_per_day"]
    if rate is None:
        rate = GammaPrior(plan["prior_shape"], plan["prior_rate"]).mean_rate_per_day
    optimal = fetch_rate_for(
        rate, row["importance"], plan["mu"], plan["objective"],
        plan["min_interval_seconds"] / 86400.0, plan["max_interval_seconds"] / 86400.0,
        beta_days=plan["beta_seconds"] / 86400.0,
    )
    shown["optimal_interval_seconds"] = 86400.0 / optimal if optimal > 0 else None
    shown["binding"] = binding_bound(optimal, min_seconds, max_seconds)
    return shown


def bounds_line(shown: dict[str, Any]) -> str:
    """One line for ``crawler show``: the rule, and whether it or the optimum decides."""
    line = shown["rule"]
    optimal = shown["optimal_interval_seconds"]
    if shown["binding"] is None:
        return f"{line}; no plan yet"
    if optimal is None:
        return f"{line}; binding: {shown['binding']}"
    optimum = f"the optimum alone would fetch every {duration_shown(round(optimal, 1))}"
    if shown["binding"] == "none":
        return f"{line}; not binding ({optimum})"
    return f"{line}; binding: {shown['binding']} ({optimum})"
