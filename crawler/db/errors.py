"""The database errors the daemon waits out, named once for every caller.

asyncpg can hand back a pooled connection that a server shutdown left mid-protocol; the next
statement on it then fails with ``InternalClientError`` ("cannot switch to state ...; another
operation is in progress", MagicStack/asyncpg#1069, sqlalchemy#13241). That is as transient as
the shutdown itself, provided the pool replaces its connections (``expire_connections``).
"""

from __future__ import annotations

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


async def renew_connections(pool: asyncpg.Pool, exc: BaseException) -> None:
    """After a connection-level failure, have the pool open fresh connections rather than
    hand out one the failure may have left in a broken state."""
    if isinstance(exc, DB_UNAVAILABLE) and not pool.is_closing():
        await pool.expire_connections()
