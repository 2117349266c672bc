"""`crawler export urls|observations [--since TIME] --format jsonl|csv [--out FILE]`.

Rows stream from a server-side cursor straight to the output, so memory stays constant
however large the frontier is.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import datetime as dt
import json
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import IO, Any

from crawler.commands.errors import UserError
from crawler.commands.options import TIME_FORMS, add_common_options, parse_time

QUERY = {"urls": "export_urls", "observations": "export_observations"}
PREFETCH_ROWS = 2000  # rows per round trip of the cursor


def _cell(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        from crawler.db.frontier import to_iso

        return to_iso(value)
    if isinstance(value, float) and value != value:  # NaN has no JSON form
        return None
    return value


async def stream(url: str, what: str, since: dt.datetime | None, fmt: str, out: IO[str]
                 ) -> int:
    """Write every row as it arrives; returns how many were written."""

    from crawler.db.connect import connect as db_connect
    from crawler.db.queries import QUERIES

    conn = await db_connect(url)
    written = 0
    try:
        async with conn.transaction(readonly=True):
            writer: Any = None
            async for row in conn.cursor(QUERIES[QUERY[what]], since, prefetch=PREFETCH_ROWS):
                record = {k: _cell(v) for k, v in row.items()}
                if fmt == "jsonl":
                    out.write(json.dumps(record) + "\n")
                else:
                    if writer is None:
                        writer = csv.DictWriter(out, fieldnames=list(record))
                        writer.writeheader()
                    writer.writerow({k: "" if v is None else v for k, v in record.items()})
                written += 1
    finally:
        await conn.close()
    return written


def cmd_export(args: argparse.Namespace) -> int:
    from crawler.cli import load_settings, resolve_url

    since = args.since
    url = resolve_url(load_settings(args))
    target: Any
    if args.out is None:
        target = nullcontext(sys.stdout)
    else:
        try:
            target = Path(args.out).open("w", newline="", encoding="utf-8")  # noqa: SIM115
        except OSError as error:
            raise UserError(f"cannot write {args.out}: {error.strerror}; choose another "
                            "--out") from None
    with target as out:
        written = asyncio.run(stream(url, args.what, since, args.format, out))
    print(f"exported {written} {args.what if written != 1 else args.what[:-1]}",
          file=sys.stderr)
    return 0


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add `export`."""
    text = "Stream URLs or observations as JSON lines or CSV, in constant memory."
    parser = subparsers.add_parser("export", help=text, description=text)
    parser.add_argument("what", choices=sorted(QUERY), help="What to export.")
    parser.add_argument("--format", choices=("jsonl", "csv"), default="jsonl",
                        help="JSON lines or CSV with a header row (default jsonl).")
    parser.add_argument("--since", metavar="TIME", type=parse_time,
                        help=f"Only rows since TIME: {TIME_FORMS}. URLs: added or fetched "
                             "since.")
    parser.add_argument("--out", metavar="FILE", help="Write here instead of standard output.")
    add_common_options(parser)
    parser.set_defaults(func=cmd_export, needs_db="schema")
