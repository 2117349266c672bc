"""`crawler pause --host ORIGIN` and `crawler resume --host ORIGIN`.

A paused host is never claimed (one condition in the claim statement); its URLs stay in the
frontier, due as before, and `crawler status` lists it.
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

from crawler.commands.context import with_conn
from crawler.commands.options import add_common_options
from crawler.core.links import normalize_url
from crawler.db.admin import set_host_paused
from crawler.db.frontier import origin_of
from crawler.errors import UserError

# Where the known hosts are (status only counts them): the URLs, each with its origin.
KNOWN_HOSTS = "crawler export urls --format csv lists every known URL with its origin"


def host_origin(text: str) -> str:
    """The origin (scheme://host[:port]) a user's spelling of a host names."""
    normalized = normalize_url(text.strip() if "://" in text else f"http://{text.strip()}/")
    if normalized is None:
        raise UserError(f"--host {text!r} is not an origin such as https://example.org")
    return origin_of(normalized)


def _run(paused: bool, args: argparse.Namespace) -> int:
    origin = host_origin(args.host)
    if not with_conn(args, lambda conn: set_host_paused(conn, origin, paused)):
        raise UserError(f"unknown host {origin}: seed one of its URLs first; {KNOWN_HOSTS}")
    print(f"host {origin} " + ("paused: none of its URLs is fetched until crawler resume --host"
                               if paused else "resumed"))
    return 0


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    for name, paused, text in (
        ("pause", True, "Stop fetching a host's URLs until it is resumed (they are kept)."),
        ("resume", False, "Fetch a paused host's URLs again."),
    ):
        parser = subparsers.add_parser(name, help=text, description=text)
        parser.add_argument("--host", required=True, metavar="ORIGIN",
                            help="The host, as scheme://host[:port] (e.g. https://example.org).")
        add_common_options(parser)
        parser.set_defaults(func=functools.partial(_run, paused), needs_db="schema")
