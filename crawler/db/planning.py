"""The planner's reads and writes: the sample of the live population, the fleet's derived
budget, the stored plans, and the walk that reschedules the URLs a new plan moves.

A round reads a bounded, stratified sample of the live population (``id_strata``: a few URLs
from random starts spread over the primary key). The walk reschedules through the same
``crawler.core.schedule.next_fetch`` the worker calls after a fetch (so a detected update
period survives a re-plan). After each statement the planner rests in proportion to the work,
so that it takes a bounded share of the database.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from dataclasses import replace

import asyncpg
import numpy as np

from crawler.core.budget import estimated_population, fleet_budget_per_day, id_strata
from crawler.core.estimate import ChangeHistory
from crawler.core.model import SECONDS_PER_DAY
from crawler.core.planning import Sample
from crawler.core.replan import current_rates, moved_urls, replanned
from crawler.core.schedule import SchedulePolicy
from crawler.core.stored_plan import Plan, plan_document, plan_from_row
from crawler.db import fleet, queries
from crawler.db.connect import create_pool
from crawler.db.fleet import HEARTBEAT_SECONDS
from crawler.db.frontier import record_from_row, refresh_hosts, to_datetime
from crawler.db.queries import QUERIES
from crawler.settings import Settings

log = logging.getLogger(__name__)

RESCHEDULE_CHUNK = 2_000
# After each sample statement the planner rests half as long as it took (the solve waits on the
# sample). After each chunk of the rescheduling walk it rests twice as long: the walk's writes
# hit the same rows and database backends as the fetch loop, which keeps two thirds of them.
SAMPLE_REST_PER_WORK = 0.5
WALK_REST_PER_WORK = 2.0
# Hosts skipped by a due-time refresh (a fetcher held them locked) are retried this often, for
# at most this long after the walk.
HOST_REFRESH_RETRY_SECONDS = 0.2
HOST_REFRESH_PATIENCE_SECONDS = 10.0
# Live URLs read from each stratum of the key space.
URLS_PER_STRATUM = 50
STRATA_PER_STATEMENT = 200
# Plans kept in the database: the newest is in force; the rest are history for operators.
PLANS_KEPT = 100
# A daemon whose heartbeat is older than this many heartbeats is counted as gone.
HEARTBEATS_TO_LIVE = 3.0


async def planner_pool(url: str) -> asyncpg.Pool:
    """The planner process's connections: two, each statement planned for its parameters
    (``crawler.db.connect.create_pool``'s ``custom_plans``: the walk's array statements)."""
    return await create_pool(url, min_size=1, max_size=2, custom_plans=True)


async def claim_round(pool: asyncpg.Pool, round_seconds: float) -> bool:
    """Whether this daemon solves this round: no round of the fleet started less than
    ``round_seconds`` ago (0: solve whatever the others did)."""
    return await pool.fetchval(QUERIES["planner_claim_round"], round_seconds) is not None


async def achieved_per_day(pool: asyncpg.Pool, window_seconds: float) -> float:
    """The fleet's fetch rate over the last ``window_seconds``, per day."""
    fetched = await pool.fetchval(QUERIES["fetches_since"], window_seconds)
    return float(fetched) * SECONDS_PER_DAY / window_seconds


async def round_ended(pool: asyncpg.Pool, seconds: float) -> None:
    """When the round ended (updated_at) and how long it took, for operators and tests."""
    await fleet.store_state(pool, {"round_seconds": seconds})


async def read_sample(pool: asyncpg.Pool, size: int, rng: np.random.Generator) -> Sample:
    """A stratified sample of about ``size`` live URLs, in statements of bounded size; the
    whole live population, counted exactly, when the sample's estimate of it is no larger: a
    small or sparse population is estimated from the few rows past each random start, and the
    estimate, and with it the budget, would jump from round to round."""
    bounds = await pool.fetchrow(QUERIES["planner_id_range"])
    rows: list[asyncpg.Record] = []
    if bounds is None or bounds["min_id"] is None:
        return _sample(rows, 0.0)
    strata = id_strata(bounds["min_id"], bounds["max_id"], max(1, size // URLS_PER_STRATUM), rng)
    n = strata.starts.size
    rows_read = np.zeros(n, dtype=np.int64)
    last_ids = strata.starts.copy()
    for first in range(0, n, STRATA_PER_STATEMENT):
        last = min(n, first + STRATA_PER_STATEMENT)
        statement_started = time.monotonic()
        for row in await queries.fetch(pool, "planner_sample", strata.starts[first:last].tolist(),
                                       strata.ends[first:last].tolist(), URLS_PER_STRATUM):
            k = first + row["stratum"] - 1
            rows_read[k] += 1
            last_ids[k] = max(last_ids[k], row["id"])
            rows.append(row)
        await _rest(statement_started, SAMPLE_REST_PER_WORK)
    population = estimated_population(strata, rows_read, last_ids, URLS_PER_STRATUM)
    if population <= size:
        whole = await _read_whole(pool, bounds["min_id"], bounds["max_id"], size)
        if whole is not None:
            return whole
    return _sample(rows, max(population, float(len(rows))))


async def _read_whole(pool: asyncpg.Pool, min_id: int, max_id: int, size: int) -> Sample | None:
    """Every live URL in key order, in statements of bounded size (the sample statement over
    one stratum, resumed after the last key read); None once there are more than ``size``."""
    rows: list[asyncpg.Record] = []
    chunk = URLS_PER_STRATUM * STRATA_PER_STATEMENT
    start = min_id
    while True:
        statement_started = time.monotonic()
        got = await queries.fetch(pool, "planner_sample", [start], [max_id + 1], chunk)
        for row in got:
            rows.append(row)
            start = max(start, row["id"] + 1)
        await _rest(statement_started, SAMPLE_REST_PER_WORK)
        if len(rows) > size:
            return None
        if len(got) < chunk:
            return _sample(rows, float(len(rows)))


def _sample(rows: list[asyncpg.Record], population: float) -> Sample:
    """The sampled URLs' rows as arrays."""
    histories = [_history(row) for row in rows]
    by_host: dict[str, list[ChangeHistory]] = defaultdict(list)
    for row, history in zip(rows, histories, strict=True):
        if history is not None:
            by_host[str(row["host_id"])].append(history)
    return Sample(
        np.array([row["host_id"] for row in rows], dtype=np.int64),
        _column(rows, "importance"), _column(rows, "change_rate_per_day"),
        _column(rows, "crawl_delay_seconds"), dict(by_host), population, histories,
        _column(rows, "own_min_interval_seconds"), _column(rows, "own_max_interval_seconds"),
        np.array([row["id"] for row in rows], dtype=np.int64),
    )


def _or_nan(value: float | None) -> float:
    return float("nan") if value is None else value


def _history(row: asyncpg.Record) -> ChangeHistory | None:
    """The URL's change history, None before its first observed interval."""
    if row["intervals_observed"] <= 0:
        return None
    return ChangeHistory(tuple(row["changed_intervals_days"] or ()), row["unchanged_days"],
                         row["intervals_observed"])


def _column(rows: list[asyncpg.Record], name: str) -> np.ndarray:
    """A float column of ``rows``, NaN for NULL."""
    return np.array([_or_nan(r[name]) for r in rows], dtype=np.float64)


async def _rest(work_started: float, per_work: float) -> None:
    """Rest in proportion to the work just done, so the planner takes a bounded share."""
    await asyncio.sleep(per_work * (time.monotonic() - work_started))


async def fleet_budget(pool: asyncpg.Pool, settings: Settings) -> float:
    """The derived budget: what politeness allows across the hosts the whole fleet can work."""
    fleet = await pool.fetchrow(QUERIES["fleet_concurrency"],
                                HEARTBEATS_TO_LIVE * HEARTBEAT_SECONDS)
    concurrency = max(settings.concurrency, int(fleet["concurrency"]) if fleet else 0)
    rates = await pool.fetchrow(QUERIES["fleet_host_rates"], settings.politeness_delay, concurrency)
    assert rates is not None
    return fleet_budget_per_day(rates["all_per_day"], rates["busiest_per_day"])


async def latest_plan(conn: asyncpg.Connection | asyncpg.Pool) -> Plan | None:
    """The newest stored plan, None before the first."""
    row = await conn.fetchrow(QUERIES["latest_plan"])
    return None if row is None else plan_from_row(row)


async def latest_plan_version(conn: asyncpg.Connection | asyncpg.Pool) -> int | None:
    """The newest stored plan's version (a primary-key lookup), None before the first."""
    version: int | None = await conn.fetchval(QUERIES["latest_plan_version"])
    return version


async def store_plan(pool: asyncpg.Pool, plan: Plan) -> Plan:
    """Store ``plan`` as the newest, pruning beyond PLANS_KEPT; returns it with its version."""
    version = await pool.fetchval(QUERIES["store_plan"], plan_document(plan))
    await pool.execute(QUERIES["prune_plans"], PLANS_KEPT)
    return replace(plan, version=int(version))


async def reschedule(
    pool: asyncpg.Pool, policy: SchedulePolicy, stale_hosts: set[int] | None = None
) -> int:
    """Walk the live population in chunks; reschedule URLs whose fetch rate moved materially.

    Each statement is its own short transaction, and every write skips rows a fetcher holds
    locked instead of waiting: the planner is never in a deadlock with the fetch loop. A URL
    whose host is leased, or fetched meanwhile, is left to its fetcher. ``stale_hosts``: the
    hosts whose URLs moved but whose due time is not refreshed yet, kept by the caller across
    rounds, so that a walk cut short by a database error is caught up by the next."""
    after = 0
    moved_total = 0
    stale = set() if stale_hosts is None else stale_hosts
    while True:
        chunk_started = time.monotonic()
        rows = await pool.fetch(QUERIES["reschedule_scan"], after, RESCHEDULE_CHUNK)
        if not rows:
            break
        after = rows[-1]["id"]
        ids = np.array([r["id"] for r in rows], dtype=np.int64)
        host_ids = np.array([r["host_id"] for r in rows], dtype=np.int64)
        old = np.array([r["fetch_rate_per_day"] or 0.0 for r in rows], dtype=np.float64)
        # As the URLs' next fetches will estimate them under the policy's priors, so that a
        # refitted prior moves the URLs whose rate it moves.
        change = current_rates([_history(r) for r in rows], _column(rows, "change_rate_per_day"),
                               host_ids.tolist(), policy.prior, policy.host_priors)
        moved = moved_urls(old, change, _column(rows, "importance"), policy,
                           _column(rows, "own_min_interval_seconds"),
                           _column(rows, "own_max_interval_seconds"))
        if moved.any():
            count, hosts = await _reschedule_ids(pool, ids[moved].tolist(),
                                                 host_ids[moved].tolist(), policy)
            moved_total += count
            stale.update(hosts)
            await refresh_hosts(pool, stale)
        await _rest(chunk_started, WALK_REST_PER_WORK)
    deadline = time.monotonic() + HOST_REFRESH_PATIENCE_SECONDS
    while stale and time.monotonic() < deadline:
        await asyncio.sleep(HOST_REFRESH_RETRY_SECONDS)
        await refresh_hosts(pool, stale)
    if stale:  # held by fetchers all along: the next round tries them again
        log.info("planner: %d hosts stayed locked; the next round refreshes them", len(stale))
    return moved_total


async def _reschedule_ids(
    pool: asyncpg.Pool, ids: list[int], host_ids: list[int], policy: SchedulePolicy
) -> tuple[int, set[int]]:
    """Reschedule ``ids``; returns how many were written and the hosts they belong to."""
    now = time.time()
    rows = await pool.fetch(QUERIES["reschedule_records"], ids, host_ids)
    due = [(record, replanned(record, policy, now)) for record in map(record_from_row, rows)
           if record.last_fetched_at is not None]
    if not due:
        return 0, set()
    touched = await queries.fetch(
        pool, "reschedule_urls", [r.url_id for r, _ in due],
        [to_datetime(s.next_fetch_at) for _, s in due], [s.fetch_rate_per_day for _, s in due],
        [to_datetime(r.last_fetched_at) for r, _ in due], [s.change_rate_per_day for _, s in due],
        [r.host_id for r, _ in due],
    )
    return len(touched), {r["host_id"] for r in touched}
