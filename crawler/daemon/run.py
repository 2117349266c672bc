"""``crawler run``: wire settings, database, HTTP session, worker and side tasks; handle signals.

SIGTERM or SIGINT stops claiming, lets in-flight fetches finish for ``shutdown_grace`` seconds,
gives back every lease still held and returns 0. A second signal skips the grace period (and
also returns 0). A signal during start-up stops it at once, also with 0. Start-up failures an
operator fixes by a setting (metrics port in use, database unreachable) are one line and exit
2. Side tasks are supervised; a fetch loop that dies exits 1 so that systemd or Kubernetes
restarts the daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from typing import Any

import aiohttp
import asyncpg
from aiohttp import web

from crawler.daemon import heap
from crawler.daemon.alerts import Alerts
from crawler.daemon.follow import PlanFollower
from crawler.daemon.http import make_app, start_server
from crawler.daemon.indexnow import IndexNowReceiver
from crawler.daemon.logstats import log_stats
from crawler.daemon.looplag import watch_loop_lag
from crawler.daemon.planner import PlannerConfig, supervised_planner
from crawler.daemon.signals import Shutdown, process_shutdown
from crawler.daemon.sitemaps import SitemapKeeper
from crawler.daemon.storage import mark_recovered_damage, watch_storage
from crawler.daemon.supervise import SideTask, Supervisor
from crawler.daemon.webhook import WebhookDelivery
from crawler.daemon.worker import Worker
from crawler.db import fleet, frontier, migrate, partitions
from crawler.db.connect import connect, create_pool, describe
from crawler.db.errors import DB_ERRORS, DB_UNAVAILABLE, renew_connections, retried_later
from crawler.db.estimates import fleet_figures
from crawler.db.fleet import HEARTBEAT_SECONDS
from crawler.errors import UserError
from crawler.metrics import Metrics
from crawler.net.fetch import new_session
from crawler.net.ssrf import AddressPolicy
from crawler.settings import Settings, warc_dir
from crawler.store.collect import Collection
from crawler.store.durable import DurableStore
from crawler.store.warc import WarcStore

log = logging.getLogger(__name__)

# How often one daemon of the fleet samples the frontier's gauges (estimates at scale).
SAMPLE_INTERVAL_SECONDS = 30.0


def owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


async def sample_frontier(pool: asyncpg.Pool, metrics: Metrics, settings: Settings) -> None:
    """Side task: the frontier's gauges. One daemon per fleet samples (PostgreSQL's estimates
    on a large frontier, ``crawler.db.estimates``) and stores the figures; all publish them."""
    while True:
        with retried_later("the frontier sampler", log):
            figures = await fleet_figures(
                pool, settings.breaker_failure_threshold, 0.8 * SAMPLE_INTERVAL_SECONDS
            )
            if figures is not None:
                metrics.hosts_sampled(figures.hosts_in_backoff, figures.hosts_circuit_open)
                metrics.frontier_sampled(figures.urls_by_state, figures.due_now,
                                         figures.most_overdue_seconds, figures.hosts_leased,
                                         figures.due_paused)
        await asyncio.sleep(SAMPLE_INTERVAL_SECONDS)


async def heartbeat(pool: asyncpg.Pool, owner: str, concurrency: int, seconds: float,
                    follower: PlanFollower) -> None:
    """Side task: this daemon's row in ``daemons``, so the planner counts its capacity, and
    the plan version it schedules under."""
    while True:
        with retried_later("the heartbeat", log):
            await fleet.heartbeat(pool, owner, concurrency, follower.version)
        await asyncio.sleep(seconds)


class StartupError(UserError):
    """A start-up failure the operator fixes by a setting: one line, exit 2, no traceback."""


def metrics_port_error(settings: Settings, reason: str) -> StartupError:
    return StartupError(
        f"cannot serve metrics on {settings.metrics_host}:{settings.metrics_port} ({reason}); "
        "set CRAWLER_METRICS_PORT to a free port, or to 0 for any free port (one per daemon on "
        "a machine)")


DB_CONNECT_TIMEOUT_SECONDS = 10.0


async def _check_database(url: str) -> str | None:
    """Fail fast, in one line, when the database cannot be reached; returns its revision."""
    try:
        conn = await connect(url, timeout=DB_CONNECT_TIMEOUT_SECONDS)
    except DB_ERRORS as exc:
        raise StartupError(
            f"cannot reach the database at {describe(url)} ({type(exc).__name__}: {exc}); "
            "set CRAWLER_DATABASE_URL to a reachable server, or unset it for the embedded one"
        ) from None
    try:
        return await migrate.schema_revision(conn)
    finally:
        await conn.close()


async def _unless_stopped(task: asyncio.Task[Any], shutdown: Shutdown) -> bool:
    """Wait for ``task`` or a stop signal, whichever comes first: True when the task is done;
    after a signal the task is cancelled and awaited (a start-up error it raised meanwhile is
    moot), and False."""
    stop_wait = asyncio.create_task(shutdown.stop.wait())
    await asyncio.wait([task, stop_wait], return_when=asyncio.FIRST_COMPLETED)
    stop_wait.cancel()
    if task.done():
        return True
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, StartupError):
        await task
    return False


async def preflight(url: str, shutdown: Shutdown) -> bool:
    """The database checks of ``--processes N``'s parent, before it forks: one line and exit 2
    (``StartupError``) when they fail; False when a signal came first (stop, exit 0)."""
    shutdown.attach()
    try:
        check = asyncio.create_task(_check_database(url))
        if not await _unless_stopped(check, shutdown):
            return False
        problem = migrate.revision_problem(check.result(), describe(url))
        if problem is not None:
            raise StartupError(problem)
        return True
    finally:
        shutdown.detach()


async def _start_metrics(stack: contextlib.AsyncExitStack, app: web.Application,
                         settings: Settings) -> int:
    try:
        runner, port = await start_server(app, settings.metrics_host, settings.metrics_port)
    except OSError as exc:
        raise metrics_port_error(settings, exc.strerror or str(exc)) from None
    stack.push_async_callback(runner.cleanup)
    return port


async def run_daemon(
    settings: Settings, url: str, *, duration: float | None = None,
    metrics: Metrics | None = None, shutdown: Shutdown | None = None,
    supervised: bool = False, plans: bool = True,
) -> int:
    """Run until a signal (exit 0), ``duration`` (0), a start-up error (2) or a dead fetch
    loop (1). Signals counted before the loop started are honoured at once.

    ``supervised``: a child of ``--processes N``, whose parent serves /metrics; ``plans``: this
    process runs the planner and the frontier sampler (one per machine)."""
    shutdown = shutdown or process_shutdown()
    shutdown.attach()
    try:
        async with contextlib.AsyncExitStack() as stack:
            start = asyncio.create_task(
                _start(stack, settings, url, metrics or Metrics(), supervised, plans))
            if not await _unless_stopped(start, shutdown):
                log.info("stopped during start-up")
                return 0
            daemon = start.result()
            if daemon is None:
                return 2
            heap.settle()  # start-up's objects out of the collector's scans (crawler.daemon.heap)
            return await daemon.serve(shutdown, duration)
    except StartupError as exc:
        log.error("%s", exc)
        return 2
    finally:
        shutdown.detach()


async def _start(stack: contextlib.AsyncExitStack, settings: Settings, url: str,
                 metrics: Metrics, supervised: bool, plans: bool) -> Daemon | None:
    """Everything that must work before fetching; what it opens, ``stack`` closes."""
    head = migrate.head_revision()
    problem = migrate.revision_problem(await _check_database(url), describe(url))
    if problem is not None:
        log.error("%s", problem)
        return None
    owner = owner_id()
    started: list[Daemon] = []  # the daemon, once built: /readyz asks it

    async def ready() -> tuple[bool, str]:
        return await started[0].ready() if started else (False, "starting")

    port = None
    pings = None
    if not supervised:  # bound first: a port in use is reported before anything is opened
        if settings.indexnow:  # /indexnow on the same server (under --processes, the parent's)
            pings = IndexNowReceiver(settings, metrics.pings)
        port = await _start_metrics(stack, make_app(metrics.registry, ready, pings), settings)
    try:
        session = new_session(settings.user_agent,
                              address_policy=AddressPolicy(settings.allow_networks),
                              lease_keep_alive=settings.keep_alive, ca_bundle=settings.ca_bundle)
    except ValueError as exc:  # e.g. an unreadable CRAWLER_CA_BUNDLE
        raise StartupError(str(exc)) from None
    stack.push_async_callback(session.close)
    if pings is not None:  # closed before the server: a ping meanwhile is answered 503
        await pings.start(url)
        stack.push_async_callback(pings.close)
    pool = await create_pool(url, min_size=1, max_size=settings.db_pool_size)
    stack.push_async_callback(pool.close)
    store: DurableStore | None = None
    if settings.store_versions:
        directory = warc_dir(settings)
        warc_store = await asyncio.to_thread(
            WarcStore, directory, max_bytes=settings.warc_max_bytes, writer_name=owner,
            gzip_level=settings.warc_gzip_level, fsync=settings.warc_fsync,
        )
        for recovered in warc_store.recovered:
            log.warning("closed %s, left open by a writer that stopped", recovered.name)
        await mark_recovered_damage(pool, directory, warc_store.recovered)
        store = DurableStore(warc_store)
        stack.push_async_callback(store.close)
        log.info("storing versions as WARC in %s", directory)
    # Change events go to the outbox whether or not versions are stored.
    collection = Collection(store, pool, settings.user_agent, metrics.collection)
    webhook_session: aiohttp.ClientSession | None = None
    if settings.webhook_url and plans:  # one deliverer per machine, not one per process
        webhook_session = new_session(settings.user_agent,
                                      address_policy=AddressPolicy(settings.allow_networks),
                                      ca_bundle=settings.ca_bundle)
        stack.push_async_callback(webhook_session.close)
    if plans:  # this month's and the next ones' partitions before the first fetch
        await partitions.maintain_once(pool, retention_days=settings.observation_retention_days,
                                       keep_undelivered=bool(settings.webhook_url),
                                       pgbouncer=settings.pgbouncer)
    daemon = Daemon(settings, url, head, owner, pool, metrics, collection, webhook_session, plans,
                    log_stats=not supervised)  # under --processes, the parent logs the figures
    daemon.session = session
    # The plan in force before the first fetch: a process that starts between two rounds
    # schedules under the newest plan at once, not at the uniform fallback.
    with contextlib.suppress(*DB_ERRORS):
        await daemon.follower.adopt_newest()
    started.append(daemon)
    if port is None:
        log.info("daemon %s on %s (fetch process of a --processes set)", owner, describe(url))
    else:
        log.info("daemon %s on %s; metrics at http://%s:%d/metrics",
                 owner, describe(url), settings.metrics_host, port)
    return daemon


class Daemon:
    """The running parts: fetch loop, supervised side tasks, readiness."""

    def __init__(self, settings: Settings, url: str, head: str | None, owner: str,
                 pool: asyncpg.Pool, metrics: Metrics, collection: Collection,
                 webhook_session: aiohttp.ClientSession | None, plans: bool, *,
                 log_stats: bool = False) -> None:
        self.settings = settings
        self.url = url
        self.head = head
        self.owner = owner
        self.pool = pool
        self.metrics = metrics
        self.collection = collection
        self.webhook_session = webhook_session
        self.plans = plans
        self.log_stats = log_stats
        self.follower = PlanFollower(pool, settings, owner)
        self.session: aiohttp.ClientSession | None = None
        self.loop_task: asyncio.Task[None] | None = None
        self.supervisor = Supervisor(self._side_tasks())

    def _side_tasks(self) -> list[SideTask]:
        settings = self.settings
        tasks = [
            SideTask("loop lag watch", lambda: watch_loop_lag(self.metrics), required=False),
            SideTask("heartbeat", lambda: heartbeat(
                self.pool, self.owner, settings.concurrency, HEARTBEAT_SECONDS, self.follower
            ), required=False),
            SideTask("plan follower", self.follower.run, required=True),
        ]
        if self.log_stats and settings.log_stats_interval > 0:
            tasks.append(SideTask("stats log", lambda: log_stats(
                self.metrics.registry, settings.log_stats_interval), required=False))
        if self.plans:
            tasks.append(SideTask("frontier sampler",
                                  lambda: sample_frontier(self.pool, self.metrics, settings),
                                  required=False))
            tasks.append(SideTask("partition maintenance", lambda: partitions.keep_partitions(
                self.pool, retention_days=settings.observation_retention_days,
                keep_undelivered=bool(settings.webhook_url), pgbouncer=settings.pgbouncer,
            ), required=False))
            # One reader per machine; claims keep a fleet's readers apart.
            tasks.append(SideTask("sitemap reader", self._read_sitemaps, required=False))
            # In the uniform mode too: a new interval reschedules the population.
            config = PlannerConfig(self.url, self.follower.settings_policy,
                                   settings.planner_interval, settings.log_level,
                                   settings.log_json, self.owner)
            tasks.append(SideTask(
                "planner", lambda: supervised_planner(config, self.metrics), required=True,
            ))
        store = self.collection.store
        if store is not None:
            tasks.append(SideTask("storage probe", lambda: watch_storage(
                store, self.pool, self.owner, self.metrics.collection), required=False))
        if settings.webhook_url and self.webhook_session is not None:
            delivery = WebhookDelivery(
                self.pool, self.webhook_session, settings.webhook_url, self.metrics.collection,
                owner=self.owner, timeout_seconds=settings.webhook_timeout,
                max_backoff_seconds=settings.webhook_max_backoff,
                database_url=self.url,  # its own connection: none taken from fetching
                secret=settings.webhook_secret, lease_seconds=settings.webhook_lease,
            )
            tasks.append(SideTask("webhook delivery", delivery.run, required=False))
        return tasks

    async def _read_sitemaps(self) -> None:
        """Sitemaps and feeds read again when due (crawler.daemon.sitemaps), under the plan
        this process follows."""
        assert self.session is not None
        await SitemapKeeper(self.pool, self.session, self.settings, self.metrics, self.owner,
                            lambda: self.follower.schedule).run()

    async def ready(self) -> tuple[bool, str]:
        store = self.collection.store
        if store is not None and not store.health.writable:
            return False, store.health.describe() or "collection not writable"
        try:
            revision = await migrate.schema_revision(self.pool)
        except DB_ERRORS as exc:
            return False, f"database unreachable: {exc}"
        if revision != self.head:
            return False, f"migrations not current: {revision} != {self.head}"
        if self.loop_task is None or self.loop_task.done():
            return False, "fetchers not running"
        down = self.supervisor.required_down()
        if down:
            return False, "side task down: " + ", ".join(down)
        if store is not None and store.health.damaged_found:
            return True, (f"ready; {store.health.damaged_found} damaged stored records found "
                          "and marked (crawler verify)")
        return True, "ready"

    async def serve(self, shutdown: Shutdown, duration: float | None) -> int:
        assert self.session is not None
        alerts = Alerts(self.pool, self.settings.alert_after_failures, self.metrics.collection)
        worker = Worker(self.settings, self.owner, self.pool, self.session, self.metrics,
                        self.collection, alerts=alerts, schedule=lambda: self.follower.schedule)
        self.supervisor.start()
        self.loop_task = loop_task = asyncio.create_task(worker.run())
        started = time.monotonic()
        code = 0
        try:
            stop_wait = asyncio.create_task(shutdown.stop.wait())
            await asyncio.wait([stop_wait, loop_task], timeout=duration,
                               return_when=asyncio.FIRST_COMPLETED)
            stop_wait.cancel()
            if loop_task.done() and not loop_task.cancelled():
                exc = loop_task.exception()
                log.error("the fetch loop died; exiting so a supervisor restarts the daemon",
                          exc_info=exc)
                code = 1
        finally:
            worker.stop()
            loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await loop_task
            in_flight = set(worker.host_tasks)
            if in_flight:
                hurry_task = asyncio.create_task(shutdown.hurry.wait())
                await _drain(in_flight, hurry_task, self.settings.shutdown_grace)
                hurry_task.cancel()
            released = await _release_leases(self.pool, self.owner)
            await self.supervisor.stop()
            with contextlib.suppress(*DB_ERRORS):
                await asyncio.wait_for(fleet.stopped(self.pool, self.owner), 5.0)
            log.info("stopped after %.0fs: %d fetches recorded, %d leases released",
                     time.monotonic() - started, worker.fetches_recorded, released)
        return code


async def _release_leases(pool: asyncpg.Pool, owner: str) -> int:
    """Give back every lease, retrying briefly if the database is away (else they expire)."""
    for attempt in range(10):
        try:
            return await frontier.release_owner(pool, owner)
        except DB_UNAVAILABLE as exc:
            await renew_connections(pool, exc)
            log.warning("releasing leases failed (%s); attempt %d", exc, attempt + 1)
            await asyncio.sleep(0.5)
        except asyncpg.PostgresError as exc:  # not transient: do not hide the exit's cause
            log.error("releasing leases failed (%s)", exc)
            break
    log.error("could not release leases; they expire in CRAWLER_LEASE_SECONDS")
    return 0


async def _drain(tasks: set[asyncio.Task[None]], hurry: asyncio.Task[bool], grace: float) -> None:
    """Wait for in-flight hosts up to ``grace`` seconds (or a second signal), then cancel."""
    deadline = time.monotonic() + grace
    pending = set(tasks)
    while pending and not hurry.done():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        await asyncio.wait([*pending, hurry], timeout=remaining,
                           return_when=asyncio.FIRST_COMPLETED)
        pending = {t for t in pending if not t.done()}
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
