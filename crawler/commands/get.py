"""``crawler get URL [--at TIME] [--text | --headers | --raw]``: the version current at TIME.

Prints the body served at TIME (default: the newest version), Content-Encoding undone;
``--raw`` the bytes as received and stored (still gzip, br... if the server encoded them);
``--text`` the visible text the fingerprint was computed from (the URL's watched region
only, when it has one), ``--headers`` the HTTP status and headers.
"""

from __future__ import annotations

import argparse
import http
import sys
from typing import Any

from crawler.commands.collection_args import add_url_command, store_root, stored_versions
from crawler.commands.context import with_conn
from crawler.commands.options import TIME_FORMS, parse_time, plain
from crawler.errors import DAMAGED
from crawler.store.damage import MISSING, RecordDamaged
from crawler.store.index import elsewhere, load_body, version_at


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    add_url_command(subparsers, "get", help="Print a URL's version current at a time.",
                    description=plain(__doc__), run=run, arguments=_arguments)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--at", type=parse_time, default=None, metavar="TIME",
                        help=f"The version current at TIME: {TIME_FORMS} (default: the latest).")
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--text", action="store_true", help="The visible text.")
    shown.add_argument("--headers", action="store_true", help="The HTTP status and headers.")
    shown.add_argument("--raw", action="store_true",
                       help="The body as received and stored (Content-Encoding still applied).")


def status_line(status: int | None) -> str:
    """``HTTP/1.1 200 OK``: the record read back keeps no reason phrase, so the standard one
    (none for a code HTTP does not define, '-' for no status at all)."""
    if status is None:
        return "HTTP/1.1 -"
    try:
        return f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        return f"HTTP/1.1 {status}"


def run(args: argparse.Namespace) -> int:
    url, stored, region = stored_versions(args)
    version = version_at(stored, args.at)
    if version is None:
        when = f" at {args.at.isoformat()}" if args.at else ""
        print(f"no stored version of {url}{when}", file=sys.stderr)
        return 1
    try:
        body = load_body(store_root(args), stored, version)
    except RecordDamaged as exc:
        message = exc.message
        if exc.kind == MISSING:  # in a fleet, maybe another machine's file: say which
            root, file = store_root(args), exc.file
            message = with_conn(args, lambda conn: elsewhere(conn, root, file)) or message
        print(f"crawler get: {url} at {version.fetched_at.isoformat()}: {message}",
              file=sys.stderr)
        return DAMAGED
    except (OSError, LookupError, ValueError) as exc:
        print(f"crawler get: {exc}", file=sys.stderr)
        return 1
    if args.headers:
        record = body.record
        print(f"{status_line(record.status)}  ({record.record_type}, {version.fetched_at})")
        for name, value in record.http_headers:
            print(f"{name}: {value}")
        return 0
    if version.status is not None and version.status >= 400:
        print(f"{url} answered {version.status} (gone) at {version.fetched_at.isoformat()}",
              file=sys.stderr)
        return 3
    if args.text:
        print("\n".join(body.text_lines(region)))
        return 0
    sys.stdout.buffer.write(body.stored_payload if args.raw else body.payload)
    sys.stdout.buffer.flush()
    return 0
