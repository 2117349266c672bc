"""``crawler``: one entry point for the daemon and the admin commands.

Options that override a setting name their environment variable in ``--help``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from crawler import __version__
from crawler.settings import Settings, env_name

log = logging.getLogger("crawler")


def add_setting(parser: argparse.ArgumentParser, field: str, **kwargs: Any) -> None:
    """An option that overrides a setting; its help names the variable and the default."""
    info = Settings.model_fields[field]
    default = info.get_default(call_default_factory=True)
    parser.add_argument(
        "--" + field.replace("_", "-"),
        dest=field,
        default=None,
        help=f"{info.description} [env {env_name(field)}; default {default}]",
        **kwargs,
    )


def load_settings(args: argparse.Namespace) -> Settings:
    overrides = {
        name: getattr(args, name)
        for name in Settings.model_fields
        if getattr(args, name, None) is not None
    }
    return Settings(**overrides)


def configure_logging(settings: Settings) -> None:
    from crawler.logs import configure

    configure(settings.log_level, json_lines=settings.log_json)


def resolve_url(settings: Settings) -> str:
    from crawler.db.connect import database_url

    return database_url(settings)


# --- db -------------------------------------------------------------------------------------


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    from crawler.db import migrate
    from crawler.db.connect import describe

    settings = load_settings(args)
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
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = re.split(r"\s+#", line, maxsplit=1)[0]  # a trailing comment
        normalized = normalize_url(line)
        if normalized is None:
            errors.append(f"{source}:{number}: malformed URL {line!r} (not seeded)")
        else:
            good.append(normalized)
    return good, errors


def cmd_seed(args: argparse.Namespace) -> int:
    from crawler.db import frontier
    from crawler.db.connect import create_pool

    settings = load_settings(args)
    urls, errors = read_seed_lines(args.urls, "argument")
    if args.file:
        path = Path(args.file)
        file_urls, file_errors = read_seed_lines(path.read_text(errors="replace").splitlines(),
                                                 str(path))
        urls += file_urls
        errors += file_errors
    for message in errors:
        print(message, file=sys.stderr)

    if args.window is not None and len(urls) != 1:
        print("crawler seed --window takes exactly one root URL", file=sys.stderr)
        return 2

    async def go() -> frontier.SeedResult:
        pool = await create_pool(resolve_url(settings))
        try:
            if args.window is not None:
                from crawler.db.windows import register_site

                result = await frontier.seed(pool, [(urls[0], args.importance)], time.time())
                async with pool.acquire() as conn:
                    await register_site(conn, urls[0], args.window)
                print(f"site {frontier.origin_of(urls[0])}: window of {args.window} pages "
                      f"rooted at {urls[0]}")
                return result
            inserted = already = 0
            batch = frontier.SEED_BATCH
            for start in range(0, len(urls), batch):
                chunk = [(u, args.importance) for u in urls[start : start + batch]]
                result = await frontier.seed(pool, chunk, time.time())
                inserted += result.inserted
                already += result.already_known
                if len(urls) > batch and sys.stderr.isatty():
                    print(f"\rseeded {start + len(chunk)}/{len(urls)}", end="", file=sys.stderr)
            return frontier.SeedResult(inserted, already)
        finally:
            await pool.close()

    result = asyncio.run(go())
    print(f"seeded {result.inserted} new URLs ({result.already_known} already known, "
          f"{len(errors)} rejected)")
    return 1 if errors else 0


# --- sites and urls -------------------------------------------------------------------------


def _with_conn(settings: Settings, fn: Callable[[Any], Any]) -> Any:
    import asyncpg

    async def go() -> Any:
        conn = await asyncpg.connect(resolve_url(settings))
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
    from crawler.db.windows import sites_summary

    sites = _with_conn(load_settings(args), sites_summary)
    if args.json:
        print(json.dumps(sites, indent=2))
    else:
        print(_table(sites, ("root_url", "window_size", "in_window", "discovered", "entered",
                             "left")))
    return 0


def cmd_urls(args: argparse.Namespace) -> int:
    from crawler.core.links import normalize_url
    from crawler.db.windows import site_urls

    root = normalize_url(args.site) or args.site
    urls = _with_conn(load_settings(args), lambda conn: site_urls(conn, root))
    if args.json:
        print(json.dumps(urls, indent=2))
    else:
        print(_table(urls, ("url", "depth", "in_window", "status", "entered_at", "left_at")))
    return 0


# --- status and show ------------------------------------------------------------------------


def cmd_status(args: argparse.Namespace) -> int:
    from crawler.status import collect_status, render_status

    settings = load_settings(args)
    status = asyncio.run(collect_status(resolve_url(settings)))
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


def run_with_uvloop(coro: Any) -> Any:
    import uvloop

    return uvloop.run(coro)


def cmd_run(args: argparse.Namespace) -> int:
    from crawler.daemon.run import run_daemon

    settings = load_settings(args)
    url = resolve_url(settings)
    code: int = run_with_uvloop(run_daemon(settings, url, duration=args.duration))
    return code


def cmd_demo(args: argparse.Namespace) -> int:
    from crawler.demo.run import run_demo

    settings = load_settings(args)
    code: int = run_with_uvloop(run_demo(settings, args))
    return code


# --- parser ---------------------------------------------------------------------------------

DB_OPTIONS = ("database_url", "data_dir")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
        p.set_defaults(func=func)
        return p

    db = sub.add_parser("db", help="Database administration.")
    db_sub = db.add_subparsers(dest="db_command", required=True, metavar="DB_COMMAND")
    up = db_sub.add_parser("upgrade", help="Apply migrations (safe to repeat or run in parallel).")
    for field in DB_OPTIONS:
        add_setting(up, field)
    up.add_argument("--revision", default="head", help="Target revision (default head).")
    up.set_defaults(func=cmd_db_upgrade)

    p = command("seed", cmd_seed, "Add URLs to the frontier (malformed ones are reported).")
    p.add_argument("urls", nargs="*", metavar="URL")
    p.add_argument("--file", help="File with one URL per line; '#' starts a comment.")
    p.add_argument("--importance", type=float, default=1.0,
                   help="Importance weight of these URLs (default 1).")
    p.add_argument("--window", type=int, default=None, metavar="N",
                   help="Register the URL's site with a breadth-first window of N pages "
                        "rooted at it (page-window discovery).")

    p = command("sites", cmd_sites, "Windowed sites: window size, pages in it, discovered, "
                "entered and left.")
    p.add_argument("--json", action="store_true", help="Machine-readable output.")

    p = command("urls", cmd_urls, "A windowed site's URLs with depth, membership and times.")
    p.add_argument("--site", required=True, metavar="URL", help="The site's root URL.")
    p.add_argument("--json", action="store_true", help="Machine-readable output.")

    p = command("status", cmd_status, "Summary of the frontier and recent fetching.")
    p.add_argument("--json", action="store_true", help="Machine-readable output.")

    p = command("show", cmd_show, "One URL's row and its observations, newest first.")
    p.add_argument("url", metavar="URL")
    p.add_argument("--limit", type=int, default=50, help="Observations shown (default 50).")
    p.add_argument("--json", action="store_true", help="Machine-readable output.")

    daemon_settings = [f for f in Settings.model_fields if f not in ("log_level", "log_json")]
    p = command("run", cmd_run, "Run the crawl daemon until SIGTERM/SIGINT.",
                settings=daemon_settings)
    p.add_argument("--duration", type=float, default=None,
                   help="Stop by itself after this many seconds.")

    p = command("demo", cmd_demo,
                "Serve the synthetic demo web on loopback, seed it and crawl it, with progress.",
                settings=daemon_settings)
    p.add_argument("--sites", type=int, default=5, help="Demo sites (default 5).")
    p.add_argument("--pages", type=int, default=20, help="Pages per site (default 20).")
    p.add_argument("--duration", type=float, default=None, help="Stop after this many seconds.")

    for module in ("simulate", "plan", "report"):
        try:
            mod = __import__(f"crawler.commands.{module}", fromlist=["register"])
        except ImportError:  # pragma: no cover - a command module still being written
            continue
        mod.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = load_settings(args)
    except Exception as exc:  # pydantic's ValidationError: a bad environment variable
        print(f"crawler: invalid configuration: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
