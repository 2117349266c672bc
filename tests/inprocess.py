"""Helpers for tests that run a worker in the test's own process (not `crawler run`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from crawler.settings import Settings, default_settings


def quick_settings(base: Settings | None = None, **overrides: Any) -> Settings:
    """``base`` (the defaults if None), made quick for a test: an hour's revisit interval, a
    60 s lease, a 10 ms politeness delay and a 50 ms idle poll; ``overrides`` name settings."""
    quick = {"lease_seconds": 60.0, "poll_interval": 0.05, "politeness_delay": 0.01,
             "default_interval": 3600.0}
    return (base or default_settings()).model_copy(update={**quick, **overrides})


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


@contextlib.asynccontextmanager
async def serve_loopback(
    handle: Callable[[web.Request], Awaitable[web.StreamResponse]], host: str = "127.0.0.1"
) -> AsyncIterator[str]:
    """Serve ``handle`` for every GET on a free port of ``host`` (loopback); yields the
    origin, ``http://host:port``, and stops the server on exit."""
    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()
