"""The fetch loop: claim hosts, drain each at its polite rate, record every fetch, release.

A host is the unit of work. The loop leases up to ``concurrency`` hosts; each leased host is
drained by one task, one request at a time with the politeness delay between requests, and
each fetch becomes one pure transition (``crawler.core.transition``) written in one
transaction. The lease bounds how long a host task may work, so another daemon can never send
a request to a host whose lease this daemon might still be using.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp
import asyncpg

from crawler.core.alerts import failure_kind
from crawler.core.backoff import HostHealth
from crawler.core.model import AnyErrorKind, ErrorKind, FetchResult, Outcome, UrlRecord
from crawler.core.observe import needs_baseline
from crawler.core.patterns import global_filter
from crawler.core.robots import (
    DISALLOW_ALL,
    UNREACHABLE,
    RobotsFetch,
    RobotsPolicy,
    decide_robots,
    needs_fetch,
    product_token,
    rules_changed,
)
from crawler.core.schedule import SchedulePolicy
from crawler.core.transition import HostContext, Transition, forbidden, transition
from crawler.daemon.alerts import Alerts
from crawler.daemon.recorder import Recorder
from crawler.db import frontier
from crawler.db.errors import (
    DB_ERRORS,
    DB_TRANSIENT,
    raise_if_cancelling,
    renew_connections,
    retried_later,
)
from crawler.db.frontier import HostClaim, Lease, LeaseLost
from crawler.db.record import ExtraWrite
from crawler.db.sitemaps import follow_robots, page_feeds
from crawler.logs import log_fetch
from crawler.metrics import Events
from crawler.net.fetch import fetch, fetch_robots
from crawler.net.session import close_host_session, open_host_session
from crawler.settings import LEASE_MARGIN_SECONDS, Settings
from crawler.store.collect import Collection
from crawler.store.health import StorageHealth, not_stored_kind

log = logging.getLogger(__name__)

DB_RETRY_MAX_SECONDS = 30.0
Fetcher = Callable[[aiohttp.ClientSession, UrlRecord, Settings], Awaitable[FetchResult]]


@dataclass(frozen=True, slots=True)
class HostGate:
    """What robots.txt and politeness allow on one leased host."""

    policy: RobotsPolicy
    delay: float
    next_request_at: float
    robots_expires_at: float


class Worker:
    def __init__(
        self,
        settings: Settings,
        owner: str,
        pool: asyncpg.Pool,
        session: aiohttp.ClientSession,
        events: Events,
        collection: Collection | None = None,
        *,
        fetcher: Fetcher = fetch,
        alerts: Alerts | None = None,
        schedule: Callable[[], SchedulePolicy] | None = None,
    ) -> None:
        self.settings = settings
        self.owner = owner  # the name this daemon holds leases under
        self.robots_token = product_token(settings.user_agent)
        self.url_filter = global_filter(settings.include, settings.exclude)
        # The plan in force (the plan follower's, crawler.daemon.follow); None: the settings'.
        settings_policy = SchedulePolicy(settings)
        self.schedule = schedule if schedule is not None else lambda: settings_policy
        self.alerts = alerts  # failing / recovered / region_missing events; None: none
        self.collection = collection
        self.pool = pool
        self.session = session
        self.events = events
        self.fetcher = fetcher  # a test (the simulator's equivalence test) may fake HTTP
        self.stopping = asyncio.Event()
        self.host_tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self.fetches_recorded = 0
        self.recorder = Recorder(pool, schedule=self.schedule)

    def stop(self) -> None:
        self.stopping.set()
        self._wake.set()

    async def run(self) -> None:
        """Claim and dispatch until stopped. In-flight hosts are the caller's to drain."""
        cfg = self.settings
        while not self.stopping.is_set():
            health = self.storage_health
            if health is not None and not health.writable:
                # What cannot be stored is not fetched: no host is claimed until a probe
                # writes again (crawler.store.durable), which wakes this at once.
                await self._wait_writable(health)
                continue
            free = cfg.concurrency - len(self.host_tasks)
            claims: list[HostClaim] = []
            if free > 0:
                batch = min(free, cfg.claim_batch_hosts)
                claim_started = time.perf_counter()
                claims = await self._with_db_retry(
                    lambda: frontier.claim(
                        self.pool, self.owner,
                        max_hosts=batch,  # noqa: B023 - awaited before the loop moves on
                        urls_per_host=cfg.claim_urls_per_host, lease_seconds=cfg.lease_seconds,
                    ),
                    until_stop=True,
                ) or []
                self.events.stage_completed("claim", time.perf_counter() - claim_started)
            for host in claims:
                task = asyncio.create_task(self.drain_host(host), name=f"host-{host.host_id}")
                self.host_tasks.add(task)
                task.add_done_callback(self._host_done)
            if claims and len(claims) == min(free, cfg.claim_batch_hosts):
                continue  # there may be more ready hosts: claim again at once
            await self._sleep_until_work()

    @property
    def storage_health(self) -> StorageHealth | None:
        """The collection's store's health; None when no versions are stored."""
        store = self.collection.store if self.collection is not None else None
        return store.health if store is not None else None

    def _storage_faulted(self) -> bool:
        health = self.storage_health
        return health is not None and not health.writable

    async def _wait_writable(self, health: StorageHealth) -> None:
        stop = asyncio.create_task(self.stopping.wait())
        writable = asyncio.create_task(health.wait_writable(self.settings.poll_interval))
        try:
            await asyncio.wait([stop, writable], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            writable.cancel()

    def _host_done(self, task: asyncio.Task[None]) -> None:
        self.host_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("host task failed", exc_info=task.exception())
        self._wake.set()

    async def _sleep_until_work(self) -> None:
        timeout = self.settings.poll_interval
        if len(self.host_tasks) < self.settings.concurrency:
            with retried_later("the idle wake", log):
                due = await frontier.earliest_due(self.pool)
                if due is not None:
                    timeout = min(timeout, max(0.01, due - time.time()))
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)

    async def drain_host(self, host: HostClaim) -> None:
        """Fetch a leased host's URLs one at a time, politely, then give the host back.

        A write the database refuses because the lease is gone (``LeaseLost``) stops the task
        at once: the fetch's result is dropped, counted and logged, never retried.
        """
        held = True
        session = open_host_session(self.session)  # one kept-alive connection for the lease
        try:
            held = not await self._drain(host, session)  # given back by its last record?
        except LeaseLost as lost:
            held = False
            self.events.lease_rejected(lost.what)
            log.warning("%s; dropped the result and stopped work on %s", lost, host.origin)
        finally:
            await asyncio.shield(close_host_session(session, self.session))
            if held:
                await asyncio.shield(self._release(host))

    def _lease_allows_request(self, host: HostClaim) -> bool:
        """Whether a request started now ends before the lease does (by the database's clock,
        carried on the monotonic clock), with a margin for recording it."""
        remaining = host.lease.remaining_seconds(time.monotonic())
        return remaining > self.settings.total_timeout + LEASE_MARGIN_SECONDS

    async def _drain(self, host: HostClaim, session: aiohttp.ClientSession) -> bool:
        """Fetch and record the host's URLs in turn; True when the last URL's record gave
        the host back (no release needed after it)."""
        if not host.urls or not self._lease_allows_request(host):
            # No due URL left (removed, or rescheduled, since the host was last made ready):
            # given back untouched, without a request to the host, not even for robots.txt.
            return False
        gate = await self._robots_gate(host, session)
        if gate is None:
            return False
        ctx = HostContext(host.health, gate.delay, gate.next_request_at)
        last = host.urls[-1]
        refusal_noted = False
        for record in host.urls:
            if not gate.policy.allowed(record.url):
                await self._record(host, record, forbidden(time.time()), ctx, gate,
                                   release=record is last)
                if record is last:
                    return True
                continue
            wait = ctx.next_request_at - time.time()
            if wait > 0:
                self.events.politeness_wait(wait)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), wait)
            if self.stopping.is_set() or not self._lease_allows_request(host):
                break
            if self._storage_faulted():
                break  # its answer could not be stored: the host waits for the store
            result = await self.fetcher(session, record, self.settings)
            if (result.error_kind == ErrorKind.SSRF and not result.redirects
                    and not refusal_noted):
                # The host's own address refused while its robots.txt is still fresh (fetched
                # before the allow-list changed): said once, as a refused robots.txt is, and
                # written once per lease, not once per URL.
                await self._note_refusal(host, ErrorKind.SSRF)
                refusal_noted = True
            if result.outcome in (Outcome.NETWORK_ERROR, Outcome.TIMEOUT) and result.error_kind:
                await self._note_host_error(host, result.error_kind, record.url)
            done = await self._record(host, record, result, ctx, gate, release=record is last)
            update = done.host
            backoff = (update.backoff_until or 0.0) - time.time()
            if backoff > 0:
                self.events.host_backoff(backoff)
            if record is last:
                return True
            if backoff > 0:
                break  # 429/503 or repeated failures: leave the host alone for a while
            ctx = HostContext(HostHealth(update.consecutive_failures, update.backoff_until),
                              gate.delay, update.next_request_at)
        return False

    async def _robots_gate(self, host: HostClaim,
                           session: aiohttp.ClientSession) -> HostGate | None:
        """The host's robots.txt rules (fetched first when stale) and its politeness delay.

        None when robots.txt is unreachable: RFC 9309 says complete disallow, so the host
        waits, backed off until the robots.txt retry, and its URLs stay due.
        """
        cfg = self.settings
        state = host.robots
        next_request_at = 0.0
        if state is None or needs_fetch(state, time.time()):
            fetched = await fetch_robots(session, host.origin, cfg)
            await self._note_refusal(host, fetched.error_kind)
            await self._count_robots(host, fetched)
            if (fetched.outcome == UNREACHABLE
                    and fetched.error_kind not in (None, ErrorKind.SSRF)):
                await self._note_host_error(host, fetched.error_kind, "robots.txt")
            new_state = decide_robots(state, fetched, time.time(),
                                      cache_seconds=cfg.robots_cache_seconds)
        else:
            new_state = state
        policy = RobotsPolicy.from_state(new_state, self.robots_token)
        crawl_delay, capped = policy.crawl_delay(cfg.max_crawl_delay)
        delay = max(cfg.politeness_delay, crawl_delay or 0.0)
        if new_state is not state:
            if capped:
                self.events.crawl_delay_capped()
            next_request_at = time.time() + delay
            changed = rules_changed(state, new_state)
            await self._with_db_retry(lambda: frontier.store_robots(
                self.pool, host.lease, new_state, crawl_delay, next_request_at,
                rules_changed=changed), lease=host.lease)
            before = state.body if state is not None else None
            followed = await self._with_db_retry(lambda: follow_robots(
                self.pool, host.host_id, host.origin, before, new_state.body), lease=host.lease)
            if followed:
                log.info("robots.txt of %s names new sitemaps, read from now on: %s",
                         host.origin, ", ".join(followed))
        if policy.mode == DISALLOW_ALL:
            until = new_state.expires_at
            await self._with_db_retry(
                lambda: frontier.set_host_backoff(self.pool, host.lease, until), lease=host.lease)
            self.events.host_backoff(until - time.time())
            return None
        return HostGate(policy, delay, next_request_at, new_state.expires_at)

    async def _count_robots(self, host: HostClaim, fetched: RobotsFetch) -> None:
        """A robots.txt request in the metrics and the alerts, as a page's fetch is: it is a
        request to the host, and a failure of it keeps the whole host from being crawled."""
        failure = None
        # An address the SSRF policy refused is no failure of the host's (counted, and
        # shown, as a refusal by _note_refusal).
        if fetched.outcome == UNREACHABLE and fetched.error_kind != ErrorKind.SSRF:
            failure = failure_kind(fetched.outcome, fetched.error_kind, fetched.status)
            self.events.robots_failed(failure)
        if self.alerts is not None:
            alerts = self.alerts
            await self._with_db_retry(lambda: alerts.after_robots(
                host, failure, fetched.fetched_at, fetched.status), lease=host.lease)

    async def _note_refusal(self, host: HostClaim, error_kind: AnyErrorKind | None) -> None:
        """Say once per host, in the log and in ``status``, that the SSRF policy refused it."""
        reason = None
        if error_kind == ErrorKind.SSRF:
            self.events.address_refused()
            reason = ("address refused by the SSRF policy (private, loopback or reserved); "
                      "set CRAWLER_ALLOW_NETWORKS to a CIDR that contains it to crawl it")
        changed = await self._with_db_retry(
            lambda: frontier.set_host_refused(self.pool, host.lease, reason), lease=host.lease)
        if changed and reason is not None:
            log.warning("%s: %s", host.origin, reason)

    async def _record(self, leased: HostClaim, record: UrlRecord, result: FetchResult,
                      host: HostContext, gate: HostGate, *, release: bool = False) -> Transition:
        """Every path (fetched, forbidden by robots.txt, redirected): one pure transition,
        one transaction that writes it (giving the host back with it when ``release``: the
        lease's last URL), then the metrics.

        Whatever fails before the write (the collection's record, its sync, a bug in between)
        costs the fetch its content, never the fetch: an error outcome is recorded instead
        (``_not_stored``), which moves the URL's schedule and the host's politeness clock."""
        fetched = record
        writes: tuple[ExtraWrite, ...] = ()
        not_stored = False
        try:
            if (self.collection is not None and result.outcome == Outcome.OK
                    and needs_baseline(record)):
                # The rule changed since the stored fingerprint (a new region, a window joined,
                # exact watching): compare with the previous version under the new rule.
                record = await self.collection.rebased(record)
            parse_started = time.perf_counter()
            done = self._transition(record, result, host, gate)
            if result.body:  # decode, parse, features, simhash and the schedule of one page
                self.events.stage_completed("parse", time.perf_counter() - parse_started)
            # A stored version's record is on disk before the transaction that indexes it.
            if self.collection is not None:
                stored = await self.collection.prepare(done, result)
                if stored is not None:
                    writes = (stored,)
                    done = stored.adjusted(done)  # a 304 with no original: next fetch in full
                await self._sync_records()
        except Exception as exc:
            done, writes = self._not_stored(fetched, result, host, gate, exc), ()
            not_stored = True
        alert = None if self.alerts is None else self.alerts.fetch_write(leased, done)
        if alert is not None:  # counted in the fetch's transaction, under its fence
            writes = (*writes, alert)
        feeds = page_feeds(leased, done)
        if feeds is not None:  # the feeds the page announces, for its host's sitemaps
            writes = (*writes, feeds)
        # Fenced like every write under the lease: the stored record's index row and change
        # event commit with the fetch only while this daemon holds the host. The recorder
        # writes it in one transaction with other hosts' fetches (crawler.daemon.recorder);
        # a failed batch is retried here, fetch by fetch, like a failed single write.
        try:
            await self._with_db_retry(
                lambda: self.recorder.record(done, leased.lease, writes, release=release),
                timed=True, lease=leased.lease,
            )
        except LeaseLost:
            raise
        except Exception as exc:
            if not_stored:
                raise  # the error outcome itself cannot be written: the lease expires
            # Written without the collection's rows, as an error: its URL and host move on.
            failed = self._not_stored(fetched, result, host, gate, exc)
            await self._with_db_retry(
                lambda: self.recorder.record(failed, leased.lease, (), release=release),
                timed=True, lease=leased.lease,
            )
            done = failed
        self.fetches_recorded += 1
        obs = done.observation
        log_fetch(record.url, obs,
                  had_version=record.last_simhash is not None
                  or record.last_content_hash is not None)
        if obs.outcome == Outcome.DISALLOWED:
            self.events.robots_denied()
        elif obs.outcome == Outcome.HTTP_ERROR:
            log.info("fetch %s: %s", record.url, obs.error_kind)
        self.events.fetch_completed(obs)
        return done

    async def _sync_records(self) -> None:
        """The fetch's records on disk before its index rows commit: one fsync shared by the
        fetches that wait at the same time (``DurableStore.sync``)."""
        store = self.collection.store if self.collection is not None else None
        if store is None:
            return
        started = time.perf_counter()
        await store.sync()
        self.events.stage_completed("sync", time.perf_counter() - started)

    def _not_stored(
        self, record: UrlRecord, result: FetchResult, host: HostContext, gate: HostGate,
        exc: Exception,
    ) -> Transition:
        """The transition of a fetch whose record could not be stored or written: an error
        outcome (``blocked``: neutral for the host's health, a retry for the URL), with the
        host's politeness clock moved as after any request."""
        error_kind = not_stored_kind(exc)
        if error_kind == ErrorKind.STORAGE_ERROR:
            log.error("recording %s failed; recorded as %s", record.url, error_kind,
                      exc_info=exc)
        else:
            log.warning("storing %s failed (%s); recorded as %s", record.url, exc, error_kind)
        failed = FetchResult(
            fetched_at=result.fetched_at, duration_seconds=result.duration_seconds,
            outcome=Outcome.BLOCKED, error_kind=error_kind,
        )
        return self._transition(record, failed, host, gate)

    def _transition(self, record: UrlRecord, result: FetchResult, host: HostContext,
                    gate: HostGate) -> Transition:
        return transition(record, result, host, self.schedule(), url_filter=self.url_filter,
                          now=time.time(), rng_value=random.random(),
                          robots_expires_at=gate.robots_expires_at)

    async def _note_host_error(self, host: HostClaim, kind: AnyErrorKind, what: str) -> None:
        """A connection-level failure (TLS, DNS, timeout) named in the log and kept on the
        host for ``crawler status``, even when it came on robots.txt."""
        log.warning("%s: %s failed: %s", host.origin, what, kind)
        await self._with_db_retry(
            lambda: frontier.note_host_error(self.pool, host.lease, kind, time.time()),
            lease=host.lease)

    async def _release(self, host: HostClaim) -> None:
        """Give the host back, retrying a transient failure while the lease lasts and the
        daemon runs: a release lost to a dropped connection or a deadlock would leave the host
        (and every host of its batch) idle until the lease expired, minutes later. Any other
        database error, or a stop, leaves the host to the lease's expiry."""
        attempts = 0

        async def release() -> bool:
            nonlocal attempts
            attempts += 1
            return await self.recorder.release(host.lease)

        with contextlib.suppress(*DB_ERRORS, LeaseLost):
            released = await self._with_db_retry(release, lease=host.lease, until_stop=True)
            # After a retry, a lease already gone may be the first attempt's work, committed
            # but unacknowledged: no rejection to report then.
            if released is False and attempts == 1:
                self.events.lease_rejected("release")
                log.warning("lease on %s expired before it was released", host.origin)

    async def _with_db_retry(  # type: ignore[no-untyped-def]
        self, op, *, timed: bool = False, until_stop: bool = False, lease: Lease | None = None
    ):
        """Run a database operation, retrying with backoff while the server is unreachable or
        the transaction lost a deadlock or serialization conflict.

        Every operation retried here is idempotent (absolute values, unique observations).
        ``until_stop`` operations (claims, releases) are retried only while the daemon runs:
        once it stops they give up, returning None (the fetch loop claims only while running,
        and a release at shutdown is still tried once). A write under ``lease`` gives up
        (``LeaseLost``) once the lease has run out, since the database would refuse it anyway.
        """
        backoff = 0.1
        while True:
            started = time.monotonic()
            try:
                value = await op()
            except DB_TRANSIENT as exc:
                raise_if_cancelling()
                await renew_connections(self.pool, exc)
                if lease is not None and lease.remaining_seconds(time.monotonic()) <= backoff:
                    raise LeaseLost(lease, f"lease ran out while retrying ({exc})") from exc
                log.warning("database write failed (%s: %s); retrying in %.1fs",
                            type(exc).__name__, exc, backoff)
                if until_stop:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.stopping.wait(), backoff)
                    if self.stopping.is_set():
                        return None
                else:
                    await asyncio.sleep(backoff)
                backoff = min(backoff * 2, DB_RETRY_MAX_SECONDS)
                continue
            if timed:
                self.events.db_transaction(time.monotonic() - started)
            return value
