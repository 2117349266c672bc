"""`crawler export urls|observations [--since TIME] --format jsonl|csv [--out FILE]` and
`crawler export wacz [--since TIME] --out FILE`.

Rows stream from a server-side cursor straight to the output, so memory stays constant
however large the frontier is.

``wacz`` packages the collection (``crawler.store.wacz``): every WARC file holding a record
stored since TIME, and the files of the originals its revisits refer to, whole (records are
never split out of their files); the pages list names each URL stored since TIME once, at
its newest capture. A file still being written goes in up to its last complete record.
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

from crawler.commands.context import load_settings, resolve_url
from crawler.commands.options import DB_OPTIONS, TIME_FORMS, add_common_options, parse_time
from crawler.db.connect import connect
from crawler.db.export import EXPORTS, export_rows, wacz_records
from crawler.db.frontier import to_iso
from crawler.errors import UserError
from crawler.settings import warc_dir
from crawler.store.wacz import Page, WarcSource, write_wacz
from crawler.store.warc import OPEN_SUFFIX, complete_prefix, stored_path


def _cell(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return to_iso(value)
    if isinstance(value, float) and value != value:  # NaN has no JSON form
        return None
    return value


async def stream(url: str, what: str, since: dt.datetime | None, fmt: str, out: IO[str]
                 ) -> int:
    """Write every row as it arrives; returns how many were written."""
    conn = await connect(url)
    written = 0
    try:
        writer: Any = None
        async for row in export_rows(conn, what, since):
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


async def wacz_contents(url: str, since: dt.datetime | None
                        ) -> tuple[list[str], list[tuple[str, dt.datetime]]]:
    """The WARC files to package (in the order first needed) and the pages: each URL once,
    at its newest capture of a page (a 200, or a 304 standing for one)."""
    conn = await connect(url)
    files: dict[str, None] = {}
    pages: dict[str, dt.datetime] = {}
    try:
        async for record in wacz_records(conn, since):
            if record.original_file is not None:
                files.setdefault(record.original_file)
            files.setdefault(record.warc_file)
            if record.status is not None and (200 <= record.status < 300 or record.status == 304):
                pages[record.url] = record.fetched_at
    finally:
        await conn.close()
    return list(files), sorted(pages.items())


def export_wacz(args: argparse.Namespace, url: str) -> int:
    if args.out is None:
        raise UserError("export wacz writes a ZIP file: give --out FILE.wacz")
    root = warc_dir(load_settings(args))
    files, pages = asyncio.run(wacz_contents(url, args.since))
    sources: list[WarcSource] = []
    missing: list[str] = []
    for name in files:
        path = stored_path(root, name)
        if not path.exists():
            missing.append(name)
            continue
        # A file still open grows as it is read: take it up to its last complete record.
        length = (complete_prefix(path) if path.name.endswith(OPEN_SUFFIX)
                  else path.stat().st_size)
        sources.append(WarcSource(name, path, length))
    if missing:
        raise UserError(f"{len(missing)} WARC file(s) of the collection are not in {root} "
                        f"(first: {missing[0]}); export where they all are, or set --warc-dir")
    target = Path(args.out)
    try:
        captures = write_wacz(target, sources, [Page(u, at) for u, at in pages],
                              title=f"crawler collection, exported {dt.datetime.now(dt.UTC)}")
    except OSError as error:
        raise UserError(f"cannot write {args.out}: {error.strerror or error}") from None
    print(f"exported {len(sources)} WARC file(s), {captures} captures and {len(pages)} pages "
          f"to {target}", file=sys.stderr)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    url = resolve_url(load_settings(args))
    if args.what == "wacz":
        return export_wacz(args, url)
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
        written = asyncio.run(stream(url, args.what, args.since, args.format, out))
    print(f"exported {written} {args.what if written != 1 else args.what[:-1]}",
          file=sys.stderr)
    return 0


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    text = ("Stream URLs or observations as JSON lines or CSV, in constant memory; or "
            "package the collection as a WACZ file that ReplayWeb.page and pywb open.")
    parser = subparsers.add_parser("export", help=text, description=text)
    parser.add_argument("what", choices=[*sorted(EXPORTS), "wacz"], help="What to export.")
    parser.add_argument("--format", choices=("jsonl", "csv"), default="jsonl",
                        help="JSON lines or CSV with a header row (default jsonl).")
    parser.add_argument("--since", metavar="TIME", type=parse_time,
                        help=f"Only rows since TIME: {TIME_FORMS}. URLs: added or fetched "
                             "since. wacz: the files holding records stored since.")
    parser.add_argument("--out", metavar="FILE", help="Write here instead of standard output "
                        "(wacz: required).")
    add_common_options(parser, (*DB_OPTIONS, "warc_dir"))
    parser.set_defaults(func=cmd_export, needs_db="schema")
