"""Write one fetch's transition: every row it changes, in one transaction.

The worker's only write per fetch. ``extra_writes`` is the extension point for rows that must
commit with the observation (a stored version's index row, a change-event outbox row): each
runs on the same connection inside the transaction, after the frontier's own statements, and
must be idempotent like them (a transaction retried after a lost acknowledgement runs again).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import asyncpg

from crawler.core.transition import Transition
from crawler.db import frontier, windows
from crawler.db.frontier import Lease

ExtraWrite = Callable[[asyncpg.Connection, Transition], Awaitable[None]]


async def write_transition(
    pool: asyncpg.Pool,
    t: Transition,
    lease: Lease,
    *,
    extra_writes: Sequence[ExtraWrite] = (),
) -> bool:
    """Commit ``t`` under ``lease``; False when its observation had already been recorded.

    Raises ``LeaseLost`` and writes nothing when the lease is no longer held: the fencing
    check comes first and keeps the host row locked until the commit.
    """
    if t.seed is None and t.window is None and not extra_writes:
        return await frontier.record_fetch(pool, t, lease)  # one statement: one transaction
    async with pool.acquire() as conn, conn.transaction():
        written = await frontier.record_fetch(conn, t, lease)
        if t.seed is not None:
            await frontier.seed(conn, [(t.seed, t.record.importance)], t.observation.fetched_at)
        await windows.apply_window_update(conn, t)
        for write in extra_writes:
            await write(conn, t)
    return written
