"""The outbox's delivery in PostgreSQL: each webhook's start, the delivery lease, the events.

One daemon of the fleet holds the delivery lease at a time; every mark of an event is fenced
by it (owner and epoch), so a deliverer whose lease another took over marks nothing.
``crawler.daemon.webhook`` delivers; rows become typed values here, by column name.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import asyncpg

from crawler.db.queries import QUERIES


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


def pending_event(row: asyncpg.Record) -> PendingEvent:
    """A ``change_events`` row as ``pending_events`` reads it, by column name."""
    return PendingEvent(
        id=row["id"], url_id=row["url_id"], payload=row["payload"], attempts=row["attempts"],
        next_attempt_at=row["next_attempt_at"], created_at=row["created_at"],
    )


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
    """The delivery lease for ``owner``, ``seconds`` long, when no one holds it; None when
    another does."""
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
    return [pending_event(row) for row in await conn.fetch(QUERIES["pending_events"], limit,
                                                            start_id)]


async def mark_delivered(
    conn: asyncpg.Connection | asyncpg.Pool, event_id: int, owner: str, epoch: int | None
) -> bool:
    """Event ``event_id`` delivered, under the lease (``owner``, ``epoch``); False when the
    lease is gone (nothing marked)."""
    marked = await conn.fetchval(QUERIES["mark_event_delivered"], event_id, owner, epoch)
    return marked is not None


async def mark_failed(
    conn: asyncpg.Connection | asyncpg.Pool, event_id: int, retry_at: dt.datetime, error: str,
    owner: str, epoch: int | None,
) -> bool:
    """An attempt at event ``event_id`` failed (``error``); tried again at ``retry_at``.
    Fenced as ``mark_delivered``."""
    marked = await conn.fetchval(QUERIES["mark_event_failed"], event_id, retry_at, error,
                                 owner, epoch)
    return marked is not None


async def outbox_summary(
    conn: asyncpg.Connection | asyncpg.Pool, start_id: int
) -> OutboxSummary | None:
    """The events still to deliver to the webhook starting after ``start_id``, and the
    oldest's time."""
    row = await conn.fetchrow(QUERIES["outbox_summary"], start_id)
    if row is None:
        return None
    return OutboxSummary(pending=row["pending"], oldest_created_at=row["oldest_created_at"])
