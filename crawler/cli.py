"""``crawler``: one entry point for the daemon and the admin commands.

Options that override a setting name their environment variable in ``--help``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from crawler import __version__
from crawler.commands.errors import PARTIAL, UserError
from crawler.commands.options import (
    DB_OPTIONS,
    add_setting,
    non_negative_int,
    positive_float,
    positive_int,
)
from crawler.settings import Settings, env_name, unknown_variables

if TYPE_CHECKING:
    from crawler.core.patterns import UrlFilter

log = logging.getLogger("crawler")
# `crawler status --limit`'s default: crawler.status.LISTED, not imported for every command.
LISTED_PER_PAGE = 100


class CliParser(argparse.ArgumentParser):
    """Usage errors in one line (argparse prints the whole usage block), exit 2."""

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``1 URL``, ``2 URLs``: counts that read as English."""
    return f"{count} {noun if count == 1 else (plural_form or noun + 's')}"


def newline_if_tty() -> str:
    """End a progress line (drawn only on a terminal) before a message."""
    return "\n" if sys.stderr.isatty() else ""


def importance_weight(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
    return value




def load_settings(args: argparse.Namespace) -> Settings:
    overrides = {
        name: getattr(args, name)
        for name in Settings.model_fields
        if getattr(args, name, None) is not None
    }
    return Settings(**overrides)


def configure_logging(settings: Settings) -> None:
    from crawler.logs import configure, set_fetch_log

    configure(settings.log_level, json_lines=settings.log_json)
    set_fetch_log(settings.log_fetches)


_resolved: dict[tuple[str | None, Path], str] = {}


def resolve_url(settings: Settings) -> str:
    """The database URL (the embedded server started once per process if need be)."""
    from crawler.commands.errors import resolve_database

    key = (settings.database_url, settings.data_dir)
    if key not in _resolved:
        _resolved[key] = resolve_database(settings)
    return _resolved[key]


# --- db -------------------------------------------------------------------------------------


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    from crawler.db import migrate
    from crawler.db.connect import describe

    settings = load_settings(args)
    if settings.pgbouncer:
        # The migration lock (migrations/env.py) is a session-level advisory lock: behind
        # transaction pooling its unlock may reach another server connection and leave it held.
        raise UserError("crawler db upgrade needs a direct connection to PostgreSQL: unset "
                        "CRAWLER_PGBOUNCER and point CRAWLER_DATABASE_URL past PgBouncer")
    url = resolve_url(settings)
    migrate.upgrade_blocking(url, args.revision)
    print(f"database {describe(url)} at revision {migrate.head_revision()}")
    return 0


# --- seed -----------------------------------------------------------------------------------


def read_seed_lines(lines: Sequence[str], source: str) -> tuple[list[str], list[str]]:
    """Normalised URLs from seed lines, and one error message per malformed line."""
    from crawler.core.links import normalize_url

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
    from crawler.core.patterns import PatternError, global_filter, site_filter

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
    from crawler.db import frontier
    from crawler.db.connect import create_pool

    if args.sitemaps or args.sitemap:
        from crawler.commands.sitemaps import cmd_seed_sitemaps

        return cmd_seed_sitemaps(args)
    settings = load_settings(args)
    try:
        urls, errors = read_seed_lines(args.urls, "argument")
        if args.file == "-":
            file_urls, file_errors = read_seed_lines(sys.stdin.read().splitlines(), "<stdin>")
            urls += file_urls
            errors += file_errors
        elif args.file:
            path = Path(args.file)
            try:
                # A byte-order mark on line 1 is dropped by read_seed_lines (stdin too).
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError as error:
                raise UserError(f"cannot read seed file {path}: {error.strerror or error}; "
                                "check crawler seed --file") from None
            file_urls, file_errors = read_seed_lines(text.splitlines(), str(path))
            urls += file_urls
            errors += file_errors
    except KeyboardInterrupt:
        raise UserError("seed interrupted while reading its input; nothing was committed",
                        PARTIAL) from None
    # A URL given twice (in the file, or as an argument too) is seeded once and counted once,
    # as a duplicate: otherwise it appeared in no count of the summary.
    # The dict is also what frontier.seed takes (URL -> importance), so the input is hashed
    # into one dict once, not twice (about 5 s at 10^7 URLs).
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
        from crawler.core.patterns import partition, rejection

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
            from crawler.commands.watch import seed_region

            if args.window is not None:
                from crawler.commands.windows import (
                    patterns_line,
                    register_window,
                    window_of_origin,
                )

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

    from crawler.core.hostid import HostIdCollision

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


# --- sites and urls -------------------------------------------------------------------------


def _with_conn(settings: Settings, fn: Callable[[Any], Any]) -> Any:

    async def go() -> Any:
        from crawler.db.connect import connect

        conn = await connect(resolve_url(settings))
        try:
            return await fn(conn)
        finally:
            await conn.close()

    return asyncio.run(go())


def _table(rows: list[dict[str, Any]], columns: Sequence[str]) -> str:
    cells = [[("-" if r[c] is None else str(r[c])) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def cmd_sites(args: argparse.Namespace) -> int:
    from crawler.commands.sitemap_sites import render, sitemap_sites
    from crawler.commands.windows import describe_patterns
    from crawler.db.windows import sites_summary

    async def both(conn: Any) -> tuple[Any, Any]:
        return await sites_summary(conn), await sitemap_sites(conn)

    sites, sitemapped = _with_conn(load_settings(args), both)
    if args.json:  # windowed sites (root_url), then sites read through sitemaps (origin)
        print(json.dumps(sites + sitemapped, indent=2))
    else:
        rows = [{**s, "patterns": describe_patterns(s["include"], s["exclude"])} for s in sites]
        if sites or not sitemapped:
            print(_table(rows, ("root_url", "window_size", "in_window", "discovered",
                                "entered", "left", "patterns")))
        if sitemapped:
            print(("\n" if sites else "") + render(sitemapped, _table))
    return 0


def cmd_urls(args: argparse.Namespace) -> int:
    """A windowed site's URLs (--site), or any URLs by host and state, one page at a time."""
    from crawler.db.schema import URL_STATES

    if args.state is not None and args.state not in URL_STATES:
        raise UserError(f"--state {args.state!r} is not a URL state; states: "
                        + ", ".join(URL_STATES))
    if args.site is not None:
        if args.host is not None:
            raise UserError("urls: --site already names one host; give --site or --host, "
                            "not both")
        from crawler.commands.windows import resolve_site
        from crawler.db.windows import site_urls

        async def fetch(conn: Any) -> Any:
            # One row past the page: whether there is a next one.
            return await site_urls(conn, await resolve_site(conn, args.site),
                                   state=args.state, limit=args.limit + 1, offset=args.offset)

        rows = _with_conn(load_settings(args), fetch)
        urls = rows[: args.limit]
        columns: tuple[str, ...] = ("url", "depth", "in_window", "status", "entered_at",
                                    "left_at")
        more = len(rows) > args.limit
    else:
        from crawler.commands.hosts import host_origin
        from crawler.db.frontier import to_iso
        from crawler.db.queries import QUERIES

        origin = host_origin(args.host) if args.host else None

        async def page(conn: Any) -> Any:
            rows = await conn.fetch(QUERIES["list_urls"], origin, args.state, args.offset,
                                    args.limit)
            return [{k: (to_iso(v) if hasattr(v, "tzinfo") else v) for k, v in r.items()}
                    for r in rows]

        urls = _with_conn(load_settings(args), page)
        columns = ("url", "state", "importance", "last_status", "last_outcome",
                   "last_attempt_at", "last_fetched_at", "next_fetch_at", "unlisted_at")
        more = len(urls) == args.limit
    if more:
        print(f"more: crawler urls ... --offset {args.offset + args.limit}", file=sys.stderr)
    if args.json:
        print(json.dumps(urls, indent=2))
    else:
        print(_table(urls, columns))
    return 0


# --- status and show ------------------------------------------------------------------------


def cmd_status(args: argparse.Namespace) -> int:
    from crawler.status import collect_status, more_hint, render_status

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
    from crawler.core.links import normalize_url
    from crawler.status import collect_url, render_url

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


# --- run and demo ---------------------------------------------------------------------------


def run_with_uvloop(make: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """Run ``make()`` on uvloop; the coroutine is made only once the loop can run it, so a
    Ctrl-C while uvloop loads leaves no never-awaited coroutine behind."""
    import uvloop

    return uvloop.run(make())


def check_run_dirs(args: argparse.Namespace) -> None:
    """Before connecting: the directories `run` writes to must be writable (one line, exit 2)."""
    from crawler.daemon.run import check_dirs

    check_dirs(load_settings(args))


def cmd_run(args: argparse.Namespace) -> int:
    """Signals are counted from the first line (before the embedded server starts, before any
    connection); one that came during start-up stops the daemon as soon as it can (exit 0)."""
    from crawler.daemon.signals import process_shutdown

    shutdown = process_shutdown()
    from crawler.daemon.processes import default_processes, run_processes
    from crawler.daemon.run import preflight, run_daemon

    settings = load_settings(args)
    url = resolve_url(settings)
    if shutdown.requested:
        return 0
    processes = settings.processes or default_processes()
    if processes > 1:
        # The children check the database too, but their one line would come from a child.
        if not run_with_uvloop(lambda: preflight(url, shutdown)):
            return 0
        return run_processes(settings, url, processes, duration=args.duration)
    code: int = run_with_uvloop(
        lambda: run_daemon(settings, url, duration=args.duration, shutdown=shutdown)
    )
    return code


def cmd_demo(args: argparse.Namespace) -> int:
    from crawler.demo.run import run_demo

    settings = load_settings(args)
    code: int = run_with_uvloop(lambda: run_demo(settings, args))
    return code


# --- parser ---------------------------------------------------------------------------------


# The command modules under crawler.commands and the commands each registers, in the order
# `crawler --help` lists them. Only the module of the command being run is imported (others
# import numpy, scipy or the database driver); help, and a command missing here, import all.
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "simulate": ("simulate",),
    "plan": ("plan",),
    "report": ("report",),
    "hosts": ("pause", "resume"),
    "export": ("export",),
    "manage": ("importance", "remove"),
    "versions": ("versions",),
    "get": ("get",),
    "diff": ("diff",),
    "verify": ("verify",),
    "changes": ("changes",),
    "watch": ("watch",),
    "recheck": ("recheck",),
    "bound": ("bound",),
    "explain": ("explain",),
}


def command_of(argv: Sequence[str] | None) -> str | None:
    """The command ``argv`` names (its first word that is no option), None when it names none."""
    words = sys.argv[1:] if argv is None else argv
    return next((w for w in words if not w.startswith("-")), None)


def build_parser(wanted: str | None = None) -> argparse.ArgumentParser:
    """The parser, with every command when ``wanted`` is None; with a command named, the
    commands of other modules are left out (their imports are the slow part of starting)."""
    modules = [m for m, names in COMMAND_MODULES.items() if wanted in names]
    own = wanted is not None and (bool(modules) or wanted in OWN_COMMANDS)
    if not own:
        modules = list(COMMAND_MODULES)
    parser = CliParser(
        prog="crawler", description="Incremental web re-crawler: keeps pages fresh on a budget."
    )
    parser.add_argument("--version", action="version", version=f"crawler {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, func: Callable[[argparse.Namespace], int], help: str,
                settings: Sequence[str] = DB_OPTIONS) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        for field in (*settings, "log_level", "log_json"):
            if field == "log_json":
                p.add_argument("--log-json", dest="log_json", action="store_const", const=True,
                               default=None,
                               help=f"JSON-lines logs [env {env_name('log_json')}]")
            else:
                add_setting(p, field)
        p.set_defaults(func=func, needs_db="schema")
        return p

    db = sub.add_parser("db", help="Database administration.")
    db_sub = db.add_subparsers(dest="db_command", required=True, metavar="DB_COMMAND")
    up = db_sub.add_parser("upgrade", help="Apply migrations (safe to repeat or run in parallel).")
    for field in DB_OPTIONS:
        add_setting(up, field)
    up.add_argument("--revision", default="head", help="Target revision (default head).")
    up.set_defaults(func=cmd_db_upgrade, needs_db="server")

    p = command("seed", cmd_seed, "Add URLs to the frontier (malformed ones are reported).")
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
    if not own or wanted == "seed":  # its options come from crawler.commands.watch
        from crawler.commands.watch import add_region_options

        add_region_options(p, "these URLs (or, with --window, every page of the window)")

    p = command("sites", cmd_sites, "Windowed sites: window size, pages in it, discovered, "
                "entered and left; sites read through sitemaps: each file, when it was read, "
                "URLs it listed, added and dropped.")
    p.add_argument("--json", action="store_true", help="Machine-readable output.")

    p = command("urls", cmd_urls, "List URLs, paged: any URL by host and state, or a windowed "
                "site's with depth, membership and times.")
    p.add_argument("--site", metavar="URL", help="A windowed site (any URL of its origin); "
                   "--state, --limit and --offset apply to it too.")
    p.add_argument("--host", metavar="ORIGIN", help="Only this host's URLs.")
    p.add_argument("--state", help="Only URLs in this state (new, active, gone, ...).")
    p.add_argument("--limit", type=positive_int, default=100, help="URLs per page (default 100).")
    p.add_argument("--offset", type=non_negative_int, default=0,
                   help="URLs skipped (the next page).")
    p.add_argument("--json", action="store_true", help="Machine-readable output.")

    p = command("status", cmd_status, "Summary of the frontier and recent fetching, with "
                "its lists (most overdue URLs, hosts in backoff, paused, refused) paged.")
    p.add_argument("--limit", type=positive_int, default=LISTED_PER_PAGE,
                   help=f"Rows of each list per page (default {LISTED_PER_PAGE}); the most "
                   "overdue URLs are the first this many.")
    p.add_argument("--offset", type=non_negative_int, default=0,
                   help="Hosts skipped in each host list (the next page).")
    p.add_argument("--json", action="store_true", help="Machine-readable output.")

    p = command("show", cmd_show, "One URL's row and its observations, newest first.")
    p.add_argument("url", metavar="URL")
    p.add_argument("--limit", type=non_negative_int, default=50,
                   help="Observations shown (default 50).")
    p.add_argument("--json", action="store_true", help="Machine-readable output.")

    daemon_settings = [f for f in Settings.model_fields if f not in ("log_level", "log_json")]
    p = command("run", cmd_run, "Run the crawl daemon until SIGTERM/SIGINT.",
                settings=daemon_settings)
    # Its own database checks, interruptible by a signal (crawler.daemon.run._start).
    p.set_defaults(check=check_run_dirs, needs_db=None)
    p.add_argument("--duration", type=positive_float, default=None,
                   help="Stop by itself after this many seconds.")

    p = command("demo", cmd_demo,
                "Serve the synthetic demo web on loopback, seed it and crawl it, with progress, "
                "in a data directory of its own (CRAWLER_DATA_DIR/demo): CRAWLER_DATABASE_URL, "
                "CRAWLER_WARC_DIR and CRAWLER_WEBHOOK_URL from the environment are not used; "
                "--database-url, --data-dir, --warc-dir or --webhook-url place it elsewhere.",
                settings=daemon_settings)
    p.add_argument("--sites", type=positive_int, default=5, help="Demo sites (default 5).")
    p.add_argument("--pages", type=positive_int, default=20, help="Pages per site (default 20).")
    p.add_argument("--duration", type=positive_float, default=None,
                   help="Stop after this many seconds.")
    p.set_defaults(needs_db=None)  # it migrates its own database

    for module in modules:
        __import__(f"crawler.commands.{module}", fromlist=["register"]).register(sub)
    return parser


# The commands this module defines itself (build_parser): cheap to build, always there.
OWN_COMMANDS = frozenset({"db", "seed", "sites", "urls", "status", "show", "run", "demo"})


READER_GONE = 128 + signal.SIGPIPE  # 141: what a shell reports for a filter SIGPIPE killed


def closed_pipe(error: BaseException) -> bool:
    """Whether ``error`` is, or was caused by, writing to a pipe its reader closed."""
    seen: set[int] = set()
    item: BaseException | None = error
    while item is not None and id(item) not in seen:
        if isinstance(item, BrokenPipeError):
            return True
        seen.add(id(item))
        item = item.__cause__ or item.__context__
    return False


def reader_gone() -> int:
    """The reader of our output closed it (``crawler export urls | head -1``): not an error
    of the database or of the command, so nothing is said; the rest of the output goes to
    /dev/null (the Python docs' recipe), so the flush at exit cannot fail again."""
    with contextlib.suppress(OSError, ValueError):  # stdout may be no file (a test's StringIO)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return READER_GONE


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; a mistake the user can fix is one line on stderr and exit 2."""
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from crawler.commands.errors import preflight, settings_error, unexpected_database_error

    settings: Settings | None = None
    try:
        parser = build_parser(command_of(argv))
        args = parser.parse_args(argv)
        # __main__ quits quietly on Ctrl-C while importing; from here on it is an exception,
        # except for `run`, which counts signals itself (crawler.daemon.signals).
        # (ValueError: not the main thread, as in an in-process test.)
        if args.command != "run":
            with contextlib.suppress(ValueError):
                signal.signal(signal.SIGINT, signal.default_int_handler)
        for warning in unknown_variables(os.environ):
            print(f"crawler: warning: {warning}", file=sys.stderr)
        try:
            settings = load_settings(args)
        except (ValidationError, SettingsError) as exc:
            raise settings_error(exc) from None
        configure_logging(settings)
        check = getattr(args, "check", None)
        if check is not None:
            check(args)
        needs = getattr(args, "needs_db", None)
        if needs:
            preflight(resolve_url(settings), need_schema=needs == "schema")
        code: int = args.func(args)
        sys.stdout.flush()  # a reader gone shows here, not as a warning at exit
        return code
    except BrokenPipeError:
        return reader_gone()
    except UserError as error:
        print(f"crawler: {error.message}", file=sys.stderr)
        return error.code
    except KeyboardInterrupt:
        print(f"{newline_if_tty()}crawler: interrupted", file=sys.stderr)
        return PARTIAL
    except Exception as exc:
        if closed_pipe(exc):
            return reader_gone()
        problem = unexpected_database_error(exc, settings)
        if problem is None:
            raise
        print(f"crawler: {problem.message}", file=sys.stderr)
        return problem.code


if __name__ == "__main__":
    raise SystemExit(main())
