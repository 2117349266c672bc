"""``crawler``: one entry point for the daemon and the admin commands.

Each command lives in a module of ``crawler.commands`` that registers it (``register``); this
module assembles the parser, runs the command, and turns what can go wrong into one line.
Options that override a setting name their environment variable in ``--help``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_settings import SettingsError

from crawler import __version__
from crawler.commands.context import load_settings, newline_if_tty, preflight, resolve_url
from crawler.commands.errors import exception_chain, settings_error, unexpected_database_error
from crawler.errors import PARTIAL, UserError
from crawler.logs import configure, set_fetch_log
from crawler.settings import Settings, unknown_variables


class CliParser(argparse.ArgumentParser):
    """Usage errors in one line (argparse prints the whole usage block), exit 2."""

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


# The command modules under crawler.commands and the commands each registers, in the order
# `crawler --help` lists them. Only the module of the command being run is imported (others
# import numpy, scipy, aiohttp or the daemon); help, and a command missing here, import all.
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "db": ("db",),
    "seed": ("seed",),
    "sites": ("sites", "urls"),
    "status": ("status", "show"),
    "run": ("run", "demo"),
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
    if not modules:
        modules = list(COMMAND_MODULES)
    parser = CliParser(
        prog="crawler", description="Incremental web re-crawler: keeps pages fresh on a budget."
    )
    parser.add_argument("--version", action="version", version=f"crawler {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in modules:
        importlib.import_module(f"crawler.commands.{module}").register(sub)  # lazy command load
    return parser


READER_GONE = 128 + signal.SIGPIPE  # 141: what a shell reports for a filter SIGPIPE killed


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
    settings: Settings | None = None
    try:
        parser = build_parser(command_of(argv))
        args = parser.parse_args(argv)
        # Ctrl-C is an exception from here on, except for `run`, which counts signals itself
        # (crawler.daemon.signals). ValueError: not the main thread, as in an in-process test.
        if args.command != "run":
            with contextlib.suppress(ValueError):
                signal.signal(signal.SIGINT, signal.default_int_handler)
        for warning in unknown_variables(os.environ):
            print(f"crawler: warning: {warning}", file=sys.stderr)
        try:
            settings = load_settings(args)
        except (ValidationError, SettingsError) as exc:
            raise settings_error(exc) from None
        configure(settings.log_level, json_lines=settings.log_json)
        set_fetch_log(settings.log_fetches)
        if getattr(args, "check", None) is not None:
            args.check(args)
        if needs := getattr(args, "needs_db", None):
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
        if any(isinstance(item, BrokenPipeError) for item in exception_chain(exc)):
            return reader_gone()
        problem = unexpected_database_error(exc, settings)
        if problem is None:
            raise
        print(f"crawler: {problem.message}", file=sys.stderr)
        return problem.code


if __name__ == "__main__":
    raise SystemExit(main())
