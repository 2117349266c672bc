"""Group commit for fetch records: many host tasks' fetches, one statement and one commit.

Each host task records its fetches one at a time and waits for each; alone, that is one
round trip and one commit per fetch, a few hundred fetches a second whatever the hardware.
The recorder collects the fetches all host tasks submit and writes up to ``max_batch`` of
them in one transaction (``crawler.db.record.write_batch``): a batch goes when it is full, or
``linger_seconds`` after its first fetch arrived, so a lone fetch waits a few milliseconds at
most. While ``max_in_flight`` batches are being written the next one keeps filling, so batches
grow with the load by themselves.

Every submitter learns the fate of ITS fetch: written (True, or False after a lost
acknowledgement), ``LeaseLost`` (its lease is gone; the others of the batch are written), or
the database error that rolled the batch back, which the worker's retry policy handles as it
handled a failed single write (the retry resubmits the fetch; a retried write changes
nothing). A batch that fails for another reason is written again item by item, so that one
fetch's failure is that fetch's alone.

A host's last fetch of its lease gives the host back in its own write (``release``). Other
releases (a host whose work ended without a fetch to record) are batched the same way
(``release_hosts``), after the host's last write returned, so a release never overtakes the
records.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

import asyncpg

from crawler.core.schedule import SchedulePolicy
from crawler.core.transition import Transition
from crawler.db import frontier
from crawler.db.errors import DB_TRANSIENT, cancelling
from crawler.db.frontier import Lease
from crawler.db.record import BatchItem, ExtraWrite, write_batch, write_transition

# Fetches per batch: one statement with one fetch_record[] parameter, one commit.
RECORD_BATCH = 500
# How long a batch waits for company after its first fetch.
RECORD_LINGER_SECONDS = 0.002
# Batches written at once (each on a pool connection of its own).
RECORD_IN_FLIGHT = 2

Item = TypeVar("Item")
Result = TypeVar("Result")
# Writes a batch in one transaction: one outcome per item, a result or the exception that
# refused that item alone (``LeaseLost``); raises when the transaction failed whole.
WriteBatch = Callable[[asyncpg.Pool, list[Item]], Awaitable[list[Result | Exception]]]


class Batcher(Generic[Item, Result]):
    """Collects items from many tasks and writes them in batches: see the module's doc."""

    def __init__(self, pool: asyncpg.Pool, write: WriteBatch[Item, Result],
                 host_of: Callable[[Item], int], *, max_batch: int, linger_seconds: float,
                 max_in_flight: int) -> None:
        self.pool = pool
        self._write_batch = write
        self._host_of = host_of
        self.max_batch = max_batch
        self.linger_seconds = linger_seconds
        self._pending: list[tuple[Item, asyncio.Future[Result]]] = []
        self._full = asyncio.Event()
        self._slots = asyncio.Semaphore(max_in_flight)
        self._collector: asyncio.Task[None] | None = None
        self._writes: set[asyncio.Task[None]] = set()
        self.batches = 0  # transactions committed, for tests and the bench
        self.items = 0  # items those transactions carried

    async def submit(self, item: Item) -> Result:
        """Wait for ``item``'s batch to commit; its outcome, or the error that failed it."""
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        if len(self._pending) >= self.max_batch:
            self._full.set()
        if self._collector is None:
            self._collector = asyncio.create_task(self._collect(), name="batcher")
        return await future

    async def _collect(self) -> None:
        """Form batches while items are pending, each written by a task of its own."""
        try:
            while self._pending:
                if len(self._pending) < self.max_batch and self.linger_seconds > 0:
                    self._full.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._full.wait(), self.linger_seconds)
                await self._slots.acquire()
                batch = self._take()
                if not batch:
                    self._slots.release()
                    continue
                task = asyncio.create_task(self._write(batch), name="batcher-write")
                self._writes.add(task)
                task.add_done_callback(self._writes.discard)
        finally:
            self._collector = None

    def _take(self) -> list[tuple[Item, asyncio.Future[Result]]]:
        """Up to ``max_batch`` pending items, oldest first, one per host (a host's next item
        waits for the next batch, so its writes stay in order); abandoned ones dropped."""
        batch: list[tuple[Item, asyncio.Future[Result]]] = []
        rest: list[tuple[Item, asyncio.Future[Result]]] = []
        hosts: set[int] = set()
        for pending in self._pending:
            item, future = pending
            if future.done():  # its task was cancelled while it waited
                continue
            host = self._host_of(item)
            if len(batch) >= self.max_batch or host in hosts:
                rest.append(pending)
                continue
            hosts.add(host)
            batch.append(pending)
        self._pending = rest
        return batch

    async def _write(self, batch: list[tuple[Item, asyncio.Future[Result]]]) -> None:
        try:
            await self._write_items(batch)
        finally:
            self._slots.release()

    async def _write_items(self, batch: list[tuple[Item, asyncio.Future[Result]]]) -> None:
        try:
            outcomes = await self._write_batch(self.pool, [item for item, _ in batch])
        except asyncio.CancelledError:
            for _, future in batch:
                future.cancel()
            raise
        except Exception as exc:
            if cancelling():  # a cancellation the error replaced (crawler.db.errors.cancelling)
                for _, future in batch:
                    future.cancel()
                raise asyncio.CancelledError from exc
            await self._failed(batch, exc)
            return
        self.batches += 1
        self.items += len(batch)
        for (_, future), outcome in zip(batch, outcomes, strict=True):
            if future.done():
                continue
            if isinstance(outcome, Exception):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)

    async def _failed(self, batch: list[tuple[Item, asyncio.Future[Result]]],
                      exc: Exception) -> None:
        if isinstance(exc, DB_TRANSIENT) or len(batch) == 1:
            # A transient failure rolled the batch back whole: each submitter retries its own
            # item under its own lease.
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for one in batch:  # find the culprit: the others must not fail with it
            await self._write_items([one])


async def _release_batch(pool: asyncpg.Pool, leases: list[Lease]) -> list[bool | Exception]:
    released = await frontier.release_hosts(pool, leases)
    return [lease.host_id in released for lease in leases]


class Recorder:
    """A daemon's fetch records and host releases, batched across its host tasks."""

    def __init__(self, pool: asyncpg.Pool, *, max_batch: int = RECORD_BATCH,
                 linger_seconds: float = RECORD_LINGER_SECONDS,
                 max_in_flight: int = RECORD_IN_FLIGHT,
                 schedule: Callable[[], SchedulePolicy] | None = None) -> None:
        self.pool = pool
        # The policy fetches are scheduled under, read at each record (the planner replaces
        # it): the longest interval and prior of the tests of the URLs' hints.
        self.schedule = schedule
        self.records: Batcher[BatchItem, bool] = Batcher(
            pool, write_batch, lambda item: item.lease.host_id, max_batch=max_batch,
            linger_seconds=linger_seconds, max_in_flight=max_in_flight)
        self.releases: Batcher[Lease, bool] = Batcher(
            pool, _release_batch, lambda lease: lease.host_id, max_batch=max_batch,
            linger_seconds=linger_seconds, max_in_flight=max_in_flight)
        self.single_writes = 0  # fetches with a seed or a window update, written alone

    async def record(
        self, t: Transition, lease: Lease, extra_writes: Sequence[ExtraWrite] = (), *,
        release: bool = False,
    ) -> bool:
        """Commit ``t`` under ``lease`` with ``extra_writes``, in a batch with other hosts'
        fetches; the same contract as ``write_transition``: False when its observation was
        already recorded, ``LeaseLost`` (nothing written) when the lease is gone, and any
        database error raised. ``release``: the host's last fetch of the lease, which gives
        the host back in the same write (no ``release`` after it)."""
        schedule = self.schedule() if self.schedule is not None else None
        item = BatchItem(t, lease, tuple(extra_writes), release, schedule)
        if not item.batchable:
            # A window update or a seed moves other URLs' schedules after the record: the
            # host's due time is recomputed by a release after the whole transaction.
            self.single_writes += 1
            written = await write_transition(self.pool, t, lease, extra_writes=extra_writes,
                                             schedule=schedule)
            if release:
                await self.release(lease)
            return written
        return await self.records.submit(item)

    async def release(self, lease: Lease) -> bool:
        """Give the host back, in a batch with other hosts; False when the lease had
        already expired or moved on (``release_host``'s contract)."""
        return await self.releases.submit(lease)
