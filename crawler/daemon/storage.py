"""Side task: probe the collection's directory, and say its state where operators look.

``DurableStore.probe`` faults or clears the store's health; this publishes every change at
once (the metrics, and this daemon's row for ``crawler status``) and the state again every
``REFRESH_SECONDS``, so that a row written before the daemon's first heartbeat, or a write
lost to a database hiccup, is corrected soon. ``/readyz`` reads the health itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from pathlib import Path

import asyncpg

from crawler.db import fleet
from crawler.db.collection import mark_damaged_at
from crawler.db.errors import retried_later
from crawler.metrics import CollectionMetrics
from crawler.store.durable import PROBE_SECONDS, DurableStore
from crawler.store.verify import verify_collection
from crawler.store.warc import Recovered

log = logging.getLogger(__name__)

REFRESH_SECONDS = 10.0


async def watch_storage(store: DurableStore, pool: asyncpg.Pool, owner: str,
                        metrics: CollectionMetrics | None) -> None:
    health = store.health
    if metrics is not None:  # the metrics at once, the status row at the next probe
        health.listeners.append(
            lambda fault: metrics.storage_state(None if fault is None else fault.kind))
    published: int | None = None
    published_at = 0.0
    while True:
        await store.probe()
        if metrics is not None:
            metrics.storage_probed()
        await _mark_unreadable(store, pool, metrics)
        now = time.monotonic()
        if health.changes != published or now - published_at >= REFRESH_SECONDS:
            changes = health.changes
            if metrics is not None:
                metrics.storage_state(None if health.fault is None else health.fault.kind)
            with retried_later("publishing the storage state", log):
                await fleet.set_storage_fault(pool, owner, health.describe())
                published, published_at = changes, now
        await asyncio.sleep(PROBE_SECONDS)


async def _mark_unreadable(store: DurableStore, pool: asyncpg.Pool,
                           metrics: CollectionMetrics | None) -> None:
    """Mark the records the fetch path found unreadable (``WarcStore.note_unreadable``)."""
    found: list[tuple[str, int, str]] | None = getattr(store.store, "unreadable", None)
    while found:
        file, offset, kind = found[0]
        with retried_later("marking a damaged record", log):
            await mark_damaged_at(pool, file, offset, kind)
            found.pop(0)
            store.health.damaged_found += 1
            if metrics is not None:
                metrics.damaged_found(kind)
            log.error("%s:%d: record damaged (%s): marked in the index; its URL is stored in "
                      "full at its next fetch (crawler verify checks them all)", file, offset,
                      kind)
            continue
        break  # the database is away: tried again at the next probe


async def mark_recovered_damage(pool: asyncpg.Pool, root: Path,
                                recovered: Sequence[Recovered]) -> None:
    """At start: the index rows of files a crashed writer left damaged mid-file (complete
    records after the damage, so nothing was cut) checked and the damaged ones marked."""
    for one in recovered:
        if one.damaged_at is None:
            continue
        async with pool.acquire() as conn:
            found = await verify_collection(conn, root, repair=True, file=one.name,
                                            report=lambda line: log.error("%s", line))
        log.error("%s: %d of its %d indexed records damaged and marked (crawler verify)",
                  one.name, found.damaged_rows, found.rows)
