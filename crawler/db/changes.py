"""The statements of ``crawler changes``: pages of the outbox's change events, and their
replay to the webhook."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from crawler.db.queries import QUERIES


@dataclass(frozen=True, slots=True)
class OutboxEvent:
    """A change event or alert of the outbox; (fetched_at, id) orders the events."""

    id: int
    fetched_at: dt.datetime
    payload: dict[str, Any]
    delivered: bool


def _event(row: asyncpg.Record) -> OutboxEvent:
    payload = row["payload"]
    data = json.loads(payload) if isinstance(payload, str) else dict(payload)
    return OutboxEvent(row["id"], row["fetched_at"], data, row["delivered_at"] is not None)


async def changes_page(conn: asyncpg.Connection, since: dt.datetime, after_id: int, limit: int,
                       url: str | None, host: str | None, kinds: Sequence[str] | None
                       ) -> list[OutboxEvent]:
    """Up to ``limit`` events after (``since``, ``after_id``) in that order, when given of this
    URL, host and kinds."""
    rows = await conn.fetch(QUERIES["changes_page"], since, after_id, limit, url, host,
                            None if kinds is None else list(kinds))
    return [_event(r) for r in rows]


async def replay_events(conn: asyncpg.Connection, target: str, since: dt.datetime,
                        url: str | None, host: str | None, kinds: Sequence[str] | None) -> int:
    """Queue the events since ``since`` (filtered) for the webhook ``target`` again; how many."""
    async with conn.transaction():
        # Recorded first, so that a webhook the daemon has not started yet starts now, and
        # the replayed events are all it gets of the history.
        await conn.fetchval(QUERIES["webhook_start"], target)
        count: int = await conn.fetchval(QUERIES["replay_events"], since, url, host,
                                         None if kinds is None else list(kinds))
        return count
