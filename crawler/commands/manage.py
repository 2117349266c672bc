"""Managing what was seeded: `crawler importance` and `crawler remove`.

Users coming from Heritrix and StormCrawler expect to inspect, change and remove what they
put in; a search engine can feed click-through weights with `importance --file` without
re-seeding.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crawler.commands.errors import PARTIAL, UserError
from crawler.commands.hosts import KNOWN_HOSTS
from crawler.commands.options import add_common_options


def _normalized(text: str, where: str) -> str:
    from crawler.core.links import normalize_url

    url = normalize_url(text.strip())
    if url is None:
        raise UserError(f"{where}: malformed URL {text.strip()!r}")
    return url


def _weight(text: str, where: str) -> float:
    try:
        weight = float(text)
    except ValueError:
        weight = math.nan
    if not math.isfinite(weight) or weight <= 0:
        raise UserError(f"{where}: importance {text.strip()!r} must be a positive number")
    return weight


def _lines(path: str) -> list[tuple[int, str]]:
    """The file's numbered lines with content (no blanks, no '#' comments); a UTF-8
    byte-order mark, which spreadsheets write at the start of a CSV, is dropped."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig", errors="replace")
    except OSError as error:
        raise UserError(f"cannot read {path}: {error.strerror}; check --file") from None
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), start=1)
            if line.strip() and not line.strip().startswith("#")]


# A column name: a word (url, importance, click_through, "url"), never a URL or a number.
_COLUMN_NAME = re.compile(r'"?[A-Za-z_][A-Za-z0-9_-]*"?')


def _is_header(parts: Sequence[str]) -> bool:
    """Whether the file's first row names its columns (``url,importance``, as a spreadsheet
    or ``crawler export --format csv`` writes one), rather than being a malformed row: two
    names, neither a URL (no scheme's ':') nor a number."""
    return len(parts) == 2 and all(_COLUMN_NAME.fullmatch(p) for p in parts)


def read_weights(args: argparse.Namespace) -> list[tuple[str, float]]:
    """(URL, weight) pairs from `URL W` or a file of `url,weight` lines, the first of which
    may be a header; any other malformed line is refused with its line number."""
    pairs: list[tuple[str, float]] = []
    if args.url is not None:
        if args.weight is None:
            raise UserError("importance needs a weight: crawler importance URL W")
        # Named as argparse names a positional argument (it said only "argument").
        pairs.append((_normalized(args.url, "argument URL"), _weight(args.weight, "argument W")))
    if args.file:
        for row, (number, line) in enumerate(_lines(args.file)):
            parts = re.split(r"\s*,\s*|\s+", line)
            if row == 0 and _is_header(parts):
                continue
            where = f"{args.file}:{number}"
            if len(parts) != 2:
                raise UserError(f"{where}: expected 'url,weight', got {line!r}")
            pairs.append((_normalized(parts[0], where), _weight(parts[1], where)))
    if not pairs:
        raise UserError("importance needs URL W or --file PATH (see crawler importance --help)")
    return pairs


async def _set_importance(url: str, pairs: Sequence[tuple[str, float]]) -> set[str]:

    from crawler.db.connect import connect as db_connect
    from crawler.db.queries import QUERIES

    conn = await db_connect(url)
    try:
        rows = await conn.fetch(QUERIES["set_importance"], [u for u, _ in pairs],
                                [w for _, w in pairs])
    finally:
        await conn.close()
    return {r["url"] for r in rows}


def cmd_importance(args: argparse.Namespace) -> int:
    from crawler.cli import load_settings, plural, resolve_url

    pairs = read_weights(args)
    found = asyncio.run(_set_importance(resolve_url(load_settings(args)), pairs))
    unknown = sorted({u for u, _ in pairs} - found)
    for url in unknown[:10]:
        print(f"unknown URL (not seeded): {url}", file=sys.stderr)
    print(f"set the importance of {plural(len(found), 'URL')} ({len(unknown)} unknown); the "
          "planner uses it at its next solve")
    return PARTIAL if unknown else 0


async def _remove(url: str, urls: list[str], host: str | None, confirm: Any) -> int:

    from crawler.db.connect import connect as db_connect
    from crawler.db.queries import QUERIES

    conn = await db_connect(url)
    try:
        removed = 0
        hosts: set[int] = set()
        async with conn.transaction():
            if urls:
                rows = await conn.fetch(QUERIES["remove_urls"], urls)
                await _remove_observations(conn, rows)
                removed += len(rows)
                hosts.update(r["host_id"] for r in rows)
            if host is not None:
                host_id = await conn.fetchval(QUERIES["lock_host"], host)
                if host_id is None:
                    raise UserError(f"unknown host {host}; {KNOWN_HOSTS}")
                rows = await conn.fetch(QUERIES["remove_host_urls"], host_id)
                if not confirm(host, len(rows)):
                    raise UserError(f"nothing removed: host {host} kept", PARTIAL)
                await _remove_observations(conn, rows)
                await conn.execute(QUERIES["remove_host"], host_id)
                removed += len(rows)
        await _refresh_due(conn, hosts)
        return removed
    finally:
        await conn.close()


async def _remove_observations(conn: Any, rows: list[Any]) -> None:
    """The observations, sitemap date hints, sitemap listings and hint state of the URLs just
    removed (``rows``: their id and host_id), which no foreign key cascades to (migrations
    0023, 0030, 0033, 0034)."""
    if rows:
        from crawler.db.queries import QUERIES

        for name in ("remove_observations", "remove_url_hints", "remove_sitemap_urls",
                     "remove_url_hint_state"):
            await conn.execute(QUERIES[name], [r["id"] for r in rows],
                               [r["host_id"] for r in rows])


# Rounds for the hosts a daemon's write held locked at the first try.
REFRESH_ATTEMPTS = 5


async def _refresh_due(conn: Any, hosts: set[int]) -> None:
    """Recompute the due time of hosts that lost URLs, after the removal committed: a host left
    with no URL is never ready again, so no daemon contacts it. A host a daemon's write holds
    locked for a moment is tried again; one still busy after that gets its due time from the
    daemon's own release of it."""
    from crawler.db.frontier import refresh_hosts

    for attempt in range(REFRESH_ATTEMPTS):
        await refresh_hosts(conn, hosts)
        if not hosts:
            return
        await asyncio.sleep(0.05 * (attempt + 1))


def cmd_remove(args: argparse.Namespace) -> int:
    from crawler.cli import load_settings, plural, resolve_url
    from crawler.commands.hosts import host_origin

    urls = [_normalized(u, "argument URL") for u in args.urls]
    if args.file:
        urls += [_normalized(line, f"{args.file}:{n}") for n, line in _lines(args.file)]
    host = host_origin(args.host) if args.host else None
    if not urls and host is None:
        raise UserError("remove needs URLs, --host ORIGIN or --file PATH "
                        "(see crawler remove --help)")

    def confirm(origin: str, count: int) -> bool:
        if args.yes:
            return True
        if not sys.stdin.isatty():
            raise UserError(f"removing host {origin} ({plural(count, 'URL')} and their "
                            "history) needs confirmation: add --yes")
        answer = input(f"remove host {origin}: {plural(count, 'URL')} and their history? "
                       "[y/N] ")
        return answer.strip().lower() in ("y", "yes")

    removed = asyncio.run(_remove(resolve_url(load_settings(args)), urls, host, confirm))
    print(f"removed {plural(removed, 'URL')} and their history")
    return 0


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add `importance` and `remove`."""
    text = "Change the importance weight of known URLs (one URL, or url,weight lines)."
    p = subparsers.add_parser("importance", help=text, description=text)
    p.add_argument("url", nargs="?", metavar="URL")
    p.add_argument("weight", nargs="?", metavar="W", help="A positive weight (default 1 at seed).")
    p.add_argument("--file", metavar="PATH",
                   help="Lines of 'url,weight' (e.g. click-through weights), the first may "
                        "be a header (url,importance); '#' comments.")
    add_common_options(p)
    p.set_defaults(func=cmd_importance, needs_db="schema")

    text = "Remove URLs and their history, or a whole host (asks first; --yes skips)."
    p = subparsers.add_parser("remove", help=text, description=text)
    p.add_argument("urls", nargs="*", metavar="URL")
    p.add_argument("--host", metavar="ORIGIN", help="Every URL of this host, and the host.")
    p.add_argument("--file", metavar="PATH", help="One URL per line; '#' comments.")
    p.add_argument("--yes", action="store_true", help="Remove a host without asking.")
    add_common_options(p)
    p.set_defaults(func=cmd_remove, needs_db="schema")
