"""``crawler run``, the crawl daemon, and ``crawler demo``, the daemon on a synthetic web."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import uvloop

from crawler.commands.context import check_dirs, load_settings, resolve_url
from crawler.commands.options import DAEMON_OPTIONS, add_command, positive_float, positive_int
from crawler.daemon.processes import default_processes, run_processes
from crawler.daemon.run import preflight, run_daemon
from crawler.daemon.signals import process_shutdown
from crawler.demo.run import run_demo

T = TypeVar("T")

def run_with_uvloop(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run ``make()`` on uvloop; the coroutine is made only once the loop can run it, so a
    Ctrl-C while uvloop loads leaves no never-awaited coroutine behind."""
    return uvloop.run(make())


def cmd_run(args: argparse.Namespace) -> int:
    """Signals are counted from the first line (before the embedded server starts, before any
    connection); one that came during start-up stops the daemon as soon as it can (exit 0)."""
    shutdown = process_shutdown()
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
    return run_with_uvloop(
        lambda: run_daemon(settings, url, duration=args.duration, shutdown=shutdown))


def cmd_demo(args: argparse.Namespace) -> int:
    settings = load_settings(args)
    return run_with_uvloop(lambda: run_demo(settings, args))


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    p = add_command(subparsers, "run", cmd_run, "Run the crawl daemon until SIGTERM/SIGINT.",
                    settings=DAEMON_OPTIONS)
    # Before connecting, the directories it writes to; its own database checks, interruptible
    # by a signal (crawler.daemon.run._start).
    p.set_defaults(check=lambda args: check_dirs(load_settings(args)), needs_db=None)
    p.add_argument("--duration", type=positive_float, default=None,
                   help="Stop by itself after this many seconds.")

    p = add_command(subparsers, "demo", cmd_demo,
                    "Serve the synthetic demo web on loopback, seed it and crawl it, with "
                    "progress, in a data directory of its own (CRAWLER_DATA_DIR/demo): "
                    "CRAWLER_DATABASE_URL, CRAWLER_WARC_DIR and CRAWLER_WEBHOOK_URL from the "
                    "environment are not used; --database-url, --data-dir, --warc-dir or "
                    "--webhook-url place it elsewhere.",
                    settings=DAEMON_OPTIONS)
    p.add_argument("--sites", type=positive_int, default=5, help="Demo sites (default 5).")
    p.add_argument("--pages", type=positive_int, default=20, help="Pages per site (default 20).")
    p.add_argument("--duration", type=positive_float, default=None,
                   help="Stop after this many seconds.")
    p.set_defaults(needs_db=None)  # it migrates its own database
