"""One aiohttp application served on many loopback addresses at one port: each address is a
host of its own to the crawler (its own origin, its own politeness), as the scale and
politeness tests need."""

from __future__ import annotations

from aiohttp import web


class ManyAddressServer:
    """Subclasses define ``handle``; ``start`` serves it on every address at one free port."""

    def __init__(self, addresses: list[str]) -> None:
        self.addresses = addresses
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raise NotImplementedError

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        first = web.TCPSite(self.runner, self.addresses[0], 0)
        await first.start()
        self.port = first._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        for address in self.addresses[1:]:
            await web.TCPSite(self.runner, address, self.port).start()

    async def stop(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()
