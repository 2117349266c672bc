"""`crawler recheck URL... | --host ORIGIN | --file F`: fetch these URLs as soon as politeness
allows.

Only the URLs' due time moves (to now): the host's politeness clock, backoff and lease still
decide when each request goes, so a recheck never reaches a host sooner than its delay after
the previous request; and that fetch schedules the URL again as any fetch does, so the
planner's schedule resumes after it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass
from typing import Any

from crawler.commands.context import load_settings, plural, resolve_url
from crawler.commands.hosts import KNOWN_HOSTS, host_origin
from crawler.commands.manage import named_urls
from crawler.commands.options import add_common_options
from crawler.db.admin import host_parked_urls, recheck_host_urls, recheck_urls
from crawler.db.connect import connect
from crawler.db.frontier import origin_of
from crawler.db.hints import refresh_due
from crawler.db.hostlease import known_host
from crawler.errors import PARTIAL, UserError

# Unknown URLs named one by one on stderr, at most this many (the count says the rest).
UNKNOWN_SHOWN = 10


@dataclass(frozen=True, slots=True)
class Rechecked:
    """What a recheck did: URLs made due, URLs not known, and (``--host``) URLs left parked
    outside their page window."""

    due: int
    unknown: list[str]
    parked: int = 0


async def recheck(database_url: str, urls: list[str], origin: str | None) -> Rechecked:
    """Make ``urls`` and every URL of ``origin`` due now, then recompute their hosts' due
    times. Raises ``UserError`` for an unknown host."""
    conn = await connect(database_url)
    try:
        host_id = None
        if origin is not None:  # an unknown host is refused before anything moves
            host_id = await known_host(conn, origin)
            if host_id is None:
                raise UserError(f"unknown host {origin}: seed one of its URLs first; "
                                f"{KNOWN_HOSTS}")
        hosts: set[int] = set()
        found: set[str] = set()
        if urls:
            made_due = await recheck_urls(conn, urls)
            found.update(url for url, _ in made_due)
            hosts.update(host for _, host in made_due)
        due, parked = len(found), 0
        if host_id is not None:
            # A URL named and of the host is counted once: the host's count covers it.
            due += await recheck_host_urls(conn, host_id)
            due -= sum(1 for r in found if origin_of(r) == origin)
            parked = await host_parked_urls(conn, host_id)
            hosts.add(host_id)
        # After the URLs' update committed: a daemon releasing a host meanwhile then sees them.
        await refresh_due(conn, hosts)
    finally:
        await conn.close()
    return Rechecked(due, sorted(set(urls) - found), parked)


def summary(done: Rechecked) -> str:
    parked = f", {done.parked} left to their page window" if done.parked else ""
    return (f"made {plural(done.due, 'URL')} due now ({len(done.unknown)} unknown{parked}); "
            "each is fetched once its host's politeness delay allows")


def cmd_recheck(args: argparse.Namespace) -> int:
    urls = list(dict.fromkeys(named_urls(args)))
    origin = host_origin(args.host) if args.host else None
    if not urls and origin is None:
        raise UserError("recheck needs URLs, --host ORIGIN or --file PATH "
                        "(see crawler recheck --help)")
    done = asyncio.run(recheck(resolve_url(load_settings(args)), urls, origin))
    for url in done.unknown[:UNKNOWN_SHOWN]:
        print(f"unknown URL (not seeded): {url}", file=sys.stderr)
    print(summary(done))
    return PARTIAL if done.unknown else 0


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    text = ("Fetch known URLs as soon as their host's politeness allows; their schedule "
            "resumes after that fetch.")
    p = subparsers.add_parser("recheck", help=text, description=text)
    p.add_argument("urls", nargs="*", metavar="URL")
    p.add_argument("--host", metavar="ORIGIN",
                   help="Every URL of this host (those parked outside a page window stay "
                        "parked).")
    p.add_argument("--file", metavar="PATH", help="One URL per line; '#' comments.")
    add_common_options(p)
    p.set_defaults(func=cmd_recheck, needs_db="schema")
