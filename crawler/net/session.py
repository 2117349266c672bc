"""HTTP sessions for the edge: one shared session, and one kept-alive connection per host lease.

Every connection passes the SSRF address policy (``crawler.net.ssrf``) and the TLS trust of
``crawler.net.tls``. Bodies are read raw and decoded by ``crawler.net.fetch`` under a cap.

The shared session closes every connection after its response; ``host_session`` gives a host
lease (one URL at a time) its own connector that keeps one connection alive for the host's
next URL, saving a TCP (and TLS) handshake per page. That is only safe if a connection that
misbehaved is never reused (bytes past a Content-Length would be read as the next response):
``fetch`` drops it on any anomaly (``drop_idle``), and an idle connection that received
anything is never handed out again (``EdgeConnector._get``). A request that fails before any
response on a reused connection (closed by the server meanwhile) is retried on a fresh one.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver

from crawler.net.ssrf import AddressPolicy, PolicyResolver, guarded_socket_factory
from crawler.net.tls import tls_context

ACCEPT_ENCODING = "gzip, deflate, br, zstd"
# Idle kept-alive connections close after this: it covers a lease's politeness delay.
KEEP_ALIVE_IDLE_SECONDS = 30.0


class EdgeConnector(aiohttp.TCPConnector):
    """A TCP connector that remembers how it was built, so that a host lease can get its own,
    and that never reuses a connection holding unread bytes."""

    def __init__(
        self,
        *,
        address_policy: AddressPolicy,
        resolver: AbstractResolver,
        ssl_context: ssl.SSLContext,
        user_agent: str,
        keep_alive: bool,
        lease_keep_alive: bool,
    ) -> None:
        super().__init__(
            limit=0,
            limit_per_host=1 if keep_alive else 0,
            force_close=not keep_alive,
            keepalive_timeout=KEEP_ALIVE_IDLE_SECONDS if keep_alive else None,
            ttl_dns_cache=300,
            enable_cleanup_closed=True,
            resolver=resolver,
            socket_factory=guarded_socket_factory(address_policy),
            ssl=ssl_context,
        )
        self.address_policy = address_policy
        self.shared_resolver = resolver
        self.ssl_context = ssl_context
        self.user_agent = user_agent
        self.lease_keep_alive = lease_keep_alive
        self.last_reused = False  # whether the latest request went out on a reused connection

    async def _get(self, key: Any, traces: Any) -> Any:
        # A response handler with buffered bytes, an exception or an unfinished payload was
        # written to while idle (or never finished): its next "response" would not be ours.
        if self._conns.get(key):
            # Let bytes already in the socket buffer reach the protocol first: the loop reads
            # ready sockets after the task that yielded, hence two turns.
            for _turn in range(2):
                await asyncio.sleep(0)
        pooled = self._conns.get(key)
        if pooled:
            for proto, used_at in list(pooled):
                if proto.should_close:
                    pooled.remove((proto, used_at))
                    proto.close()
            if not pooled:
                del self._conns[key]
        connection = await super()._get(key, traces)
        self.last_reused = connection is not None
        return connection

    def drop_idle(self) -> None:
        """Close every idle connection: the next request opens a fresh one."""
        for pooled in self._conns.values():
            for proto, _used_at in pooled:
                proto.close()
        self._conns.clear()

    def for_lease(self) -> EdgeConnector:
        """A connector for one host lease: the same policy, resolver and trust, keep-alive on."""
        return EdgeConnector(
            address_policy=self.address_policy,
            resolver=self.shared_resolver,
            ssl_context=self.ssl_context,
            user_agent=self.user_agent,
            keep_alive=True,
            lease_keep_alive=True,
        )


def _client_session(connector: EdgeConnector) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=connector,
        connector_owner=True,
        headers={"User-Agent": connector.user_agent, "Accept-Encoding": ACCEPT_ENCODING},
        auto_decompress=False,
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,  # no proxy from the environment: it would bypass the address check
    )


def new_session(
    user_agent: str,
    *,
    address_policy: AddressPolicy,
    resolver: AbstractResolver | None = None,
    lease_keep_alive: bool = True,
    ca_bundle: Path | None = None,
) -> aiohttp.ClientSession:
    """The shared session: every connection checked by ``address_policy``, TLS trusting the
    system's roots plus ``ca_bundle`` (a ``ValueError`` names it when it cannot be loaded).
    ``resolver`` replaces the system resolver under the policy (tests). Its own connections,
    shared by any task, are not kept alive; ``lease_keep_alive`` lets ``host_session`` keep
    one per host lease (``CRAWLER_KEEP_ALIVE``). Timeouts are per request, not the session's.
    """
    connector = EdgeConnector(
        address_policy=address_policy,
        resolver=PolicyResolver(address_policy, resolver),
        ssl_context=tls_context(ca_bundle),
        user_agent=user_agent,
        keep_alive=False,
        lease_keep_alive=lease_keep_alive,
    )
    return _client_session(connector)


def open_host_session(shared: aiohttp.ClientSession) -> aiohttp.ClientSession:
    """The session a host lease fetches through: its own kept-alive connection. The shared
    session itself when it was not made by ``new_session`` or when keep-alive is off."""
    connector = shared.connector
    if not isinstance(connector, EdgeConnector) or not connector.lease_keep_alive:
        return shared
    return _client_session(connector.for_lease())


async def close_host_session(session: aiohttp.ClientSession, shared: aiohttp.ClientSession) -> None:
    """End a lease's session (and its connection); the shared session stays open."""
    if session is not shared:
        await session.close()


@contextlib.asynccontextmanager
async def host_session(shared: aiohttp.ClientSession) -> AsyncIterator[aiohttp.ClientSession]:
    """``open_host_session`` .. ``close_host_session`` around one host lease."""
    session = open_host_session(shared)
    try:
        yield session
    finally:
        await close_host_session(session, shared)


def drop_idle(session: aiohttp.ClientSession) -> None:
    """Never reuse this session's idle connections (after an anomaly on one of them)."""
    if isinstance(session.connector, EdgeConnector):
        session.connector.drop_idle()


def reused_connection(session: aiohttp.ClientSession) -> bool:
    """Whether the session's latest request went out on a kept-alive connection."""
    connector = session.connector
    return isinstance(connector, EdgeConnector) and connector.last_reused
