"""``crawler versions URL``: a URL's stored versions (time, status, record type, changed, size).

Each version's record is read back and checked against its index row (payload digest): a
version whose bytes are gone or damaged is listed as such, one line on stderr says what is
wrong with it, and the exit status is 4.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from crawler.commands.collection_args import add_url_command, store_root, stored_versions
from crawler.commands.options import plain
from crawler.errors import DAMAGED
from crawler.store.damage import RecordDamaged
from crawler.store.index import verify_version


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
    root = store_root(args)
    damage: dict[int, str] = {}
    for v in stored:
        try:
            verify_version(root, stored, v)
        except RecordDamaged as exc:
            damage[v.id] = exc.kind
            print(f"crawler versions: {url} at {v.fetched_at.isoformat()}: {exc.message}",
                  file=sys.stderr)
        except LookupError as exc:  # a revisit whose original is not indexed
            damage[v.id] = "missing"
            print(f"crawler versions: {url}: {exc}", file=sys.stderr)
    if args.json:
        print(json.dumps([{**v.as_json(), "damaged": damage.get(v.id)} for v in stored],
                         indent=2))
        return DAMAGED if damage else 0
    print(f"{'fetched_at':32}  {'status':6}  {'type':8}  {'changed':7}  {'bytes':>8}  record")
    for v in stored:
        changed = "-" if v.changed is None else ("yes" if v.changed else "no")
        note = f"  DAMAGED ({damage[v.id]})" if v.id in damage else ""
        print(f"{v.fetched_at.isoformat():32}  {v.status or '-'!s:6}  {v.record_type:8}  "
              f"{changed:7}  {v.payload_bytes:>8}  {v.file}:{v.offset}{note}")
    return DAMAGED if damage else 0
