"""``crawler seed``: add URLs to the frontier, from arguments, a file or standard input.

Malformed lines are reported and skipped (exit 1); ``--window N`` registers the URL's site
with a breadth-first window; ``--sitemaps``/``--sitemap`` seed what a site's sitemaps list
(``crawler.commands.sitemaps``).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import re
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from crawler.commands.context import load_settings, newline_if_tty, plural, resolve_url
from crawler.commands.options import add_command, positive_int
from crawler.commands.watch import add_region_options, seed_region
from crawler.commands.windows import patterns_line, register_window, window_of_origin
from crawler.core.hostid import HostIdCollision
from crawler.core.links import normalize_url
from crawler.core.patterns import (
    PatternError,
    UrlFilter,
    global_filter,
    partition,
    rejection,
    site_filter,
)
from crawler.db import frontier
from crawler.db.connect import create_pool
from crawler.errors import PARTIAL, UserError
from crawler.settings import Settings


def importance_weight(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
    return value


def read_seed_lines(lines: Sequence[str], source: str) -> tuple[list[str], list[str]]:
    """Normalised URLs from seed lines, and one error message per malformed line."""
    good: list[str] = []
    errors: list[str] = []
    for number, raw in enumerate(lines, start=1):
        line = raw.lstrip("\ufeff").strip() if number == 1 else raw.strip()  # a BOM
        if not line or line.startswith("#"):
            continue
        if "#" in line:
            line = re.split(r"\s+#", line, maxsplit=1)[0]  # a trailing comment
        normalized = normalize_url(line)
        if normalized is None:
            errors.append(f"{source}:{number}: malformed URL {line!r} (not seeded)")
        else:
            good.append(normalized)
    return good, errors


class SeedProgress:
    """Seeding progress: a bar redrawn in place on a terminal, else a line every few seconds."""

    LINE_EVERY_SECONDS = 5.0
    BAR_WIDTH = 30

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.started = time.monotonic()
        self.last_line = self.started

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done == 0:  # the first batch goes now: the rate is the seeding's, not the reading's
            self.started = self.last_line = now
        rate = done / max(now - self.started, 1e-9)
        if self.tty:
            filled = self.BAR_WIDTH * done // max(total, 1)
            bar = "#" * filled + "." * (self.BAR_WIDTH - filled)
            end = "\n" if done >= total else ""
            print(f"\r[{bar}] {done:,}/{total:,} URLs, {rate:,.0f}/s", end=end,
                  file=self.stream, flush=True)
        elif now - self.last_line >= self.LINE_EVERY_SECONDS or done >= total:
            self.last_line = now
            print(f"seeding: {done:,}/{total:,} URLs ({100.0 * done / max(total, 1):.0f}%), "
                  f"{rate:,.0f}/s", file=self.stream, flush=True)


def check_seed_args(args: argparse.Namespace) -> None:
    from_sitemaps = bool(args.sitemaps or args.sitemap)
    if from_sitemaps and (args.urls or args.file):
        raise UserError("seed takes URLs and --file, or --sitemaps/--sitemap, not both: "
                        "run it once for each")
    if not args.urls and not args.file and not from_sitemaps:
        raise UserError("seed needs at least one URL, --file PATH, --sitemaps ORIGIN or "
                        "--sitemap URL (see crawler seed --help)")
    if args.file and args.file != "-" and not Path(args.file).is_file():
        raise UserError(f"seed file {args.file} does not exist or is not a file "
                        "(crawler seed --file PATH)")
    if (args.site_include or args.site_exclude) and args.window is None:
        raise UserError("--include and --exclude are a windowed site's own patterns: they need "
                        "--window N (for every seed and link, set CRAWLER_INCLUDE / "
                        "CRAWLER_EXCLUDE)")
    seed_filters(args, load_settings(args))  # a bad pattern: one line, exit 2, before any I/O


def seed_filters(args: argparse.Namespace, settings: Settings) -> list[UrlFilter]:
    """The global URL patterns, then (with --window) the site's own, in that order."""
    filters = [global_filter(settings.include, settings.exclude)]
    try:
        filters.append(site_filter(args.site_include or [], args.site_exclude or []))
    except PatternError as error:
        raise UserError(str(error)) from None
    return filters


def rejection_summary(rejected: dict[str, int]) -> str:
    """', 3 rejected by CRAWLER_EXCLUDE, 1 rejected by --include' (empty when none were)."""
    return "".join(f", {n} rejected by {label}" for label, n in sorted(rejected.items()))


def seed_interrupted(committed: list[int], total: int) -> str:
    """The line docs/USAGE.md promises for Ctrl-C during `seed`, whenever it lands after reading."""
    done = committed[0] + committed[1]
    return (f"{newline_if_tty()}crawler seed: interrupted after committing {done} of "
            f"{plural(total, 'URL')} ({committed[0]} new); seeding is resumable: "
            "run the same command again")


def cmd_seed(args: argparse.Namespace) -> int:
    if args.sitemaps or args.sitemap:
        from crawler.commands.sitemaps import cmd_seed_sitemaps  # heavy: aiohttp, --sitemaps only

        return cmd_seed_sitemaps(args)
    settings = load_settings(args)
    try:
        urls, errors = read_seed_lines(args.urls, "argument")
        if args.file == "-":
            file_urls, file_errors = read_seed_lines(sys.stdin.read().splitlines(), "<stdin>")
        elif args.file:
            path = Path(args.file)
            try:
                # A byte-order mark on line 1 is dropped by read_seed_lines (stdin too).
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError as error:
                raise UserError(f"cannot read seed file {path}: {error.strerror or error}; "
                                "check crawler seed --file") from None
            file_urls, file_errors = read_seed_lines(text.splitlines(), str(path))
        if args.file:
            urls += file_urls
            errors += file_errors
    except KeyboardInterrupt:
        raise UserError("seed interrupted while reading its input; nothing was committed",
                        PARTIAL) from None
    # A URL given twice is seeded once and counted once, as a duplicate. The dict is what
    # frontier.seed takes (URL -> importance): the input is hashed once.
    seeds = dict.fromkeys(urls, args.importance)
    duplicates = len(urls) - len(seeds)
    urls = list(seeds)
    committed = [0, 0]  # new, already known: what earlier batches committed
    try:
        for message in errors:
            print(message, file=sys.stderr)
        if args.window is not None and len(urls) != 1:
            print("crawler seed --window takes exactly one root URL", file=sys.stderr)
            return 2
        filters = seed_filters(args, settings)
        if args.window is not None:
            reason = rejection(filters, urls[0])
            if reason is not None:
                raise UserError(f"the window's root {urls[0]} is rejected by {reason}; "
                                "change the patterns or the root")
        kept, rejected = partition(filters, urls)
        if len(kept) != len(urls):
            seeds = dict.fromkeys(kept, args.importance)
        urls = kept
    except KeyboardInterrupt:  # read, nothing sent yet: the documented line, not a bare one
        print(seed_interrupted(committed, len(urls)), file=sys.stderr)
        return PARTIAL
    set_patterns = args.site_include is not None or args.site_exclude is not None

    async def go() -> frontier.SeedResult:
        pool = await create_pool(resolve_url(settings))
        try:
            if args.window is not None:
                async with pool.acquire() as conn:
                    await window_of_origin(conn, urls[0])  # refuses a second root first
                result = await frontier.seed(pool, [(urls[0], args.importance)], time.time())
                patterns = (args.site_include or [], args.site_exclude or [])
                async with pool.acquire() as conn:
                    print(await register_window(conn, urls[0], args.window, time.time(),
                                                patterns if set_patterns else None))
                    if set_patterns:
                        print(patterns_line(urls[0], *patterns))
                    await seed_region(conn, urls[:1], args, window=True)
                return result
            # Ctrl-C lets the batches in flight commit, then stops: the count said is exact.
            interrupted = asyncio.Event()
            asyncio.get_running_loop().add_signal_handler(signal.SIGINT, interrupted.set)

            async def committed_batch(batch: list[str], inserted: int) -> None:
                async with pool.acquire() as conn:
                    await seed_region(conn, batch, args, window=False)
                committed[0] += inserted
                committed[1] += len(batch) - inserted

            result = await frontier.seed(
                pool, seeds, time.time(),
                progress=SeedProgress(sys.stderr), after_batch=committed_batch,
                stop=interrupted,
            )
            if not result.complete:
                raise KeyboardInterrupt
            return result
        finally:
            await pool.close()

    try:
        result = asyncio.run(go())
    except HostIdCollision as collision:
        done = committed[0] + committed[1]
        raise UserError(f"seed: {collision}; {done} of {plural(len(urls), 'URL')} were "
                        "committed before it") from collision
    except KeyboardInterrupt:
        print(seed_interrupted(committed, len(urls)), file=sys.stderr)
        return PARTIAL
    repeated = f", {plural(duplicates, 'duplicate')}" if duplicates else ""
    # Known URLs that had no next fetch time, or were gone, are due now: said, so that the
    # line tells which known URLs the seed moved.
    made_due = f", {result.made_due} of them due now" if result.made_due else ""
    print(f"seeded {plural(result.inserted, 'new URL')} ({result.already_known} already known"
          f"{made_due}, {len(errors)} malformed{repeated}{rejection_summary(rejected)})")
    return PARTIAL if errors else 0


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    p = add_command(subparsers, "seed", cmd_seed,
                    "Add URLs to the frontier (malformed ones are reported).")
    p.set_defaults(check=check_seed_args)
    p.add_argument("urls", nargs="*", metavar="URL")
    p.add_argument("--file", help="File with one URL per line ('-': standard input); '#' "
                   "starts a comment.")
    p.add_argument("--importance", type=importance_weight, default=1.0,
                   help="Importance weight of these URLs, a positive number (default 1).")
    p.add_argument("--window", type=positive_int, default=None, metavar="N",
                   help="Register the URL's site with a breadth-first window of N pages "
                        "rooted at it (page-window discovery).")
    p.add_argument("--include", dest="site_include", action="append", default=None,
                   metavar="PATTERN",
                   help="With --window: a link the site discovers must match one of these "
                        "patterns (a Python regular expression searched in the whole URL; "
                        "repeatable), after CRAWLER_INCLUDE. Given patterns replace the site's.")
    p.add_argument("--exclude", dest="site_exclude", action="append", default=None,
                   metavar="PATTERN",
                   help="With --window: links matching this pattern (a Python regular "
                        "expression searched in the whole URL; repeatable) are not discovered, "
                        "after CRAWLER_EXCLUDE. Given patterns replace the site's.")
    p.add_argument("--sitemaps", action="append", default=None, metavar="ORIGIN",
                   help="Seed the URLs this site's sitemaps and feeds list: those its "
                        "robots.txt names, else /sitemap.xml (repeatable; docs/SITEMAPS.md).")
    p.add_argument("--sitemap", action="append", default=None, metavar="URL",
                   help="Seed the URLs one sitemap, sitemap index or RSS/Atom feed lists "
                        "(repeatable).")
    add_region_options(p, "these URLs (or, with --window, every page of the window)")
