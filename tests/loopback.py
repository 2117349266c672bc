"""One aiohttp application served on many loopback addresses at one port: each address is a
host of its own to the crawler (its own origin, its own politeness), as the scale and
politeness tests need.

Every server keeps its own request log (origin, arrival on the monotonic clock, User-Agent)
and registers itself, when it starts, in this test's registry; tests/conftest.py checks
after the test that no host of a registered server was asked twice closer than the
politeness delay a crawler of the test ran with (``assert_polite``). The delay and the
User-Agent are declared by whoever starts the crawler (``declare_crawler``: tests/daemon.py's
``start_daemon`` does it for every daemon); a request with another User-Agent (the test
asking a server itself) is not the crawler's and is not counted, and a test that declared no
crawler is not checked.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import NamedTuple

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler, Middleware
from invariants import assert_polite


class Arrival(NamedTuple):
    origin: str  # http://host:port as the client named it (the Host header)
    at: float  # time.monotonic() when the request's head had arrived
    user_agent: str


@dataclass
class Registry:
    """This test's servers and the crawlers it ran: reset before each test by conftest."""

    servers: list[ManyAddressServer] = field(default_factory=list)
    delays: list[float] = field(default_factory=list)
    user_agents: set[str] = field(default_factory=set)

    def politeness_failures(self) -> list[str]:
        """Each registered server's requests from a declared crawler, checked against the
        smallest delay a crawler of the test ran with: one message per impolite server."""
        if not self.delays:
            return []
        delay = min(self.delays)
        failures = []
        for server in self.servers:
            log = [(a.origin, a.at) for a in server.request_log
                   if a.user_agent in self.user_agents]
            try:
                assert_polite(log, delay)
            except AssertionError as exc:
                failures.append(f"{type(server).__name__} on {server.addresses[0]}.. port "
                                f"{server.port} ({len(log)} crawler requests): {exc}")
        return failures


REGISTRY = Registry()


def reset_registry() -> Registry:
    """A fresh registry for the next test; the previous one."""
    global REGISTRY
    previous, REGISTRY = REGISTRY, Registry()
    return previous


def declare_crawler(delay: float, user_agent: str) -> None:
    """A crawler of this test runs with politeness ``delay`` and sends ``user_agent``."""
    REGISTRY.delays.append(delay)
    REGISTRY.user_agents.add(user_agent)


def request_logger(log: list[Arrival]) -> Middleware:
    """An aiohttp middleware appending each request's ``Arrival`` to ``log``."""

    @web.middleware
    async def logged(request: web.Request, handler: Handler) -> web.StreamResponse:
        log.append(Arrival(f"http://{request.host}", time.monotonic(),
                           request.headers.get(hdrs.USER_AGENT, "")))
        return await handler(request)

    return logged


class ManyAddressServer:
    """Subclasses define ``handle``; ``start`` serves it on every address at one free port."""

    def __init__(self, addresses: list[str]) -> None:
        self.addresses = addresses
        self.runner: web.AppRunner | None = None
        self.port = 0
        self.request_log: list[Arrival] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raise NotImplementedError

    async def start(self) -> None:
        app = web.Application(middlewares=[request_logger(self.request_log)])
        app.router.add_get("/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        first = web.TCPSite(self.runner, self.addresses[0], 0)
        await first.start()
        self.port = first._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        for address in self.addresses[1:]:
            await web.TCPSite(self.runner, address, self.port).start()
        if not any(server is self for server in REGISTRY.servers):
            REGISTRY.servers.append(self)

    async def stop(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()
