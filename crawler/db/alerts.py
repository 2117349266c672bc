"""The alerts' counts in PostgreSQL (``alerts``) and their events in the outbox, written in a
fetch's transaction or a robots.txt request's own (``crawler.daemon.alerts`` decides)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from typing import Any

import asyncpg

from crawler.core.alerts import AlertRow
from crawler.db.frontier import Lease
from crawler.db.queries import QUERIES


def alert_row(row: asyncpg.Record) -> AlertRow:
    """An ``alerts`` row (url_id 0: the host's), by column name."""
    return AlertRow(
        url_id=row["url_id"], failures=row["failures"],
        first_failed_at=row["first_failed_at"].timestamp(), raised=row["raised"],
        url=row["url"], error_kind=row["error_kind"],
    )


async def fence(conn: asyncpg.Connection, lease: Lease) -> bool:
    """Lock the lease's host until the transaction ends, while the lease holds; False once it
    is gone (nothing more is counted against the host then)."""
    held = await conn.fetchval(QUERIES["alert_fence"], lease.host_id, lease.owner, lease.epoch)
    return held is not None


async def count_failure(
    conn: asyncpg.Connection, host_id: int, scopes: Sequence[int], at: dt.datetime,
    kind: str, urls: Sequence[str],
) -> list[AlertRow]:
    """One more consecutive failure of each scope (0: the host; else a URL id, ``urls`` its
    URL) at ``at``; the rows as they are now, none for a failure already counted."""
    rows = await conn.fetch(QUERIES["alert_failed"], host_id, list(scopes), at, kind, list(urls))
    return [alert_row(row) for row in rows]


async def mark_raised(conn: asyncpg.Connection, host_id: int, url_ids: Sequence[int]) -> None:
    """The ``failing`` events of these rows of the host were raised."""
    await conn.execute(QUERIES["alert_raised"], host_id, list(url_ids))


async def clear(conn: asyncpg.Connection, host_id: int, scopes: Sequence[int]) -> list[AlertRow]:
    """The scopes work again: their rows removed, and returned (those that raised ``failing``
    now raise ``recovered``)."""
    rows = await conn.fetch(QUERIES["alert_cleared"], host_id, list(scopes))
    return [alert_row(row) for row in rows]


async def queue_event(
    conn: asyncpg.Connection, host_id: int, url_id: int, at: dt.datetime, kind: str,
    payload: dict[str, Any],
) -> None:
    """An alert into the outbox, once per URL, time and kind."""
    await conn.execute(QUERIES["alert_event"], url_id, at, kind, json.dumps(payload), host_id)
