"""The worker's alerts: count failures per URL and host, raise their events into the outbox.

The decisions are ``crawler.core.alerts``'s; this writes them. A page's fetch is counted by an
extra write of the fetch's own transaction (``crawler.db.record``), after its lease's fence:
the counts and their events commit with the fetch or not at all, and a daemon that lost the
host counts nothing more against it. A robots.txt request, recorded nowhere else, is counted
in a transaction of its own that locks the host row under the same fence. A count is keyed by
the failed request's time, so a transaction retried after a lost acknowledgement counts
nothing twice.

Only failures, and answers that may end a run, cost a statement. An answer is counted only
when a run may be open: the URL failed last time (``urls.consecutive_failures``), the host was
failing when claimed (its breaker's count, or its robots.txt unreachable), or this daemon
counted a failure against the host since it last cleared it. A success of a host with none of
these costs nothing, so the recorder's batching keeps its one statement per batch.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import asyncpg

from crawler.core.alerts import (
    HOST,
    AlertRow,
    alert_payload,
    fetch_failure,
    fetch_worked,
    region_missing,
    to_raise,
    to_recover,
)
from crawler.core.events import simhash_hex
from crawler.core.model import Observation, UrlRecord
from crawler.core.transition import Transition
from crawler.db import alerts as db
from crawler.db.frontier import HostClaim
from crawler.db.record import ExtraWrite
from crawler.metrics import CollectionMetrics

log = logging.getLogger(__name__)


def _at(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, dt.UTC)


class Alerts:
    def __init__(self, pool: asyncpg.Pool, threshold: int,
                 metrics: CollectionMetrics | None = None) -> None:
        self.pool = pool
        self.threshold = threshold
        self.metrics = metrics
        # Hosts this daemon counted a failure against and has not seen work since.
        self._suspect: set[int] = set()

    def _may_be_failing(self, host: HostClaim, record: UrlRecord | None) -> bool:
        robots_down = host.robots is not None and host.robots.unreachable_since is not None
        return (
            host.host_id in self._suspect
            or host.health.consecutive_failures > 0
            or robots_down
            or (record is not None and record.consecutive_failures > 0)
        )

    def fetch_write(self, host: HostClaim, t: Transition) -> ExtraWrite | None:
        """The write that counts fetch ``t`` for its URL and host, in the fetch's transaction,
        or None when it has nothing to count."""
        record, obs = t.before, t.observation
        failure = fetch_failure(obs)
        scopes = (HOST, record.url_id)
        missing = region_missing(record, obs)
        if failure is not None:
            self._suspect.add(host.host_id)
        elif not (fetch_worked(obs) and self._may_be_failing(host, record)) and not missing:
            return None
        elif fetch_worked(obs):
            self._suspect.discard(host.host_id)

        async def write(conn: asyncpg.Connection, _t: Transition) -> None:
            if failure is not None:
                await self._failed(conn, host, record.url_id, record.url, failure,
                                   obs.fetched_at, obs.status, scopes)
            elif fetch_worked(obs):
                await self._worked(conn, host, record.url_id, obs.fetched_at, obs.status,
                                   scopes)
            if missing:
                await self._region_missing(conn, host, record, obs)

        return write

    async def after_robots(self, host: HostClaim, failure: str | None, fetched_at: float,
                           status: int | None) -> None:
        """Count a robots.txt request for its host (it has no URL row of its own)."""
        if not host.urls:
            return  # an event needs a URL row of the host to hang on
        url_id = host.urls[0].url_id  # the event's row: a URL of the host
        robots_url = host.origin.rstrip("/") + "/robots.txt"
        if failure is None and not self._may_be_failing(host, None):
            return
        async with self.pool.acquire() as conn, conn.transaction():
            if not await db.fence(conn, host.lease):
                return  # the lease is gone: nothing more is counted against the host
            if failure is not None:
                self._suspect.add(host.host_id)
                await self._failed(conn, host, url_id, robots_url, failure, fetched_at, status,
                                   (HOST,))
            else:
                self._suspect.discard(host.host_id)
                await self._worked(conn, host, url_id, fetched_at, status, (HOST,))

    async def _failed(self, conn: asyncpg.Connection, host: HostClaim, url_id: int, url: str,
                      kind: str, fetched_at: float, status: int | None,
                      scopes: tuple[int, ...]) -> None:
        rows = await db.count_failure(
            conn, host.host_id, scopes, _at(fetched_at), kind,
            # Each row names the last request that failed (the host's: any of its URLs).
            [url] * len(scopes),
        )
        raised = to_raise(rows, self.threshold)
        if raised:
            await db.mark_raised(conn, host.host_id, [r.url_id for r in raised])
        for row in raised:
            await self._event(conn, host, url_id, fetched_at, "failing", row, status)
            log.warning("%s failing: %d consecutive failures, last %s",
                        host.origin if row.url_id == HOST else row.url, row.failures, kind)

    async def _worked(self, conn: asyncpg.Connection, host: HostClaim, url_id: int,
                      fetched_at: float, status: int | None, scopes: tuple[int, ...]) -> None:
        cleared = await db.clear(conn, host.host_id, scopes)
        for row in to_recover(cleared):
            await self._event(conn, host, url_id, fetched_at, "recovered", row, status)
            log.info("%s recovered after %d consecutive failures",
                     host.origin if row.url_id == HOST else row.url, row.failures)

    async def _region_missing(self, conn: asyncpg.Connection, host: HostClaim,
                              record: UrlRecord, obs: Observation) -> None:
        payload: dict[str, Any] = {
            "kind": "region_missing",
            "url": record.url,
            "fetched_at": _at(obs.fetched_at).isoformat(),
            "status": obs.status,
            "watch": record.region.watch,
            "ignore": record.region.ignore,
            "previous_simhash": simhash_hex(record.last_simhash),
        }
        await self._insert(conn, host, record.url_id, obs.fetched_at, "region_missing", payload)
        log.warning("%s: the watched selector %s matches nothing", record.url,
                    record.region.watch)

    async def _event(self, conn: asyncpg.Connection, host: HostClaim, url_id: int,
                     fetched_at: float, kind: str, row: AlertRow, status: int | None) -> None:
        payload = alert_payload(
            kind, row, origin=host.origin, fetched_at_iso=_at(fetched_at).isoformat(),
            first_failed_at_iso=_at(row.first_failed_at).isoformat(), status=status,
        )
        await self._insert(conn, host, url_id, fetched_at, kind, payload)

    async def _insert(self, conn: asyncpg.Connection, host: HostClaim, url_id: int,
                      fetched_at: float, kind: str, payload: dict[str, Any]) -> None:
        await db.queue_event(conn, host.host_id, url_id, _at(fetched_at), kind, payload)
        if self.metrics is not None:
            self.metrics.event_queued(kind)
