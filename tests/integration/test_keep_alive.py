"""Keep-alive within a host lease: one connection serves the host's URLs in turn, and a
connection that misbehaved never serves another request.

The server counts connections and records which connection served each request, so each
test checks connection reuse on the server's side, not the client's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from hostile import KeepAliveServer

from crawler.core import model
from crawler.core.model import FetchResult, UrlRecord
from crawler.net.fetch import fetch, fetch_robots, new_session
from crawler.net.session import host_session
from crawler.net.ssrf import AddressPolicy
from crawler.settings import default_settings

pytestmark = pytest.mark.timeout(60)

LIMITS = default_settings(connect_timeout=0.5, first_byte_timeout=0.5, total_timeout=2.0,
                          max_body_bytes=64 * 1024)


def page(path: str) -> bytes:
    return b"<html><body><p>" + path.encode() + b"</p></body></html>"


@pytest.fixture
async def server() -> AsyncIterator[KeepAliveServer]:
    keep_alive = KeepAliveServer()
    await keep_alive.start()
    yield keep_alive
    await keep_alive.stop()


@pytest.fixture
async def shared() -> AsyncIterator[aiohttp.ClientSession]:
    client = new_session("testbot/1.0", address_policy=AddressPolicy(["127.0.0.0/8"]))
    yield client
    await client.close()


async def get(session: aiohttp.ClientSession, url: str) -> FetchResult:
    return await fetch(session, UrlRecord(url_id=1, url=url), LIMITS)


async def test_one_connection_per_host_lease(
    server: KeepAliveServer, shared: aiohttp.ClientSession
) -> None:
    paths = [f"/page/{n}" for n in range(6)]
    for lease in range(2):
        async with host_session(shared) as session:
            robots = await fetch_robots(session, server.origin, LIMITS)
            assert robots.outcome == "ok"
            for path in paths:
                result = await get(session, server.url(path))
                assert (result.outcome, result.body) == (model.OK, page(path))
        lease_connections = {conn for conn, _path in server.served[-len(paths) - 1 :]}
        assert len(lease_connections) == 1, server.served
        assert server.connections == lease + 1  # the next lease opens its own connection


async def test_without_a_lease_every_request_has_its_own_connection(
    server: KeepAliveServer, shared: aiohttp.ClientSession
) -> None:
    for n in range(3):
        result = await get(shared, server.url(f"/page/{n}"))
        assert result.outcome == model.OK
    assert server.connections == 3


@pytest.mark.parametrize(
    ("path", "outcome", "kind"),
    [
        ("/oversend", model.OK, None),
        ("/oversend-late", model.OK, None),
        ("/break", model.NETWORK_ERROR, "broken_body"),
        ("/huge", model.OK, "too_large"),
        # The cap is hit within the first 4 KiB of wire bytes: a ratio of 16, not a "bomb".
        ("/bomb", model.OK, "too_large"),
        ("/silent", model.TIMEOUT, "timeout_first_byte"),
    ],
)
async def test_anomaly_closes_the_connection_and_never_corrupts_the_next_response(
    server: KeepAliveServer,
    shared: aiohttp.ClientSession,
    path: str,
    outcome: str,
    kind: str | None,
) -> None:
    async with host_session(shared) as session:
        before = await get(session, server.url("/before"))
        assert (before.outcome, before.body) == (model.OK, page("/before"))
        anomalous = await get(session, server.url(path))
        assert (anomalous.outcome, anomalous.error_kind) == (outcome, kind)
        assert b"FORGED" not in anomalous.body
        assert anomalous.truncated == (kind == "too_large")
        if path == "/oversend-late":
            await server.forged_sent.wait()  # the forged response sits on the idle connection
        after = await get(session, server.url("/after"))
    assert (after.outcome, after.error_kind, after.body) == (model.OK, None, page("/after"))
    assert server.connection_of("/before") == server.connection_of(path)
    assert server.connection_of("/after") != server.connection_of(path)


async def test_connection_dropped_by_the_server_is_retried_on_a_fresh_one(
    server: KeepAliveServer, shared: aiohttp.ClientSession
) -> None:
    async with host_session(shared) as session:
        first = await get(session, server.url("/drop-next"))
        assert first.outcome == model.OK
        second = await get(session, server.url("/second"))
    assert (second.outcome, second.body) == (model.OK, page("/second"))
    # The request went out on the kept-alive connection, was dropped, and went out again.
    assert [path for _conn, path in server.served] == ["/drop-next", "/second", "/second"]
    assert server.connections == 2


async def test_keep_alive_off_shares_nothing(server: KeepAliveServer) -> None:
    client = new_session(
        "testbot/1.0", address_policy=AddressPolicy(["127.0.0.0/8"]),
        lease_keep_alive=False,
    )
    try:
        async with host_session(client) as session:
            assert session is client
            for n in range(2):
                assert (await get(session, server.url(f"/page/{n}"))).outcome == model.OK
    finally:
        await client.close()
    assert server.connections == 2
