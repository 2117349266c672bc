"""``crawler run``: wire settings, database, HTTP session, worker and side tasks; handle signals.

SIGTERM or SIGINT stops claiming, lets in-flight fetches finish for ``shutdown_grace`` seconds,
gives back every lease still held and returns 0. A second signal skips the grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
import uuid

import asyncpg

from crawler.core.backoff import CircuitBreaker
from crawler.core.schedule import SchedulePolicy
from crawler.daemon.http import make_app, start_server
from crawler.daemon.planner import PlannerInputs, run_planner
from crawler.daemon.worker import DB_UNAVAILABLE, Worker, WorkerConfig
from crawler.db import frontier, migrate
from crawler.db.connect import create_pool, describe
from crawler.db.queries import QUERIES
from crawler.fetch import FetchLimits, new_session
from crawler.metrics import Metrics
from crawler.net.ssrf import AddressPolicy
from crawler.robots import product_token
from crawler.settings import Settings

log = logging.getLogger(__name__)

# The frontier gauges count whole tables (status_counts): often enough for a dashboard, rarely
# enough not to load a database holding millions of URLs.
SAMPLE_INTERVAL_SECONDS = 30.0


def owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def worker_config(settings: Settings, owner: str) -> WorkerConfig:
    return WorkerConfig(
        owner=owner,
        concurrency=settings.concurrency,
        claim_batch_hosts=settings.claim_batch_hosts,
        claim_urls_per_host=settings.claim_urls_per_host,
        lease_seconds=settings.lease_seconds,
        poll_interval=settings.poll_interval,
        politeness_delay=settings.politeness_delay,
        simhash_threshold=settings.simhash_threshold,
        robots_token=product_token(settings.user_agent),
        max_crawl_delay=settings.max_crawl_delay,
        robots_cache_seconds=settings.robots_cache_seconds,
        breaker=CircuitBreaker(
            cap_seconds=settings.backoff_cap_seconds,
            failure_threshold=settings.breaker_failure_threshold,
            open_seconds=settings.breaker_open_seconds,
        ),
        max_outlinks=settings.max_outlinks,
        max_depth=settings.max_depth,
        limits=FetchLimits(
            connect_timeout=settings.connect_timeout,
            total_timeout=settings.total_timeout,
            first_byte_timeout=settings.first_byte_timeout,
            max_redirects=settings.max_redirects,
            max_url_length=settings.max_url_length,
            max_body_bytes=settings.max_body_bytes,
        ),
        schedule=SchedulePolicy(
            mode=settings.schedule,
            default_interval_seconds=settings.default_interval,
            min_interval_seconds=settings.min_interval,
            max_interval_seconds=settings.max_interval,
            gone_checks_before_max_interval=settings.gone_checks,
            objective=settings.objective,
            beta_seconds=settings.beta_seconds,
        ),
    )


async def sample_frontier(pool: asyncpg.Pool, metrics: Metrics, settings: Settings) -> None:
    """Side task: the frontier's gauges, sampled from the database."""
    while True:
        with contextlib.suppress(asyncpg.PostgresError, OSError, asyncpg.InterfaceError):
            counts = await pool.fetchrow(QUERIES["status_counts"])
            states = {r["state"]: r["n"] for r in await pool.fetch(QUERIES["urls_by_state"])}
            health = await pool.fetchrow(
                QUERIES["hosts_health"], settings.breaker_failure_threshold
            )
            if health is not None:
                metrics.hosts_sampled(health["in_backoff"], health["circuit_open"])
            if counts is not None:
                metrics.frontier_sampled(
                    states,
                    counts["due_now"],
                    float(counts["most_overdue_seconds"] or 0.0),
                    counts["hosts_leased"],
                )
        await asyncio.sleep(SAMPLE_INTERVAL_SECONDS)


async def run_daemon(
    settings: Settings, url: str, *, duration: float | None = None, metrics: Metrics | None = None
) -> int:
    head = migrate.head_revision()
    current = await migrate.current_revision(url)
    if current != head:
        log.error("database %s is at revision %s, not %s: run `crawler db upgrade`",
                  describe(url), current, head)
        return 2
    metrics = metrics or Metrics()
    owner = owner_id()
    pool = await create_pool(url, min_size=1, max_size=settings.db_pool_size)
    config = worker_config(settings, owner)
    session = new_session(
        settings.user_agent,
        config.limits,
        address_policy=AddressPolicy(settings.allow_networks),
    )
    worker = Worker(config, pool, session, metrics)
    loop_task: asyncio.Task[None] | None = None

    async def ready() -> tuple[bool, str]:
        try:
            revision = await migrate.current_revision(url)
        except (OSError, asyncpg.PostgresError) as exc:
            return False, f"database unreachable: {exc}"
        if revision != head:
            return False, f"migrations not current: {revision} != {head}"
        if loop_task is None or loop_task.done():
            return False, "fetchers not running"
        return True, "ready"

    runner, port = await start_server(
        make_app(metrics.registry, ready), settings.metrics_host, settings.metrics_port
    )
    log.info("daemon %s on %s; metrics at http://%s:%d/metrics",
             owner, describe(url), settings.metrics_host, port)

    stop_requested = asyncio.Event()
    hurry = asyncio.Event()

    def on_signal() -> None:
        if stop_requested.is_set():
            hurry.set()
        stop_requested.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    sampler = asyncio.create_task(sample_frontier(pool, metrics, settings))
    side_tasks = [sampler]
    if settings.schedule == "optimal":

        def set_policy(policy: SchedulePolicy) -> None:
            worker.config.schedule = policy

        side_tasks.append(asyncio.create_task(run_planner(
            pool,
            lambda: worker.config.schedule,
            set_policy,
            PlannerInputs(settings.budget_per_day, settings.concurrency,
                          settings.politeness_delay),
            metrics,
            settings.planner_interval,
        )))
    loop_task = asyncio.create_task(worker.run())
    started = time.monotonic()
    try:
        waiters = [asyncio.create_task(stop_requested.wait()), loop_task]
        await asyncio.wait(waiters, timeout=duration, return_when=asyncio.FIRST_COMPLETED)
        waiters[0].cancel()
        if loop_task.done() and loop_task.exception() is not None:
            raise loop_task.exception()  # type: ignore[misc]
    finally:
        worker.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await loop_task
        in_flight = set(worker.host_tasks)
        if in_flight:
            hurry_task = asyncio.create_task(hurry.wait())
            await _drain(in_flight, hurry_task, settings.shutdown_grace)
            hurry_task.cancel()
        released = await _release_leases(pool, owner)
        for side_task in side_tasks:
            side_task.cancel()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await session.close()
        await runner.cleanup()
        await pool.close()
        log.info("stopped after %.0fs: %d fetches recorded, %d leases released",
                 time.monotonic() - started, worker.fetches_recorded, released)
    return 0


async def _release_leases(pool: asyncpg.Pool, owner: str) -> int:
    """Give back every lease, retrying briefly if the database is away (else they expire)."""
    for attempt in range(10):
        try:
            return await frontier.release_owner(pool, owner)
        except DB_UNAVAILABLE as exc:
            log.warning("releasing leases failed (%s); attempt %d", exc, attempt + 1)
            await asyncio.sleep(0.5)
    log.error("could not release leases; they expire in CRAWLER_LEASE_SECONDS")
    return 0


async def _drain(
    tasks: set[asyncio.Task[None]], hurry: asyncio.Task[bool], grace: float
) -> None:
    """Wait for in-flight hosts up to ``grace`` seconds (or a second signal), then cancel."""
    deadline = time.monotonic() + grace
    pending = set(tasks)
    while pending and not hurry.done():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        await asyncio.wait(
            [*pending, hurry], timeout=remaining, return_when=asyncio.FIRST_COMPLETED
        )
        pending = {t for t in pending if not t.done()}
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
