"""The record store as the event loop uses it: records written inline, made durable by a
group fsync on a thread of its own, and every storage fault kept in ``health``.

Records are written on the loop: a write is a little CPU and a ``write`` to the page cache,
while a writer thread would need the GIL back after every step that releases it, each time
behind a loop busy parsing pages, so a fetch would wait many times longer than the write
takes. What can stall, ``fsync``, runs on this store's thread.

``sync`` is a group fsync: every fetch waits for one fsync that started after its record was
written, and the fetches that arrive meanwhile share the next (one fsync per batch).

A write, sync or probe that fails sets ``health`` (the daemon then claims no hosts) and the
open file takes no more records. The daemon probes the directory every ``PROBE_SECONDS``,
faulted or not (a directory made read-only or deleted is seen before a write fails); a probe
that writes again clears the fault.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from crawler.store.base import RecordStore
from crawler.store.health import StorageError, StorageHealth, storage_error

T = TypeVar("T")
log = logging.getLogger(__name__)

# A probe writes this much: a record of about this size could be written.
PROBE_BYTES = 64 * 1024
PROBE_SECONDS = 1.0


class DurableStore:
    def __init__(self, store: RecordStore) -> None:
        self.store = store
        self.health = StorageHealth()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="record-store")
        set_background = getattr(store, "set_background", None)
        if set_background is not None:
            set_background(self._executor)
        self._synced = 0  # the store's write generation known durable
        self._failed_upto = 0  # generations lost to a failed sync
        self._failure: StorageError | None = None
        self._sync_task: asyncio.Task[None] | None = None
        self.syncs = 0  # fsync rounds, for the bench and tests

    async def run(self, op: Callable[[RecordStore], T]) -> T:
        """``op(store)``, now: a write is in the OS when this returns (``sync`` for disk).
        A storage failure faults the store and is raised as ``StorageError``."""
        try:
            return op(self.store)
        except StorageError as exc:
            self.fault(exc)
            raise

    def fault(self, exc: StorageError) -> None:
        """The store cannot be relied on: say so, and take no more records in the open file."""
        if self.health.set_fault(exc):
            log.error("the collection cannot be written (%s): %s; no host is claimed until "
                      "a probe writes again", exc.kind, exc.message)
        abandon = getattr(self.store, "abandon", None)
        if abandon is not None:
            abandon()

    async def sync(self) -> None:
        """Every record written so far is on disk, in the file its index row will name;
        ``StorageError`` when that cannot be had (the records must not be indexed)."""
        target: int | None = getattr(self.store, "writes", None)
        if target is None:
            return
        while self._synced < target:
            if target <= self._failed_upto and self._failure is not None:
                raise self._failure
            task = self._sync_task
            if task is None:
                task = self._sync_task = asyncio.create_task(self._sync_once())
            await asyncio.shield(task)

    async def _sync_once(self) -> None:
        generation, files, directory = self.store.take_unsynced()  # type: ignore[attr-defined]
        try:
            await asyncio.get_running_loop().run_in_executor(
                self._executor, self.store.sync_files, files, directory  # type: ignore[attr-defined]
            )
        except Exception as exc:
            failure = storage_error(exc, "syncing records")
            self._failed_upto, self._failure = generation, failure
            self.fault(failure)
            raise failure from exc
        finally:
            self._sync_task = None
        self.syncs += 1
        self._synced = max(self._synced, generation)

    async def probe(self) -> None:
        """Probe the directory once (on the store's thread): fault or clear ``health``."""
        probe = getattr(self.store, "probe", None)
        if probe is None:
            return
        try:
            recreated = await asyncio.get_running_loop().run_in_executor(
                self._executor, probe, PROBE_BYTES
            )
        except Exception as exc:
            self.fault(storage_error(exc, "probing the directory"))
            return
        if recreated is not None:
            log.warning("%s", recreated)
        if self.health.clear():
            log.warning("the collection is writable again: claiming hosts")

    async def close(self) -> None:
        """Close the open file after any file still being closed (same thread, in order)."""
        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, self.store.close)
        except OSError as exc:  # a read-only or deleted directory: the next start recovers it
            log.error("closing the open WARC file failed: %s", exc)
        finally:
            self._executor.shutdown(wait=True)
