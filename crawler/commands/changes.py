"""``crawler changes --since TIME [--json]``: change events from the outbox, page by page.

Events are ordered by (fetch time, id); each page ends with a cursor that ``--after`` takes
to continue exactly where the page stopped, however many events arrive meanwhile.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from typing import Any

from crawler.commands.collection_args import add_options, with_conn
from crawler.commands.options import TIME_FORMS, parse_time, plain, positive_int


def encode_cursor(fetched_at: dt.datetime, event_id: int) -> str:
    return f"{fetched_at.isoformat()}/{event_id}"


def decode_cursor(value: str) -> tuple[dt.datetime, int]:
    try:
        when, _, event_id = value.rpartition("/")
        return parse_time(when), int(event_id)
    except (ValueError, argparse.ArgumentTypeError) as exc:
        raise argparse.ArgumentTypeError(f"{value!r} is not a cursor of crawler changes") from exc


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("changes", help="Change events since a time.",
                                   description=plain(__doc__))
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--since", type=parse_time, default=None, metavar="TIME",
                       help=f"Events fetched at or after TIME: {TIME_FORMS}.")
    where.add_argument("--after", type=decode_cursor, default=None, metavar="CURSOR",
                       help="Continue after the cursor a previous page printed.")
    parser.add_argument("--limit", type=positive_int, default=100,
                        help="Events per page (default 100).")
    parser.add_argument("--json", action="store_true",
                        help="One JSON object: events and next_cursor.")
    add_options(parser)
    parser.set_defaults(func=run, needs_db="schema")


def run(args: argparse.Namespace) -> int:
    from crawler.db.queries import QUERIES

    if args.after is not None:
        since, after_id = args.after
    else:
        since = args.since or dt.datetime.fromtimestamp(0, dt.UTC)
        after_id = -1  # every event fetched at or after ``since``
    rows = with_conn(args, lambda conn: conn.fetch(QUERIES["changes_page"], since, after_id,
                                                   args.limit))
    events = []
    for row in rows:
        payload = row["payload"]
        data = json.loads(payload) if isinstance(payload, str) else dict(payload)
        events.append({"id": row["id"], **data,
                       "delivered": row["delivered_at"] is not None})
    cursor = (encode_cursor(rows[-1]["fetched_at"], rows[-1]["id"]) if rows
              else encode_cursor(since, after_id))
    if args.json:
        print(json.dumps({"events": events, "next_cursor": cursor}, indent=2))
        return 0
    for event in events:
        distance = "-" if event.get("distance") is None else event["distance"]
        print(f"{event['fetched_at']}  {event['kind']:7}  d={distance!s:3}  "
              f"+{len(event.get('added', []))}/-{len(event.get('removed', []))}  {event['url']}")
    print(f"next cursor: {cursor}", file=sys.stderr)
    return 0
