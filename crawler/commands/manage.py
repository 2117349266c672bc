"""Managing what was seeded: `crawler importance` and `crawler remove`."""

from __future__ import annotations

import argparse
import asyncio
import math
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import asyncpg

from crawler.commands.context import load_settings, plural, resolve_url, with_conn
from crawler.commands.hosts import KNOWN_HOSTS, host_origin
from crawler.commands.options import add_common_options
from crawler.core.links import normalize_url
from crawler.db.admin import (
    lock_host,
    remove_host,
    remove_host_urls,
    remove_url_history,
    remove_urls,
    set_importance,
)
from crawler.db.connect import connect
from crawler.db.hints import refresh_due
from crawler.errors import PARTIAL, UserError


def _normalized(text: str, where: str) -> str:
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


def cmd_importance(args: argparse.Namespace) -> int:
    pairs = read_weights(args)
    found = with_conn(args, lambda conn: set_importance(conn, pairs))
    unknown = sorted({u for u, _ in pairs} - found)
    for url in unknown[:10]:
        print(f"unknown URL (not seeded): {url}", file=sys.stderr)
    print(f"set the importance of {plural(len(found), 'URL')} ({len(unknown)} unknown); the "
          "planner uses it at its next solve")
    return PARTIAL if unknown else 0


async def _remove(url: str, urls: list[str], host: str | None, confirm: Any) -> int:
    conn = await connect(url)
    try:
        return await _remove_on(conn, urls, host, confirm)
    finally:
        await conn.close()


async def _remove_on(conn: asyncpg.Connection, urls: list[str], host: str | None,
                     confirm: Any) -> int:
    removed = 0
    hosts: set[int] = set()
    async with conn.transaction():
        if urls:
            gone = await remove_urls(conn, urls)
            await remove_url_history(conn, gone)
            removed += len(gone)
            hosts.update(r.host_id for r in gone)
        if host is not None:
            host_id = await lock_host(conn, host)
            if host_id is None:
                raise UserError(f"unknown host {host}; {KNOWN_HOSTS}")
            gone = await remove_host_urls(conn, host_id)
            if not confirm(host, len(gone)):
                raise UserError(f"nothing removed: host {host} kept", PARTIAL)
            await remove_url_history(conn, gone)
            await remove_host(conn, host_id)
            removed += len(gone)
    await refresh_due(conn, hosts)
    return removed


def named_urls(args: argparse.Namespace) -> list[str]:
    """The normalised URLs of the arguments and of ``--file`` (one a line, '#' comments); a
    malformed one is refused with where it was."""
    urls = [_normalized(u, "argument URL") for u in args.urls]
    if args.file:
        urls += [_normalized(line, f"{args.file}:{n}") for n, line in _lines(args.file)]
    return urls


def cmd_remove(args: argparse.Namespace) -> int:
    urls = named_urls(args)
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
