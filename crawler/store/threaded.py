"""Run a blocking ``RecordStore`` for the event loop: records written inline, files closed
on a thread of their own.

Writing a record is a few hundred microseconds of CPU (serialize, SHA-1, gzip) and a
``write`` to the page cache. Handing it to a thread cost far more than doing it: the writer
thread needs the GIL back after every step that releases it (hashing, compressing, writing),
and while the loop is busy parsing pages each reacquisition waits for the loop's switch
interval (5 ms), so a fetch waited 35-50 ms for its record on a loaded machine (median,
measured) against about 1 ms inline, and fetches of a host run back to back behind it. So
records are written on the loop; what can stall for long, closing a full file (``fsync``
of up to ``CRAWLER_WARC_MAX_BYTES``), runs on this store's thread while writing goes on in
a new file. A fetch's record is in the file (flushed to the OS) before its transaction
commits, as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from crawler.store.base import RecordStore

T = TypeVar("T")


class ThreadedStore:
    def __init__(self, store: RecordStore) -> None:
        self.store = store
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="record-store")
        set_background = getattr(store, "set_background", None)
        if set_background is not None:
            set_background(self._executor)

    async def run(self, op: Callable[[RecordStore], T]) -> T:
        """``op(store)``, now: a write is flushed to the OS when this returns."""
        return op(self.store)

    async def close(self) -> None:
        """Close the open file after any file still being closed (same thread, in order)."""
        await asyncio.get_running_loop().run_in_executor(self._executor, self.store.close)
        self._executor.shutdown(wait=True)
