"""The statements of ``crawler status``, ``crawler show``, ``crawler explain`` and the demo's
progress line: what they read, gathered per command, rows kept by column name."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import asyncpg

from crawler.db.estimates import most_overdue_seconds, urls_due_paused
from crawler.db.queries import QUERIES

if TYPE_CHECKING:
    from crawler.core.stored_plan import Plan


async def _latest_plan(conn: asyncpg.Connection) -> Plan | None:
    from crawler.db.planning import latest_plan  # heavy: numpy (`crawler status --help`)

    return await latest_plan(conn)


async def most_overdue_urls(conn: asyncpg.Connection, limit: int) -> list[asyncpg.Record]:
    """The ``limit`` most overdue URLs of hosts not paused: the most overdue URLs of the
    ``limit`` hosts due longest (by their next_due_at), one indexed read per host, so that
    no paused host's backlog is walked. (A host whose next_due_at is stale while leased may
    take a place of one due a little later.)"""
    found: list[asyncpg.Record] = []
    for host in await conn.fetch(QUERIES["most_overdue_hosts"], limit):
        found += await conn.fetch(QUERIES["host_most_overdue_urls"], host["id"], limit)
    return sorted(found, key=lambda r: r["next_fetch_at"])[:limit]


@dataclass(frozen=True, slots=True)
class StatusRows:
    """What `crawler status` reads: the counts, the newest plan, and one page of each list."""

    counts: asyncpg.Record
    urls_by_state: dict[str, int]
    plan: Plan | None
    applying: asyncpg.Record | None
    most_overdue: list[asyncpg.Record]
    due_paused: int
    most_overdue_seconds: float
    hosts_in_backoff: list[asyncpg.Record]
    hosts_refused: list[asyncpg.Record]
    hosts_paused: list[asyncpg.Record]
    failing: list[asyncpg.Record]
    totals: asyncpg.Record
    storage_faults: list[asyncpg.Record]
    damaged_records: int


async def status_rows(conn: asyncpg.Connection, limit: int, offset: int,
                      live_daemon_seconds: float) -> StatusRows:
    """The rows of `crawler status`: host lists from ``offset``, ``limit`` rows each (the
    failing list is read from its start: the caller pages it); daemons whose heartbeat is
    older than ``live_daemon_seconds`` are gone."""
    counts = await conn.fetchrow(QUERIES["status_counts"])
    states = {r["state"]: r["n"] for r in await conn.fetch(QUERIES["urls_by_state"])}
    plan = await _latest_plan(conn)
    applying = await conn.fetchrow(QUERIES["daemons_applying_plan"], live_daemon_seconds)
    overdue = await most_overdue_urls(conn, limit)
    paused_due = await urls_due_paused(conn)
    overdue_seconds = await most_overdue_seconds(conn)
    # The statements take a LIMIT only: the rows before the page are read and dropped here
    # (a status page, not a scan of the table).
    backoff = (await conn.fetch(QUERIES["hosts_in_backoff"], offset + limit))[offset:]
    refused = (await conn.fetch(QUERIES["hosts_refused"], offset + limit))[offset:]
    paused = (await conn.fetch(QUERIES["hosts_paused"], offset + limit))[offset:]
    failing = await conn.fetch(QUERIES["failing_now"], offset + limit)
    totals = await conn.fetchrow(QUERIES["status_host_list_totals"])
    storage = await conn.fetch(QUERIES["storage_faults"], live_daemon_seconds)
    damaged = await conn.fetchval(QUERIES["damaged_records_count"])
    assert counts is not None and totals is not None
    return StatusRows(counts, states, plan, applying, overdue, paused_due, overdue_seconds,
                      backoff, refused, paused, failing, totals, storage, damaged)


@dataclass(frozen=True, slots=True)
class UrlRows:
    """What `crawler show URL` reads: the URL's row, its newest observations and date hints,
    the failures of it and its host, and the newest plan (whether its own bounds bind)."""

    url: asyncpg.Record
    observations: list[asyncpg.Record]
    failing: list[asyncpg.Record]
    hints: list[asyncpg.Record]
    plan: Plan | None


async def url_rows(conn: asyncpg.Connection, url: str, limit: int) -> UrlRows | None:
    """The rows of `crawler show`, ``limit`` observations and hints; None for an unknown URL."""
    row = await conn.fetchrow(QUERIES["url_row"], url)
    if row is None:
        return None
    observations = await conn.fetch(QUERIES["url_observations"], row["id"], limit,
                                    row["host_id"])
    failing = await conn.fetch(QUERIES["url_failing"], url)
    hints = await conn.fetch(QUERIES["url_hints_of"], row["id"], row["host_id"], limit)
    plan = await _latest_plan(conn)
    return UrlRows(row, observations, failing, hints, plan)


@dataclass(frozen=True, slots=True)
class ExplainRows:
    """What `crawler explain URL` reads: the URL's row with its host's, the newest plan, its
    date hints and the evidence of each hint source."""

    url: asyncpg.Record
    plan: Plan | None
    hints: list[asyncpg.Record]
    sources: list[asyncpg.Record]


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


async def explain_rows(conn: asyncpg.Connection, url: str, hints_shown: int
                       ) -> ExplainRows | None:
    """The rows of `crawler explain`, ``hints_shown`` hints; None for an unknown URL."""
    row = await conn.fetchrow(QUERIES["explain_url"], url)
    if row is None:
        return None
    plan = await _latest_plan(conn)
    hints = await conn.fetch(QUERIES["url_hints_of"], row["url_id"], row["host_id"],
                             hints_shown)
    sources = await conn.fetch(QUERIES["explain_hint_sources"], row["url_id"], row["host_id"],
                               _finite(row["hints_since"]), _finite(row["last_fetched_at"]))
    return ExplainRows(row, plan, hints, sources)


@dataclass(frozen=True, slots=True)
class Progress:
    """The demo's progress line: counts since it started, URLs due now and known."""

    fetches: int
    changes: int
    cosmetic: int
    due: int
    urls: int


async def progress_since(pool: asyncpg.Pool, started: float) -> Progress:
    counts = await pool.fetchrow(QUERIES["status_counts"])
    totals = await pool.fetchrow(
        "SELECT count(*) AS fetches, count(*) FILTER (WHERE changed) AS changes, "
        "count(*) FILTER (WHERE content_changed AND NOT changed) AS cosmetic "
        "FROM observations WHERE fetched_at >= to_timestamp($1)", started
    )
    assert counts is not None and totals is not None
    return Progress(totals["fetches"], totals["changes"], totals["cosmetic"], counts["due_all"],
                    counts["urls"])
