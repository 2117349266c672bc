"""``crawler changes``: change events and alerts from the outbox, page by page or as they come.

Events are ordered by (fetch time, id); each page ends with a cursor that ``--after`` takes
to continue exactly where the page stopped, however many events arrive meanwhile. ``--url``,
``--host`` and ``--kind`` keep only some events. ``--follow`` prints events as they arrive
until Ctrl-C (exit 0), from ``--since``/``--after`` or else from now.

``--replay-to-webhook --since TIME`` queues the events since TIME (filters apply) for
delivery to ``CRAWLER_WEBHOOK_URL`` again, delivered or not: a webhook configured for the
first time gets only the events from then on, and this sends it history on purpose. A running
daemon delivers them, in order per URL, signed as any delivery.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import sys
import time
from typing import Any

import asyncpg

from crawler.commands.context import load_settings, normalized, with_conn
from crawler.commands.hosts import host_origin
from crawler.commands.options import (
    TIME_FORMS,
    add_collection_options,
    parse_time,
    plain,
    positive_int,
)
from crawler.core.events import EVENT_KINDS
from crawler.db.changes import OutboxEvent, changes_page, replay_events
from crawler.errors import UserError

FOLLOW_POLL_SECONDS = 1.0
# An event is written after its fetch ends, so one may commit with a fetch time before the
# newest already printed (another host's fetch, still being recorded): following re-reads
# this far back and skips the ids it printed.
FOLLOW_OVERLAP_SECONDS = 60.0


def encode_cursor(fetched_at: dt.datetime, event_id: int) -> str:
    return f"{fetched_at.isoformat()}/{event_id}"


def decode_cursor(value: str) -> tuple[dt.datetime, int]:
    try:
        when, _, event_id = value.rpartition("/")
        return parse_time(when), int(event_id)
    except (ValueError, argparse.ArgumentTypeError) as exc:
        raise argparse.ArgumentTypeError(f"{value!r} is not a cursor of crawler changes") from exc


def event_kinds(text: str) -> list[str]:
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in EVENT_KINDS]
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(
            f"{text!r}: kinds are {', '.join(EVENT_KINDS)} (comma-separated)")
    return kinds


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser("changes", help="Change events and alerts since a time.",
                                   description=plain(__doc__))
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--since", type=parse_time, default=None, metavar="TIME",
                       help=f"Events fetched at or after TIME: {TIME_FORMS}.")
    where.add_argument("--after", type=decode_cursor, default=None, metavar="CURSOR",
                       help="Continue after the cursor a previous page printed.")
    parser.add_argument("--url", default=None, metavar="URL", help="Only this URL's events.")
    parser.add_argument("--host", default=None, metavar="ORIGIN",
                        help="Only the events of this host's URLs.")
    parser.add_argument("--kind", type=event_kinds, action="extend", default=None,
                        metavar="KIND", help=f"Only events of these kinds ({', '.join(EVENT_KINDS)}"
                        "; comma-separated or repeated).")
    parser.add_argument("--limit", type=positive_int, default=100,
                        help="Events per page (default 100).")
    parser.add_argument("--json", action="store_true",
                        help="One JSON object: events and next_cursor (with --follow: one "
                        "event per line).")
    parser.add_argument("--follow", action="store_true",
                        help="Keep printing events as they arrive, until Ctrl-C.")
    parser.add_argument("--replay-to-webhook", action="store_true",
                        help="Queue the events since --since for CRAWLER_WEBHOOK_URL again "
                        "(a running daemon sends them).")
    add_collection_options(parser)
    parser.set_defaults(func=run, needs_db="schema")


def _filters(args: argparse.Namespace) -> tuple[str | None, str | None, list[str] | None]:
    url = normalized(args.url) if args.url else None
    host = host_origin(args.host) if args.host else None
    return url, host, args.kind


def _start(args: argparse.Namespace, default: dt.datetime) -> tuple[dt.datetime, int]:
    """Where the events start: after ``--after``'s cursor, else every event fetched at or
    after ``--since`` (or ``default``)."""
    if args.after is not None:
        return args.after  # type: ignore[no-any-return]
    return (default if args.since is None else args.since), -1


def _event(event: OutboxEvent) -> dict[str, Any]:
    return {"id": event.id, **event.payload, "delivered": event.delivered}


def _line(event: dict[str, Any]) -> str:
    kind = event["kind"]
    if kind in ("failing", "recovered"):
        detail = (f"{event.get('scope', 'url')}, {event.get('failures')} failures, "
                  f"{event.get('error_kind')}")
    elif kind == "region_missing":
        detail = f"{event.get('watch')} matches nothing"
    else:
        distance = "-" if event.get("distance") is None else event["distance"]
        detail = (f"d={distance!s:3}  +{len(event.get('added', []))}"
                  f"/-{len(event.get('removed', []))}")
    return f"{event['fetched_at']}  {kind:14}  {detail}  {event['url']}"


def run(args: argparse.Namespace) -> int:
    if args.replay_to_webhook:
        return replay(args)
    if args.follow:
        return follow(args)
    since, after_id = _start(args, dt.datetime.fromtimestamp(0, dt.UTC))
    url, host, kinds = _filters(args)
    rows = with_conn(args, lambda conn: changes_page(conn, since, after_id, args.limit, url,
                                                     host, kinds))
    events = [_event(row) for row in rows]
    cursor = (encode_cursor(rows[-1].fetched_at, rows[-1].id) if rows
              else encode_cursor(since, after_id))
    if args.json:
        print(json.dumps({"events": events, "next_cursor": cursor}, indent=2))
        return 0
    for event in events:
        print(_line(event))
    print(f"next cursor: {cursor}", file=sys.stderr)
    return 0


def follow(args: argparse.Namespace) -> int:
    """Print events as they commit until Ctrl-C (exit 0): by polling, since an insert into
    the outbox notifies no one."""
    url, host, kinds = _filters(args)
    since, after_id = _start(args, dt.datetime.now(dt.UTC))

    async def loop(conn: asyncpg.Connection) -> None:
        cursor = (since, after_id)
        printed: dict[int, dt.datetime] = {}  # ids printed within the overlap, by fetch time
        while True:
            rows = await changes_page(conn, cursor[0], cursor[1], args.limit, url, host, kinds)
            for row in rows:
                if row.id in printed:
                    continue
                printed[row.id] = row.fetched_at
                event = _event(row)
                print(json.dumps(event) if args.json else _line(event), flush=True)
            if len(rows) == args.limit:
                cursor = (rows[-1].fetched_at, rows[-1].id)
                continue  # more are waiting: read on at once
            newest = max(printed.values(), default=cursor[0])
            start = max(cursor[0], newest - dt.timedelta(seconds=FOLLOW_OVERLAP_SECONDS))
            if start > cursor[0]:
                cursor = (start, -1)
            printed = {i: at for i, at in printed.items() if at >= cursor[0]}
            await asyncio.sleep(FOLLOW_POLL_SECONDS)

    with contextlib.suppress(KeyboardInterrupt):  # the way to stop following
        with_conn(args, loop)
    return 0


def replay(args: argparse.Namespace) -> int:
    if args.since is None:
        raise UserError("--replay-to-webhook needs --since TIME: the events to send again")
    target = load_settings(args).webhook_url
    if not target:
        raise UserError("--replay-to-webhook sends to CRAWLER_WEBHOOK_URL, which is not set")
    url, host, kinds = _filters(args)
    started = time.monotonic()
    count = with_conn(args, lambda conn: replay_events(conn, target, args.since, url, host,
                                                       kinds))
    print(f"queued {count} events fetched since {args.since.isoformat()} for {target} "
          f"({time.monotonic() - started:.1f} s); a running daemon delivers them")
    return 0
