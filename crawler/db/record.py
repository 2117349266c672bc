"""Write fetches' transitions: every row a fetch changes, in one transaction.

``extra_writes`` are rows that must commit with the observation (a stored version's index
row, an outbox row): each runs on the same connection inside the transaction, after the
frontier's own statements, and must be idempotent like them (a transaction retried after a
lost acknowledgement runs again). One that also has a ``write_many(conn, writes)`` static
method is given every fetch's of a batch at once: one statement per kind of row, not per fetch.

``write_batch`` commits many hosts' fetches in one transaction: per-fetch round trips and
commits, not PostgreSQL's work per row, bound the record rate.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from crawler.core.schedule import SchedulePolicy
from crawler.core.transition import Transition
from crawler.db import frontier, hints, windows
from crawler.db.frontier import Lease, LeaseLost

ExtraWrite = Callable[[asyncpg.Connection, Transition], Awaitable[None]]
# The longest interval a completely observed page waits for its announcements when the
# writer names no policy (the settings' default, CRAWLER_MAX_INTERVAL).
DEFAULT_MAX_INTERVAL_SECONDS = 30 * 86400.0


async def _test_hints(
    conn: asyncpg.Connection, ts: Sequence[Transition], schedule: SchedulePolicy | None
) -> None:
    if schedule is None:
        await hints.test_fetches(conn, ts, max_interval_seconds=DEFAULT_MAX_INTERVAL_SECONDS)
    else:
        await hints.test_fetches(conn, ts, max_interval_seconds=schedule.settings.max_interval,
                                 prior=schedule.prior, policy=schedule)


async def write_transition(
    pool: asyncpg.Pool, t: Transition, lease: Lease, *, extra_writes: Sequence[ExtraWrite] = (),
    schedule: SchedulePolicy | None = None,
) -> bool:
    """Commit ``t`` under ``lease``; False when its observation had already been recorded.
    Raises ``LeaseLost`` and writes nothing when the lease is no longer held: the fencing
    check comes first and keeps the host row locked until the commit. ``schedule``: the
    policy the fetch was scheduled under (for the tests of the URL's hints)."""
    tested = await hints.hinted(pool, [t])
    if t.seed is None and t.window is None and not extra_writes and not tested:
        return await frontier.record_fetch(pool, t, lease)  # one statement: one transaction
    async with pool.acquire() as conn, conn.transaction():
        written = await frontier.record_fetch(conn, t, lease)
        if written and tested:
            await _test_hints(conn, [t], schedule)
        if t.seed is not None:
            await frontier.seed(conn, [(t.seed, t.record.importance)], t.observation.fetched_at)
        await windows.apply_window_update(conn, t)
        for write in extra_writes:
            await write(conn, t)
    return written


@dataclass(frozen=True, slots=True)
class BatchItem:
    """One fetch of a batch, with the rows that must commit with it."""

    t: Transition
    lease: Lease
    extra_writes: Sequence[ExtraWrite] = ()
    release: bool = False  # the host's last fetch of the lease: give the host back with it
    schedule: SchedulePolicy | None = None  # the policy it was scheduled under (hint tests)

    @property
    def batchable(self) -> bool:
        """Whether it may share a transaction with other hosts' fetches. A seed or a window
        update locks rows beyond its own host's (other hosts, the site's graph), so such a
        fetch keeps a transaction of its own (``write_transition``)."""
        return self.t.seed is None and self.t.window is None


async def write_batch(
    pool: asyncpg.Pool, items: Sequence[BatchItem]
) -> list[bool | Exception]:
    """Commit ``items`` (at most one per host, all ``batchable``) in ONE transaction.

    Returns, item by item, whether its observation is new (False after a lost acknowledgement)
    or the ``LeaseLost`` that refused it: an item whose lease is gone writes nothing and does
    not stop the others. A database error rolls the whole batch back and is raised."""
    rows = [frontier.record_row(i.t, i.lease, release=i.release) for i in items]
    # A batch with neither hints to test nor extra writes stays one statement.
    tested = await hints.hinted(pool, [i.t for i in items])
    if not tested and not any(i.extra_writes for i in items):
        written = await frontier.record_fetches(pool, rows)  # one statement: one transaction
    else:
        async with pool.acquire() as conn, conn.transaction():
            written = await frontier.record_fetches(conn, rows)
            # A fetch retried after a lost acknowledgement is not new: not tested again.
            await _test_hints(
                conn, [i.t for i in items if i.t.url_id in tested and written.get(i.t.url_id)],
                next((i.schedule for i in items if i.schedule is not None), None))
            # An extra write with a ``write_many`` (the collection's rows) writes the whole
            # batch's in one statement; any other runs once per fetch.
            together: dict[Any, list[ExtraWrite]] = {}
            for item in items:
                if item.t.url_id in written:
                    for write in item.extra_writes:
                        many = getattr(write, "write_many", None)
                        if many is None:
                            await write(conn, item.t)
                        else:
                            together.setdefault(many, []).append(write)
            for many, writes in together.items():
                await many(conn, writes)
    refused = [i.t for i in items if i.release and i.t.url_id not in written]
    if refused:  # given back by a first attempt (extra writes and all) whose ack was lost?
        written.update(dict.fromkeys(await frontier.recorded(pool, refused), False))
    return [
        written[i.t.url_id] if i.t.url_id in written else LeaseLost(i.lease, "fetch record")
        for i in items
    ]
