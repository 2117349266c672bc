"""Side task: deliver the change-event outbox to ``CRAWLER_WEBHOOK_URL``.

The contract is docs/COLLECTION.md's ("Change events"): one JSON POST per event, any 2xx
delivers it, anything else is retried with exponential backoff; one URL's events go in outbox
order; delivery is at least once (receivers dedupe on ``id``, also sent as ``webhook-id``),
signed as Standard Webhooks sign them when ``CRAWLER_WEBHOOK_SECRET`` is set. The target passes
the same SSRF policy as any fetch. A webhook starts from now: only events after the newest one
when its URL was first configured (``webhooks``), and those a replay queues again, are sent.

One daemon delivers at a time, so that daemons sharing a database do not interleave one URL's
events: the holder of the delivery lease (``delivery_lease``: owner, expiry by the database's
clock, fencing epoch), which another daemon takes over once it expires. Every mark of an event
is fenced by the lease token, and the holder sends a request only while its lease outlasts the
request by the lease's own clock (the monotonic clock keeps counting while a process is
stopped): a daemon frozen past its lease delays events by at most the lease, and after it
resumes it marks and sends nothing before it holds the lease again.

The task reads the outbox on its own connection, outside the daemon's pool when it is given
the database URL: a receiver that is down, however long, takes no connection from fetching.
Each statement stands alone (no session state), so it runs behind PgBouncer's transaction
pooling too.
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

from crawler.core.signing import secret_key, signed_headers
from crawler.db import outbox
from crawler.db.connect import connect
from crawler.db.errors import DB_ERRORS, retried_later
from crawler.metrics import CollectionMetrics
from crawler.net.fetch import canonical_url
from crawler.net.ssrf import is_address_blocked

log = logging.getLogger(__name__)

BATCH_EVENTS = 500
FIRST_BACKOFF_SECONDS = 1.0
IDLE_POLL_SECONDS = 0.5
# Time a delivery lease keeps free after a request's timeout, to mark the event delivered.
LEASE_MARGIN_SECONDS = 1.0


def retry_delay(attempts: int, max_backoff: float, rng_value: float) -> float:
    """Exponential backoff with full jitter in its upper half: 1, 2, 4 ... s, capped."""
    base = min(max_backoff, FIRST_BACKOFF_SECONDS * 2.0 ** max(0, attempts - 1))
    return base * (0.5 + 0.5 * rng_value)


def event_body(event_id: int, payload: Any) -> bytes:
    data = json.loads(payload) if isinstance(payload, str) else dict(payload)
    return json.dumps({"id": event_id, **data}, sort_keys=True).encode()


class LeaseGone(Exception):
    """The delivery lease expired or moved to another daemon: stop delivering."""


class WebhookDelivery:
    def __init__(
        self, pool: asyncpg.Pool, session: aiohttp.ClientSession, url: str,
        metrics: CollectionMetrics, *, owner: str = "", timeout_seconds: float = 10.0,
        max_backoff_seconds: float = 3600.0, database_url: str | None = None,
        secret: str | None = None, lease_seconds: float = 15.0,
    ) -> None:
        self.pool = pool
        self.database_url = database_url
        self.session = session
        self.configured_url = url  # the start cursor's key, as the user wrote it
        self.url = canonical_url(url)  # raises for a scheme or URL never to be requested
        self.metrics = metrics
        self.timeout_seconds = timeout_seconds
        self.timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self.max_backoff = max_backoff_seconds
        self.key = None if secret is None else secret_key(secret)
        self.owner = owner or f"webhook-{id(self):x}"
        self.lease_seconds = lease_seconds
        self.epoch: int | None = None  # the lease's fencing epoch while this holds it
        self.expires_monotonic = 0.0
        self.start_id: int | None = None
        self.receiver_down_until = 0.0
        self._down_streak = 0

    async def start(self, conn: asyncpg.Connection | asyncpg.Pool | None = None) -> int:
        """The id this webhook starts after (recorded now when it is new)."""
        self.start_id = await outbox.webhook_start(self.pool if conn is None else conn,
                                                   self.configured_url)
        return self.start_id

    async def take(self, conn: asyncpg.Connection | asyncpg.Pool | None = None) -> bool:
        """Take the delivery lease if no one holds it; whether this daemon holds it now."""
        db = self.pool if conn is None else conn
        sent = time.monotonic()
        lease = await outbox.take_delivery(db, self.owner, self.lease_seconds)
        if lease is None:
            self.epoch = None
            return False
        self.epoch = lease.epoch
        self.expires_monotonic = sent + lease.seconds
        log.info("webhook %s: delivering (lease epoch %d)", self.url, self.epoch)
        return True

    async def _renew(self, db: asyncpg.Connection | asyncpg.Pool) -> None:
        sent = time.monotonic()
        seconds = None
        if self.epoch is not None and sent < self.expires_monotonic:
            seconds = await outbox.renew_delivery(db, self.owner, self.epoch, self.lease_seconds)
        if seconds is None:
            self._lost("it expired before it was renewed")
        assert seconds is not None
        self.expires_monotonic = sent + seconds

    def _lost(self, why: str) -> None:
        log.warning("webhook %s: delivery lease (epoch %s) lost: %s; another daemon delivers",
                    self.url, self.epoch, why)
        self.epoch = None
        raise LeaseGone(why)

    def _renew_due(self) -> bool:
        """Renew once a third of the lease is used: two renewals may fail before it ends."""
        return self.expires_monotonic - time.monotonic() < self.lease_seconds * 2 / 3

    async def _lease_for_request(self, db: asyncpg.Connection | asyncpg.Pool) -> None:
        """Hold the lease for longer than one request and its mark, or raise LeaseGone."""
        if self.expires_monotonic - time.monotonic() < self.timeout_seconds + LEASE_MARGIN_SECONDS \
                or self._renew_due():
            await self._renew(db)
        if self.expires_monotonic - time.monotonic() < self.timeout_seconds + LEASE_MARGIN_SECONDS:
            self._lost("shorter than a request (raise CRAWLER_WEBHOOK_LEASE above "
                       "CRAWLER_WEBHOOK_TIMEOUT)")

    async def release(self, conn: asyncpg.Connection | asyncpg.Pool | None = None) -> None:
        if self.epoch is None:
            return
        epoch, self.epoch = self.epoch, None
        await outbox.release_delivery(self.pool if conn is None else conn, self.owner, epoch)

    async def post(self, event_id: int, body: bytes) -> str | None:
        """POST one event; None when a 2xx accepted it, else why not."""
        headers = {"Content-Type": "application/json",
                   **signed_headers(self.key, str(event_id), int(time.time()), body)}
        try:
            async with self.session.post(
                self.url, data=body, headers=headers, timeout=self.timeout,
                allow_redirects=False,
            ) as response:
                await response.read()
                if 200 <= response.status < 300:
                    return None
                return f"http_{response.status}"
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            if is_address_blocked(exc):
                return "ssrf"
            return f"unreachable: {type(exc).__name__}"

    async def _started(
        self, conn: asyncpg.Connection | asyncpg.Pool | None
    ) -> tuple[asyncpg.Connection | asyncpg.Pool, int]:
        """The connection to use (the pool when None) and the start cursor, read once."""
        db = self.pool if conn is None else conn
        return db, self.start_id if self.start_id is not None else await self.start(db)

    async def deliver_round(self, conn: asyncpg.Connection | asyncpg.Pool | None = None) -> int:
        """One pass over the oldest pending events; the number delivered. Raises LeaseGone
        once the lease is no longer this daemon's."""
        db, start_id = await self._started(conn)
        rows = await outbox.pending_events(db, BATCH_EVENTS, start_id)
        now = time.time()
        blocked: set[int] = set()
        delivered = 0
        for row in rows:
            if row.url_id in blocked:
                continue  # an earlier event of this URL waits: keep the order
            due = row.next_attempt_at
            if due is not None and due.timestamp() > now:
                blocked.add(row.url_id)
                continue
            await self._lease_for_request(db)
            error = await self.post(row.id, event_body(row.id, row.payload))
            if error is None:
                if not await outbox.mark_delivered(db, row.id, self.owner, self.epoch):
                    self._lost("fenced off while marking an event delivered")
                self.metrics.events_delivered.inc()
                delivered += 1
                self._down_streak = 0
                continue
            self.metrics.delivery_failures.inc()
            blocked.add(row.url_id)
            delay = retry_delay(row.attempts + 1, self.max_backoff, random.random())
            if not await outbox.mark_failed(
                db, row.id, dt.datetime.fromtimestamp(time.time() + delay, dt.UTC), error,
                self.owner, self.epoch,
            ):
                self._lost("fenced off while marking an attempt failed")
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
        db, start_id = await self._started(conn)
        summary = await outbox.outbox_summary(db, start_id)
        if summary is None:
            return
        self.metrics.events_pending.set(summary.pending)
        oldest = summary.oldest_created_at
        self.metrics.oldest_pending_age.set(
            0.0 if oldest is None else max(0.0, time.time() - oldest.timestamp())
        )

    async def run(self) -> None:
        """Deliver until cancelled; database or receiver trouble only delays delivery.

        A daemon that does not hold the lease tries to take it every ``take_poll`` seconds,
        so it takes over at most that long after the holder's lease expired."""
        while True:
            with retried_later("webhook delivery", log):
                async with self._connection() as conn:
                    await self.start(conn)
                    while not conn.is_closed():
                        if await self.take(conn):
                            try:
                                with contextlib.suppress(LeaseGone):
                                    await self._deliver_while_holding(conn)
                            finally:
                                await self._release_quietly(conn)
                        else:
                            await self.sample(conn)
                            await asyncio.sleep(self.take_poll)
            await asyncio.sleep(IDLE_POLL_SECONDS * 4)

    @property
    def take_poll(self) -> float:
        return min(1.0, self.lease_seconds / 4)

    async def _release_quietly(self, conn: asyncpg.Connection) -> None:
        """Give the lease back (another daemon delivers at once); when that fails, the lease
        simply expires."""
        with contextlib.suppress(*DB_ERRORS, OSError, asyncpg.InterfaceError):
            await asyncio.wait_for(self.release(conn), 2.0)

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

    async def _deliver_while_holding(self, conn: asyncpg.Connection) -> None:
        while not conn.is_closed():
            delivered = 0
            if self._renew_due():
                await self._renew(conn)
            with retried_later("webhook delivery", log):
                if time.time() >= self.receiver_down_until:
                    delivered = await self.deliver_round(conn)
                await self.sample(conn)
            if delivered == 0:
                wait = max(IDLE_POLL_SECONDS, self.receiver_down_until - time.time())
                until_renewal = self.expires_monotonic - time.monotonic() \
                    - self.lease_seconds * 2 / 3
                await asyncio.sleep(max(0.05, min(wait, IDLE_POLL_SECONDS * 4, until_renewal)))
