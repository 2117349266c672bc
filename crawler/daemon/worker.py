"""The fetch loop: claim hosts, drain each at its polite rate, record every fetch, release.

A host is the unit of work. The loop leases up to ``concurrency`` hosts; each leased host is
drained by one task, one request at a time with the politeness delay between requests, and
each fetch commits observation, URL row and schedule in one statement. The lease bounds how
long a host task may work, so another daemon can never send a request to a host whose lease
this daemon might still be using.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from dataclasses import dataclass, field

import aiohttp
import asyncpg

from crawler.core.backoff import CircuitBreaker, HostHealth, host_verdict
from crawler.core.extract import ParsedPage
from crawler.core.links import is_trap, normalize_url
from crawler.core.model import (
    CONTENT_OUTCOMES,
    DISALLOWED,
    GONE,
    HTTP_ERROR,
    FetchResult,
    Schedule,
    UrlRecord,
)
from crawler.core.observe import as_permanent_redirect, observe, parse_result, updated_record
from crawler.core.schedule import SchedulePolicy, next_fetch
from crawler.db import frontier, windows
from crawler.db.frontier import HostClaim
from crawler.db.queries import QUERIES
from crawler.fetch import FetchLimits, fetch, fetch_robots
from crawler.metrics import Events
from crawler.robots import DISALLOW_ALL, RobotsPolicy, decide_robots, needs_fetch, rules_changed

log = logging.getLogger(__name__)

DB_RETRY_MAX_SECONDS = 30.0
# The server is restarting or unreachable: wait and retry (every retried write is idempotent).
DB_UNAVAILABLE = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.OperatorInterventionError,  # admin shutdown, crash, cannot connect now
)


@dataclass
class WorkerConfig:
    owner: str
    concurrency: int = 32
    claim_batch_hosts: int = 16
    claim_urls_per_host: int = 16
    lease_seconds: float = 300.0
    poll_interval: float = 1.0
    politeness_delay: float = 1.0
    simhash_threshold: int = 6
    robots_token: str = "crawler"
    max_crawl_delay: float = 30.0
    robots_cache_seconds: float = 86400.0
    breaker: CircuitBreaker = field(default_factory=CircuitBreaker)
    max_outlinks: int = 1000
    max_depth: int = 16
    limits: FetchLimits = field(default_factory=FetchLimits)
    schedule: SchedulePolicy = field(default_factory=SchedulePolicy)


@dataclass(frozen=True, slots=True)
class HostGate:
    """What robots.txt and politeness allow on one leased host."""

    policy: RobotsPolicy
    delay: float
    next_request_at: float
    robots_expires_at: float


def window_links(record: UrlRecord, page: ParsedPage, max_depth: int) -> list[str]:
    """The out-links that may join the page's window: same site, not traps, not too deep."""
    if (record.depth or 0) + 1 > max_depth:
        return []
    origin = frontier.origin_of(record.url)
    return [
        link.url
        for link in page.links
        if frontier.origin_of(link.url) == origin and not is_trap(link.url)
    ]


class Worker:
    def __init__(
        self,
        config: WorkerConfig,
        pool: asyncpg.Pool,
        session: aiohttp.ClientSession,
        events: Events,
    ) -> None:
        self.config = config
        self.pool = pool
        self.session = session
        self.events = events
        self.stopping = asyncio.Event()
        self.host_tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self.fetches_recorded = 0

    def stop(self) -> None:
        self.stopping.set()
        self._wake.set()

    async def run(self) -> None:
        """Claim and dispatch until stopped. In-flight hosts are the caller's to drain."""
        cfg = self.config
        while not self.stopping.is_set():
            free = cfg.concurrency - len(self.host_tasks)
            claims: list[HostClaim] = []
            if free > 0:
                batch = min(free, cfg.claim_batch_hosts)
                claims = await self._with_db_retry(
                    lambda: frontier.claim(
                        self.pool,
                        cfg.owner,
                        max_hosts=batch,  # noqa: B023 - awaited before the loop moves on
                        urls_per_host=cfg.claim_urls_per_host,
                        lease_seconds=cfg.lease_seconds,
                    ),
                    until_stop=True,
                ) or []
            for host in claims:
                task = asyncio.create_task(self.drain_host(host), name=f"host-{host.host_id}")
                self.host_tasks.add(task)
                task.add_done_callback(self._host_done)
            if claims and len(claims) == min(free, cfg.claim_batch_hosts):
                continue  # there may be more ready hosts: claim again at once
            await self._sleep_until_work()

    def _host_done(self, task: asyncio.Task[None]) -> None:
        self.host_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("host task failed", exc_info=task.exception())
        self._wake.set()

    async def _sleep_until_work(self) -> None:
        timeout = self.config.poll_interval
        if len(self.host_tasks) < self.config.concurrency:
            with contextlib.suppress(asyncpg.PostgresError, *DB_UNAVAILABLE):
                due = await frontier.earliest_due(self.pool)
                if due is not None:
                    timeout = min(timeout, max(0.01, due - time.time()))
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)

    async def drain_host(self, host: HostClaim) -> None:
        """Fetch a leased host's URLs one at a time, politely, then give the host back."""
        cfg = self.config
        # Stop early enough that the last request ends before the lease does.
        deadline = host.lease_expires_at - cfg.limits.total_timeout - 5.0
        try:
            gate = await self._robots_gate(host)
            if gate is None:
                return
            health = host.health
            next_request_at = gate.next_request_at
            for record in host.urls:
                if not gate.policy.allowed(record.url):
                    await self._record_disallowed(record, gate, next_request_at, health)
                    continue
                wait = next_request_at - time.time()
                if wait > 0:
                    self.events.politeness_wait(wait)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.stopping.wait(), wait)
                if self.stopping.is_set() or time.time() > deadline:
                    break
                result = await fetch(self.session, record, cfg.limits)
                next_request_at = time.time() + gate.delay
                health = cfg.breaker.after(
                    health, host_verdict(result), time.time(),
                    retry_after_seconds=result.retry_after_seconds, rng_value=random.random(),
                )
                await self._record(record, result, next_request_at, health)
                if health.backoff_until is not None and health.backoff_until > time.time():
                    self.events.host_backoff(health.backoff_until - time.time())
                    break  # 429/503 or repeated failures: leave the host alone for a while
        finally:
            await asyncio.shield(self._release(host))

    async def _robots_gate(self, host: HostClaim) -> HostGate | None:
        """The host's robots.txt rules (fetched first when stale) and its politeness delay.

        None when robots.txt is unreachable: RFC 9309 says complete disallow, so the host
        waits, backed off until the robots.txt retry, and its URLs stay due.
        """
        cfg = self.config
        state = host.robots
        next_request_at = 0.0
        if state is None or needs_fetch(state, time.time()):
            fetched = await fetch_robots(self.session, host.origin, cfg.limits)
            new_state = decide_robots(
                state, fetched, time.time(), cache_seconds=cfg.robots_cache_seconds
            )
        else:
            new_state = state
        policy = RobotsPolicy.from_state(new_state, cfg.robots_token)
        crawl_delay, capped = policy.crawl_delay(cfg.max_crawl_delay)
        delay = max(cfg.politeness_delay, crawl_delay or 0.0)
        if new_state is not state:
            if capped:
                self.events.crawl_delay_capped()
            next_request_at = time.time() + delay
            await self._with_db_retry(lambda: frontier.store_robots(
                self.pool, host.host_id, new_state, crawl_delay, next_request_at
            ))
            if rules_changed(state, new_state):
                await self._with_db_retry(
                    lambda: self.pool.execute(QUERIES["recheck_disallowed"], host.host_id)
                )
        if policy.mode == DISALLOW_ALL:
            until = new_state.expires_at
            await self._with_db_retry(lambda: self.pool.execute(
                QUERIES["set_host_backoff"], host.host_id, frontier.to_datetime(until)
            ))
            self.events.host_backoff(until - time.time())
            return None
        return HostGate(policy, delay, next_request_at, new_state.expires_at)

    async def _record_disallowed(
        self, record: UrlRecord, gate: HostGate, next_request_at: float, health: HostHealth
    ) -> None:
        """A URL robots.txt forbids: recorded as such, not fetched, rechecked with robots.txt."""
        now = time.time()
        result = FetchResult(fetched_at=now, duration_seconds=0.0, outcome=DISALLOWED,
                             error_kind="robots_txt")
        obs = observe(record, result, self.config.simhash_threshold)
        after = updated_record(record, result, obs)
        recheck_at = max(gate.robots_expires_at, now + self.config.schedule.min_interval_seconds)
        args = frontier.record_args(
            after, obs, Schedule(recheck_at), host_next_request_at=next_request_at,
            host_consecutive_failures=health.consecutive_failures,
            host_backoff_until=health.backoff_until,
        )
        await self._with_db_retry(lambda: frontier.record_fetch(self.pool, args), timed=True)
        self.events.robots_denied()
        self.events.fetch_completed(obs)

    async def _record(
        self,
        record: UrlRecord,
        result: FetchResult,
        next_request_at: float,
        health: HostHealth,
    ) -> None:
        cfg = self.config
        target = normalize_url(result.redirect_to) if result.redirect_to else None
        if target is not None and result.outcome in CONTENT_OUTCOMES:
            await self._record_redirect(record, as_permanent_redirect(result), target,
                                        next_request_at, health)
            return
        windowed = record.site_id is not None
        page = parse_result(
            result, page_url=record.url if windowed else None, max_links=cfg.max_outlinks
        )
        obs = observe(record, result, cfg.simhash_threshold, page)
        after = updated_record(record, result, obs)
        schedule = next_fetch(after, obs, cfg.schedule)
        args = frontier.record_args(
            after,
            obs,
            schedule,
            host_next_request_at=next_request_at,
            host_consecutive_failures=health.consecutive_failures,
            host_backoff_until=health.backoff_until,
            redirect_to=result.redirect_to,
        )
        site_id = record.site_id
        if site_id is None:
            await self._with_db_retry(lambda: frontier.record_fetch(self.pool, args), timed=True)
        else:
            links = (
                window_links(record, page, cfg.max_depth)
                if page is not None
                else ([] if obs.outcome == GONE else None)
            )
            await self._with_db_retry(
                lambda: windows.record_windowed_fetch(
                    self.pool, args, url_id=record.url_id, site_id=site_id,
                    host_id=record.host_id, out_links=links,
                    state_changed=after.state != record.state, now=obs.fetched_at,
                    first_fetch=record.last_fetched_at is None,
                ),
                timed=True,
            )
        self.fetches_recorded += 1
        self.events.fetch_completed(obs)
        if obs.outcome == HTTP_ERROR:
            log.info("fetch %s: %s", record.url, obs.error_kind)

    async def _record_redirect(
        self,
        record: UrlRecord,
        result: FetchResult,
        target: str,
        next_request_at: float,
        health: HostHealth,
    ) -> None:
        """A permanent redirect: the URL records where it went, and the target is seeded as a
        URL of its own (subject to the same rules), in one transaction."""
        obs = observe(record, result, self.config.simhash_threshold)
        after = updated_record(record, result, obs)
        args = frontier.record_args(
            after, obs, next_fetch(after, obs, self.config.schedule),
            host_next_request_at=next_request_at,
            host_consecutive_failures=health.consecutive_failures,
            host_backoff_until=health.backoff_until,
            redirect_to=target,
        )

        async def commit() -> None:
            async with self.pool.acquire() as conn, conn.transaction():
                await frontier.record_fetch(conn, args)
                await frontier.seed(conn, [(target, record.importance)], obs.fetched_at)

        await self._with_db_retry(commit, timed=True)
        self.fetches_recorded += 1
        self.events.fetch_completed(obs)

    async def _release(self, host: HostClaim) -> None:
        with contextlib.suppress(asyncpg.PostgresError, *DB_UNAVAILABLE):
            await frontier.release_host(self.pool, host.host_id, self.config.owner)

    async def _with_db_retry(self, op, *, timed: bool = False, until_stop: bool = False):  # type: ignore[no-untyped-def]
        """Run a database operation, retrying with backoff while the server is unreachable.

        Every operation retried here is idempotent (absolute values, unique observations).
        ``until_stop`` operations (claims) give up, returning None, once the daemon stops.
        """
        backoff = 0.1
        while True:
            if until_stop and self.stopping.is_set():
                return None
            started = time.monotonic()
            try:
                value = await op()
            except DB_UNAVAILABLE as exc:
                log.warning("database unavailable (%s); retrying in %.1fs", exc, backoff)
                if until_stop:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.stopping.wait(), backoff)
                else:
                    await asyncio.sleep(backoff)
                backoff = min(backoff * 2, DB_RETRY_MAX_SECONDS)
                continue
            if timed:
                self.events.db_transaction(time.monotonic() - started)
            return value
