"""The daemon's small HTTP server: /metrics, /healthz and /readyz, and the IndexNow
receiver's /indexnow when one is given (crawler.daemon.indexnow)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from crawler.daemon.indexnow import IndexNowReceiver

ReadinessCheck = Callable[[], Awaitable[tuple[bool, str]]]
# A POST of 10,000 URLs (the protocol's most) of a hundred characters each is 1 MB of JSON:
# aiohttp's default cap, raised so that such a post fits with room for longer URLs.
MAX_REQUEST_BYTES = 4 * 1024 * 1024


def make_app(registry: CollectorRegistry, ready: ReadinessCheck,
             pings: IndexNowReceiver | None = None) -> web.Application:
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        ok, detail = await ready()
        return web.Response(text=detail + "\n", status=200 if ok else 503)

    app = web.Application(client_max_size=MAX_REQUEST_BYTES)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    if pings is not None:
        app.router.add_get("/indexnow", pings.get)
        app.router.add_post("/indexnow", pings.post)
    return app


async def start_server(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Start serving; returns the runner and the bound port (useful when ``port`` is 0)."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    sockets = getattr(site._server, "sockets", None) or []
    bound = sockets[0].getsockname()[1] if sockets else port
    return runner, int(bound)
