"""Event-loop lag: how late the loop runs a timer, i.e. how long it was busy with CPU work.

A daemon whose loop lags is CPU-bound (parsing, fingerprinting, the driver) and fetches no
faster with more concurrency; a daemon whose loop is idle waits on the network or the database.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

LAG_SAMPLE_SECONDS = 0.25


class LagEvents(Protocol):
    def loop_lag(self, seconds: float) -> None: ...


async def watch_loop_lag(events: LagEvents, interval: float = LAG_SAMPLE_SECONDS) -> None:
    """Side task: sleep ``interval`` over and over and report how much later than asked it woke."""
    while True:
        asked = time.perf_counter() + interval
        await asyncio.sleep(interval)
        events.loop_lag(max(0.0, time.perf_counter() - asked))
