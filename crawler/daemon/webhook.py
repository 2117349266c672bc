"""Side task: deliver the change-event outbox to ``CRAWLER_WEBHOOK_URL``.

Contract (README, "Change events"): each event is POSTed as one JSON object; any 2xx answer
delivers it; anything else (another status, a refused connection, a timeout) is retried with
exponential backoff up to ``max_backoff`` seconds. Events of one URL are delivered in outbox
order: while an event waits to be retried, the URL's later events wait behind it. Delivery is
at least once: an event is marked delivered after its 2xx, so a crash in between sends it
again (receivers dedupe on ``id``). The target passes the same SSRF policy as any fetch. The
task reads the outbox on its own connection, outside the daemon's pool when it is given the
database URL (as the daemon does): a receiver that is down, however long, takes no connection
from fetching, so fetches never wait for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import random
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import asyncpg

from crawler.db.connect import connect
from crawler.db.errors import retried_later
from crawler.db.queries import QUERIES
from crawler.metrics import CollectionMetrics
from crawler.net.fetch import canonical_url
from crawler.net.ssrf import is_address_blocked

log = logging.getLogger(__name__)

BATCH_EVENTS = 500
FIRST_BACKOFF_SECONDS = 1.0
IDLE_POLL_SECONDS = 0.5
# pg_advisory_lock key of the outbox's one deliverer ("crawler webhook" in ASCII, truncated).
DELIVERY_LOCK = 0x63727772_77656268


def retry_delay(attempts: int, max_backoff: float, rng_value: float) -> float:
    """Exponential backoff with full jitter in its upper half: 1, 2, 4 ... s, capped."""
    base = min(max_backoff, FIRST_BACKOFF_SECONDS * 2.0 ** max(0, attempts - 1))
    return base * (0.5 + 0.5 * rng_value)


def event_body(event_id: int, payload: Any) -> bytes:
    data = json.loads(payload) if isinstance(payload, str) else dict(payload)
    return json.dumps({"id": event_id, **data}, sort_keys=True).encode()


class WebhookDelivery:
    def __init__(
        self,
        pool: asyncpg.Pool,
        session: aiohttp.ClientSession,
        url: str,
        metrics: CollectionMetrics,
        *,
        timeout_seconds: float = 10.0,
        max_backoff_seconds: float = 3600.0,
        batch: int = BATCH_EVENTS,
        database_url: str | None = None,
        pgbouncer: bool = False,
    ) -> None:
        self.pool = pool
        self.pgbouncer = pgbouncer
        self.database_url = database_url
        self.session = session
        self.url = canonical_url(url)  # raises for a scheme or URL never to be requested
        self.metrics = metrics
        self.timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self.max_backoff = max_backoff_seconds
        self.batch = batch
        self.receiver_down_until = 0.0
        self._down_streak = 0

    async def post(self, body: bytes) -> str | None:
        """POST one event; None when a 2xx accepted it, else why not."""
        try:
            async with self.session.post(
                self.url, data=body, headers={"Content-Type": "application/json"},
                timeout=self.timeout, allow_redirects=False,
            ) as response:
                await response.read()
                if 200 <= response.status < 300:
                    return None
                return f"http_{response.status}"
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            if is_address_blocked(exc):
                return "ssrf"
            return f"unreachable: {type(exc).__name__}"

    async def deliver_round(self, conn: asyncpg.Connection | asyncpg.Pool | None = None) -> int:
        """One pass over the oldest pending events; the number delivered."""
        db = self.pool if conn is None else conn
        rows = await db.fetch(QUERIES["pending_events"], self.batch)
        now = time.time()
        blocked: set[int] = set()
        delivered = 0
        for row in rows:
            if row["url_id"] in blocked:
                continue  # an earlier event of this URL waits: keep the order
            due = row["next_attempt_at"]
            if due is not None and due.timestamp() > now:
                blocked.add(row["url_id"])
                continue
            error = await self.post(event_body(row["id"], row["payload"]))
            if error is None:
                await db.execute(QUERIES["mark_event_delivered"], row["id"])
                self.metrics.events_delivered.inc()
                delivered += 1
                self._down_streak = 0
                continue
            self.metrics.delivery_failures.inc()
            blocked.add(row["url_id"])
            delay = retry_delay(row["attempts"] + 1, self.max_backoff, random.random())
            await db.execute(
                QUERIES["mark_event_failed"], row["id"],
                dt.datetime.fromtimestamp(time.time() + delay, dt.UTC), error,
            )
            if error.startswith(("unreachable", "ssrf")):
                # The receiver itself is away: back off as a whole, not URL by URL.
                self._down_streak += 1
                self.receiver_down_until = time.time() + retry_delay(
                    self._down_streak, self.max_backoff, random.random()
                )
                log.warning("webhook %s: %s; retrying in %.1fs", self.url, error,
                            self.receiver_down_until - time.time())
                break
        return delivered

    async def sample(self, conn: asyncpg.Connection | asyncpg.Pool | None = None) -> None:
        row = await (self.pool if conn is None else conn).fetchrow(QUERIES["outbox_summary"])
        if row is None:
            return
        self.metrics.events_pending.set(row["pending"])
        oldest = row["oldest_created_at"]
        self.metrics.oldest_pending_age.set(
            0.0 if oldest is None else max(0.0, time.time() - oldest.timestamp())
        )

    async def run(self) -> None:
        """Deliver until cancelled; database or receiver trouble only delays delivery.

        Only the holder of the outbox's advisory lock delivers (held by a connection of its
        own for as long as it lives), so that daemons sharing a database do not interleave
        one URL's events; the others take over when it goes away. Behind PgBouncer's
        transaction pooling a session lock would stay on whichever server connection took it:
        there each round is one transaction holding a transaction-level lock instead, its
        events marked delivered when the lock goes (see ``_deliver_in_transactions``).
        """
        while True:
            with retried_later("webhook delivery", log):
                async with self._connection() as conn:
                    if self.pgbouncer:
                        await self._deliver_in_transactions(conn)
                    elif await conn.fetchval("SELECT pg_try_advisory_lock($1)", DELIVERY_LOCK):
                        try:
                            await self._deliver_while_holding(conn)
                        finally:
                            await conn.execute("SELECT pg_advisory_unlock($1)", DELIVERY_LOCK)
            await asyncio.sleep(IDLE_POLL_SECONDS * 4)

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[asyncpg.Connection]:
        """A connection of its own (outside the pool) when given the URL, else one from the
        pool, held for as long as this deliverer delivers."""
        if self.database_url is None:
            async with self.pool.acquire() as conn:
                yield conn
            return
        conn = await connect(self.database_url)
        try:
            yield conn
        finally:
            await conn.close()

    async def _deliver_in_transactions(self, conn: asyncpg.Connection) -> None:
        """Rounds, each in a transaction holding the delivery lock, until another daemon
        holds it (the caller then waits): rounds of different daemons never interleave, and
        a round's marks commit as its lock is released, so the next round sees them."""
        while not conn.is_closed():
            delivered = 0
            if time.time() >= self.receiver_down_until:
                async with conn.transaction():
                    if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)",
                                               DELIVERY_LOCK):
                        return
                    delivered = await self.deliver_round(conn)
            await self.sample(conn)
            if delivered == 0:
                wait = max(IDLE_POLL_SECONDS, self.receiver_down_until - time.time())
                await asyncio.sleep(min(wait, IDLE_POLL_SECONDS * 4))

    async def _deliver_while_holding(self, conn: asyncpg.Connection) -> None:
        while not conn.is_closed():  # a lost connection has lost the lock too
            delivered = 0
            with retried_later("webhook delivery", log):
                if time.time() >= self.receiver_down_until:
                    delivered = await self.deliver_round(conn)
                await self.sample(conn)
            if delivered == 0:
                wait = max(IDLE_POLL_SECONDS, self.receiver_down_until - time.time())
                await asyncio.sleep(min(wait, IDLE_POLL_SECONDS * 4))
