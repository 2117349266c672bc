"""``crawler versions URL``: a URL's stored versions (time, status, record type, changed, size)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from crawler.commands.collection_args import add_url_command, stored_versions
from crawler.commands.options import plain


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    add_url_command(
        subparsers, "versions", help="A URL's stored versions.", description=plain(__doc__),
        run=run,
        arguments=lambda parser: parser.add_argument(
            "--json", action="store_true", help="Machine-readable output."
        ),
    )


def run(args: argparse.Namespace) -> int:
    url, stored, _ = stored_versions(args)
    if not stored:
        print(f"no stored versions of {url}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([v.as_json() for v in stored], indent=2))
        return 0
    print(f"{'fetched_at':32}  {'status':6}  {'type':8}  {'changed':7}  {'bytes':>8}  record")
    for v in stored:
        changed = "-" if v.changed is None else ("yes" if v.changed else "no")
        print(f"{v.fetched_at.isoformat():32}  {v.status or '-'!s:6}  {v.record_type:8}  "
              f"{changed:7}  {v.payload_bytes:>8}  {v.file}:{v.offset}")
    return 0
