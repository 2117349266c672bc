"""``crawler verify [--repair]``: check every stored record against its index row.

Each index row's record is read back: its file must be there, hold the whole record, and the
record must carry the payload the row names (payload digest). Prints one line per damaged
record (one per missing file) and a summary; exit 4 when damage was found. ``--repair`` marks
the damaged rows (and clears marks of rows that read back again): a marked record is never
the original of a revisit nor the base of a diff, and its URL's next fetch is unconditional,
so that it stores a full response.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from crawler.commands.collection_args import store_root
from crawler.commands.context import with_conn
from crawler.commands.options import add_collection_options, plain
from crawler.errors import DAMAGED
from crawler.store.verify import verify_collection


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "verify", help="Check every stored record against the index.",
        description=plain(__doc__),
    )
    parser.add_argument("--repair", action="store_true",
                        help="Mark damaged records so that their URLs are stored in full again.")
    parser.add_argument("--file", default=None, metavar="NAME",
                        help="Only the records of this WARC file (its name in the directory).")
    add_collection_options(parser)
    parser.set_defaults(func=run, needs_db="schema")


def run(args: argparse.Namespace) -> int:
    root = store_root(args)

    def report(line: str) -> None:
        print(f"crawler verify: {line}", file=sys.stderr)

    found = with_conn(args, lambda conn: verify_collection(
        conn, root, repair=args.repair, file=args.file, report=report))
    kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(found.damaged.items()))
    print(f"checked {found.rows} records in {found.files} files under {root}: "
          f"{found.damaged_rows} damaged" + (f" ({kinds})" if kinds else ""))
    if args.repair:
        print(f"marked {found.marked} records damaged ({found.urls_refetched} URLs will be "
              f"fetched in full next time); cleared {found.cleared} that read back again")
        return 0
    return DAMAGED if found.damaged_rows else 0
