"""Helpers for tests that run a worker in the test's own process (not `crawler run`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


class NullEvents:
    """Metrics sink that ignores every event: the worker's events are not what is tested."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


async def wait_for(
    condition: Callable[[], Awaitable[bool]], what: str, seconds: float = 60.0
) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not await condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)
