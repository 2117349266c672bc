"""The database errors the daemon waits out, named once for every caller.

asyncpg can hand back a pooled connection that a server shutdown left mid-protocol; the next
statement on it then fails with ``InternalClientError`` ("cannot switch to state ...; another
operation is in progress", MagicStack/asyncpg#1069, sqlalchemy#13241). That is as transient as
the shutdown itself, provided the pool replaces its connections (``expire_connections``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

import asyncpg
import asyncpg.exceptions

# The server is restarting or unreachable, or the connection is broken: wait and retry.
DB_UNAVAILABLE: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,  # a connection left mid-protocol by a shutdown
    asyncpg.exceptions.OperatorInterventionError,  # admin shutdown, crash, cannot connect now
)
# Worth retrying as well: the transaction lost a deadlock (40P01) or a serialization
# conflict (40001) and was rolled back whole.
DB_TRANSIENT: tuple[type[BaseException], ...] = (
    *DB_UNAVAILABLE,
    asyncpg.exceptions.DeadlockDetectedError,
    asyncpg.exceptions.SerializationError,
)
# Anything the database side can raise: what a side task that simply tries again later
# suppresses.
DB_ERRORS: tuple[type[BaseException], ...] = (asyncpg.PostgresError, *DB_UNAVAILABLE)
# Passing conditions a side task waits out without a word: the above, and a statement
# cancelled (a statement timeout, or the shutdown).
DB_PASSING: tuple[type[BaseException], ...] = (
    *DB_TRANSIENT,
    asyncpg.exceptions.QueryCanceledError,
)
_reported: set[tuple[str, str]] = set()


def cancelling() -> bool:
    """Whether the current task is being cancelled. Ask it where a database error is caught
    and the work goes on: a cancellation can come back as one. asyncpg answers it by rolling
    back, and the server may act on the cancel request late, failing that ROLLBACK, so the
    next statement (an unlock in a ``finally``) fails with "current transaction is aborted".
    A loop that then catches the error as a passing condition has swallowed its own
    cancellation, and sleeps through the daemon's shutdown."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running loop: nothing to cancel
        return False
    return task is not None and task.cancelling() > 0


def raise_if_cancelling() -> None:
    """``CancelledError`` when the current task is being cancelled (see ``cancelling``)."""
    if cancelling():
        raise asyncio.CancelledError


@contextlib.contextmanager
def retried_later(what: str, logger: logging.Logger) -> Iterator[None]:
    """Suppress the database errors of a side task that simply tries again later (``DB_ERRORS``),
    and log one that is not a passing condition, once per task and SQLSTATE: a statement the
    server refuses (a missing column after a partial upgrade, a feature Citus does not
    support) fails the same way every round, and would otherwise fail silently for good."""
    try:
        yield
    except DB_PASSING:
        raise_if_cancelling()
    except asyncpg.PostgresError as exc:
        raise_if_cancelling()
        key = (what, str(exc.sqlstate))
        if key not in _reported:
            _reported.add(key)
            logger.error("%s failed and will be retried (logged once): %s: %s", what,
                         type(exc).__name__, exc)


async def renew_connections(pool: asyncpg.Pool, exc: BaseException) -> None:
    """After a connection-level failure, have the pool open fresh connections rather than
    hand out one the failure may have left in a broken state."""
    if isinstance(exc, DB_UNAVAILABLE) and not pool.is_closing():
        await pool.expire_connections()
