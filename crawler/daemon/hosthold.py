"""A host leased by a reader outside the fetch loop (the sitemap seeder and reader, the
IndexNow key check): its lease (``crawler.db.hostlease``), politeness clock, delay and
robots.txt policy. Each request under it moves the host's politeness clock as the fetch
loop's would, and renews the lease.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
import asyncpg

from crawler.core.robots import RobotsPolicy, RobotsState, decide_robots, product_token
from crawler.db.hostlease import LeasedHost, hold_host, lease_host
from crawler.net.fetch import fetch_robots
from crawler.settings import Settings

LEASE_SECONDS = 120.0  # renewed after every request; longer than any one request may take
LEASE_POLL_SECONDS = 0.5  # how often a host another process holds is asked for again


async def wait_for_lease(conn: asyncpg.Connection | asyncpg.Pool, host: int, owner: str,
                         wait_seconds: float,
                         poll_seconds: float = LEASE_POLL_SECONDS) -> LeasedHost | None:
    """The host's lease (its row), asked for again while another process holds it, up to
    ``wait_seconds``; None after that."""
    deadline = time.monotonic() + wait_seconds
    while True:
        row = await lease_host(conn, host, owner, LEASE_SECONDS)
        if row is not None or time.monotonic() >= deadline:
            return row
        await asyncio.sleep(poll_seconds)


class HostHold:
    """This reader's lease on one host: its politeness clock, delay and robots.txt policy."""

    def __init__(self, conn: asyncpg.Connection, owner: str, host: int, origin: str,
                 epoch: int, row: LeasedHost, settings: Settings) -> None:
        self.conn = conn
        self.owner = owner
        self.host = host
        self.origin = origin
        self.epoch = epoch
        self.settings = settings
        self.refused = row["refused_reason"] or ("paused" if row["paused"] else None)
        self.next_request = max(_finite(row["next_request_at"]), _finite(row["backoff_until"]))
        self.stored_delay = row["crawl_delay_seconds"] or 0.0
        self.robots_state: RobotsState | None = None
        if row["robots_expires_at"] is not None and row["robots_fetched_at"] is not None:
            self.robots_state = RobotsState(
                body=row["robots_body"], status=row["robots_status"],
                fetched_at=row["robots_fetched_at"], good_at=row["robots_good_at"],
                expires_at=row["robots_expires_at"],
                unreachable_since=row["robots_unreachable_since"],
            )
        self.policy = RobotsPolicy.from_state(self.robots_state, product_token(settings.user_agent))

    @property
    def delay(self) -> float:
        crawl_delay, _ = self.policy.crawl_delay(self.settings.max_crawl_delay)
        return max(self.settings.politeness_delay, crawl_delay or 0.0, self.stored_delay)

    async def turn(self) -> None:
        """Wait until the host may be sent a request."""
        wait = self.next_request - time.time()
        if wait > 0:
            await asyncio.sleep(wait)

    async def sent(self) -> None:
        """A request ended now: the next one waits the host's delay; the lease is renewed."""
        self.next_request = time.time() + self.delay
        await self._hold(release=False)

    async def release(self) -> None:
        await self._hold(release=True)

    async def _hold(self, *, release: bool) -> None:
        held = await hold_host(self.conn, self.host, self.owner, self.epoch, self.next_request,
                               LEASE_SECONDS, release)
        if not held and not release:
            raise RuntimeError(f"lost the lease on {self.origin}")

    async def robots(self, session: aiohttp.ClientSession, limits: Settings) -> None:
        """The host's robots.txt, fetched (a request like any other) unless cached and fresh.
        Not stored: the daemon keeps its own copy current."""
        if self.robots_state is not None and time.time() < self.robots_state.expires_at:
            return
        await self.turn()
        fetched = await fetch_robots(session, self.origin, limits)
        await self.sent()
        self.robots_state = decide_robots(self.robots_state, fetched, time.time())
        self.policy = RobotsPolicy.from_state(self.robots_state,
                                              product_token(self.settings.user_agent))


def _finite(value: float | None) -> float:
    return value if value is not None and value == value and abs(value) != float("inf") else 0.0
