"""Run a blocking ``RecordStore`` on one thread of its own, writes batched.

Writing is file I/O (gzip, write, flush): on the event loop it would stall every fetch. One
thread keeps the store single-writer. Writes that arrive while a batch is being written go
together in the next batch (group commit): one hand-off to the thread and one wake-up of the
loop per batch, not per record. A fetch awaits its own write, so its record's bytes are in
the file before its transaction commits, while other fetches go on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from crawler.store.base import RecordStore

T = TypeVar("T")

Op = Callable[[RecordStore], Any]


class ThreadedStore:
    def __init__(self, store: RecordStore) -> None:
        self.store = store
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="record-store")
        self._pending: list[tuple[Op, asyncio.Future[Any]]] = []
        self._writing = False
        self._drainer: asyncio.Task[None] | None = None
        self.batches = 0

    async def run(self, op: Callable[[RecordStore], T]) -> T:
        """``op(store)`` on the store's thread, in the next batch. If the caller is
        cancelled, the write still completes (a record with no index row is harmless)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._pending.append((op, future))
        if not self._writing:
            self._writing = True
            self._drainer = loop.create_task(self._drain())
        return await asyncio.shield(future)

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                outcomes = await loop.run_in_executor(self._executor, self._write_batch, batch)
                self.batches += 1
                for (_, future), (ok, value) in zip(batch, outcomes, strict=True):
                    if future.done():
                        continue
                    if ok:
                        future.set_result(value)
                    else:
                        future.set_exception(value)
        finally:
            self._writing = False

    def _write_batch(
        self, batch: list[tuple[Op, asyncio.Future[Any]]]
    ) -> list[tuple[bool, Any]]:
        outcomes: list[tuple[bool, Any]] = []
        for op, _ in batch:
            try:
                outcomes.append((True, op(self.store)))
            except Exception as exc:  # handed to the fetch that asked for this write
                outcomes.append((False, exc))
        return outcomes

    async def close(self) -> None:
        await self.run(lambda store: store.close())
        self._executor.shutdown(wait=True)
