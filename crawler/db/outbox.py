"""The outbox's delivery in PostgreSQL: each webhook's start, the delivery lease, the events.

One daemon of the fleet holds the delivery lease at a time; every mark of an event is fenced
by it (owner and epoch), so a deliverer whose lease another took over marks nothing.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import asyncpg

from crawler.db.queries import QUERIES, row_as


@dataclass(frozen=True, slots=True)
class DeliveryLease:
    epoch: int  # the fencing token's epoch, with the owner that took it
    seconds: float  # how long it holds from now, by the database's clock


@dataclass(frozen=True, slots=True)
class PendingEvent:
    id: int
    url_id: int
    payload: str  # the event's JSON document
    attempts: int
    next_attempt_at: dt.datetime | None  # None: never failed
    created_at: dt.datetime


@dataclass(frozen=True, slots=True)
class OutboxSummary:
    pending: int  # events still to deliver
    oldest_created_at: dt.datetime | None  # the oldest of them; None when none is


async def webhook_start(conn: asyncpg.Connection | asyncpg.Pool, url: str) -> int:
    """The outbox id webhook ``url`` starts after: the newest event's id when the URL was
    first configured (recorded now when it is new)."""
    start = await conn.fetchval(QUERIES["webhook_start"], url)
    if start is None:  # recorded by another daemon in the same instant: read it
        start = await conn.fetchval(QUERIES["webhook_start"], url)
    assert start is not None
    return int(start)


async def take_delivery(
    conn: asyncpg.Connection | asyncpg.Pool, owner: str, seconds: float
) -> DeliveryLease | None:
    """The delivery lease for ``owner``, ``seconds`` long; None when another holds it."""
    row = await conn.fetchrow(QUERIES["delivery_take"], owner, seconds)
    if row is None:
        return None
    return DeliveryLease(epoch=int(row["epoch"]), seconds=float(row["lease_seconds"]))


async def renew_delivery(
    conn: asyncpg.Connection | asyncpg.Pool, owner: str, epoch: int, seconds: float
) -> float | None:
    """The lease extended to ``seconds`` from now while it holds: how long it holds now, by
    the database's clock; None once it expired or moved on."""
    row = await conn.fetchrow(QUERIES["delivery_renew"], owner, epoch, seconds)
    return None if row is None else float(row["lease_seconds"])


async def release_delivery(conn: asyncpg.Connection | asyncpg.Pool, owner: str, epoch: int
                           ) -> None:
    """The lease given back: another daemon delivers at once."""
    await conn.execute(QUERIES["delivery_release"], owner, epoch)


async def pending_events(
    conn: asyncpg.Connection | asyncpg.Pool, limit: int, start_id: int
) -> list[PendingEvent]:
    """The oldest ``limit`` undelivered events after ``start_id``, and those a replay queued
    again, in id order."""
    rows = await conn.fetch(QUERIES["pending_events"], limit, start_id)
    return [row_as(PendingEvent, row) for row in rows]


async def mark_delivered(
    conn: asyncpg.Connection | asyncpg.Pool, event_id: int, owner: str, epoch: int | None
) -> bool:
    """Event ``event_id`` delivered, under the lease; False (nothing marked) once it is gone."""
    marked = await conn.fetchval(QUERIES["mark_event_delivered"], event_id, owner, epoch)
    return marked is not None


async def mark_failed(
    conn: asyncpg.Connection | asyncpg.Pool, event_id: int, retry_at: dt.datetime, error: str,
    owner: str, epoch: int | None,
) -> bool:
    """Event ``event_id`` failed (``error``), tried again at ``retry_at``; as ``mark_delivered``."""
    marked = await conn.fetchval(QUERIES["mark_event_failed"], event_id, retry_at, error,
                                 owner, epoch)
    return marked is not None


async def outbox_summary(
    conn: asyncpg.Connection | asyncpg.Pool, start_id: int
) -> OutboxSummary | None:
    """The events still to deliver to the webhook starting after ``start_id``."""
    row = await conn.fetchrow(QUERIES["outbox_summary"], start_id)
    return None if row is None else row_as(OutboxSummary, row)
