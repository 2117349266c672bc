"""SSRF: every refused address form is refused before a connection is even attempted.

Two witnesses per case: the loopback server counts accepted connections (zero), and a guard
on the event loop's ``sock_connect`` records every connect attempt (none) and refuses any
address outside 127.0.0.0/8, so that a bug here can never reach another network.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from urllib.parse import quote

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult
from hostile import PAGE, HostileServer

from crawler.core import model
from crawler.core.model import FetchResult, UrlRecord
from crawler.core.robots import UNREACHABLE
from crawler.net.fetch import fetch, fetch_robots, new_session
from crawler.net.ssrf import AddressPolicy
from crawler.settings import default_settings

pytestmark = pytest.mark.timeout(60)

LIMITS = default_settings(connect_timeout=1.0, first_byte_timeout=1.0, total_timeout=3.0
)


class FakeResolver(AbstractResolver):
    """A DNS that maps made-up public-looking names to chosen addresses."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        addresses = self.answers.get(host)
        if addresses is None:
            raise OSError(f"no such host {host}")
        return [
            {"hostname": host, "host": address, "port": port,
             "family": socket.AF_INET6 if ":" in address else socket.AF_INET,
             "proto": 0, "flags": socket.AI_NUMERICHOST}
            for address in addresses
        ]

    async def close(self) -> None:
        return None


class ConnectGuard:
    def __init__(self) -> None:
        self.attempts: list[str] = []


@pytest.fixture
async def guard(monkeypatch: pytest.MonkeyPatch) -> ConnectGuard:
    loop = asyncio.get_running_loop()
    original = loop.sock_connect
    witness = ConnectGuard()

    async def sock_connect(sock: socket.socket, address: tuple[str, int]) -> None:
        witness.attempts.append(str(address[0]))
        if not str(address[0]).startswith("127."):
            raise ConnectionRefusedError("test guard: only 127.0.0.0/8 may be contacted")
        await original(sock, address)

    monkeypatch.setattr(loop, "sock_connect", sock_connect)
    return witness


@pytest.fixture
async def server() -> AsyncIterator[HostileServer]:
    hostile = HostileServer()
    await hostile.start()
    yield hostile
    await hostile.stop()


async def get(url: str, policy: AddressPolicy, resolver: AbstractResolver | None = None
              ) -> FetchResult:
    session = new_session("testbot/1.0", address_policy=policy, resolver=resolver)
    try:
        return await fetch(session, UrlRecord(url_id=1, url=url), LIMITS)
    finally:
        await session.close()


LOOPBACK_FORMS = [
    "127.0.0.1", "localhost", "2130706433", "0177.0.0.1", "0x7f.1", "127.1", "0x7f000001",
    "0177.0.0.01", "127.0.0.1.", "LOCALHOST", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]",
]
OTHER_FORMS = [
    "[::1]", "10.0.0.1", "172.16.0.1", "192.168.1.1", "169.254.169.254", "0xa9fea9fe",
    "100.64.0.1", "224.0.0.1", "0.0.0.0", "240.0.0.1", "255.255.255.255", "[fc00::1]",
    "[fd12:3456::1]", "[fe80::1]", "[ff02::1]", "[::]", "[::ffff:169.254.169.254]",
    "[64:ff9b::a9fe:a9fe]", "[2002:a9fe:a9fe::1]", "[::ffff:10.0.0.1]",
]


@pytest.mark.parametrize("host", LOOPBACK_FORMS)
async def test_loopback_forms_refused_before_connecting(
    server: HostileServer, guard: ConnectGuard, host: str
) -> None:
    result = await get(f"http://{host}:{server.port}/ok", AddressPolicy())
    assert (result.outcome, result.error_kind) == (model.BLOCKED, "ssrf")
    assert server.accepted == 0
    assert guard.attempts == []


@pytest.mark.parametrize("host", OTHER_FORMS)
async def test_private_and_reserved_forms_refused_before_connecting(
    guard: ConnectGuard, host: str
) -> None:
    result = await get(f"http://{host}/latest/meta-data/", AddressPolicy(["127.0.0.0/8"]))
    assert (result.outcome, result.error_kind) == (model.BLOCKED, "ssrf")
    assert guard.attempts == []


async def test_public_name_resolving_to_loopback_is_refused(
    server: HostileServer, guard: ConnectGuard
) -> None:
    resolver = FakeResolver({"www.example.com": ["127.0.0.1"],
                             "mixed.example.com": ["10.1.2.3", "169.254.169.254", "::1"]})
    for name in ("www.example.com", "mixed.example.com"):
        result = await get(f"http://{name}:{server.port}/ok", AddressPolicy(), resolver)
        assert (result.outcome, result.error_kind) == (model.BLOCKED, "ssrf")
    assert server.accepted == 0 and guard.attempts == []


async def test_redirect_to_metadata_address_is_refused(
    server: HostileServer, guard: ConnectGuard
) -> None:
    # A public-looking name (allowed, resolving to the test server) redirects to the cloud
    # metadata address; only the first hop may connect.
    resolver = FakeResolver({"news.example.org": ["127.0.0.1"]})
    for target in ("http://169.254.169.254/latest/meta-data/", "http://2852039166/",
                   "http://[::ffff:169.254.169.254]/"):
        url = f"http://news.example.org:{server.port}/redirect?to={quote(target)}"
        result = await get(url, AddressPolicy(["127.0.0.0/8"]), resolver)
        assert (result.outcome, result.error_kind) == (model.BLOCKED, "ssrf")
    assert server.accepted == 3
    assert all(address == "127.0.0.1" for address in guard.attempts)


async def test_redirect_to_loopback_refused_without_allow_list(
    server: HostileServer, guard: ConnectGuard
) -> None:
    # The first hop resolves to an allowed address only through the allow list of 127.0.0.2;
    # its redirect to 127.0.0.1 is refused.
    other = HostileServer("127.0.0.2")
    await other.start()
    try:
        target = quote(server.url("/ok"))
        result = await get(
            f"{other.origin}/redirect?to={target}", AddressPolicy(["127.0.0.2/32"])
        )
    finally:
        await other.stop()
    assert (result.outcome, result.error_kind) == (model.BLOCKED, "ssrf")
    assert other.accepted == 1 and server.accepted == 0


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "2130706433", "0x7f.1"])
async def test_allow_list_opens_loopback(
    server: HostileServer, guard: ConnectGuard, host: str
) -> None:
    result = await get(f"http://{host}:{server.port}/ok", AddressPolicy(["127.0.0.0/8"]))
    assert (result.outcome, result.body) == (model.OK, PAGE)
    assert server.accepted == 1


async def test_robots_of_a_refused_origin_is_unreachable(
    server: HostileServer, guard: ConnectGuard
) -> None:
    session = new_session("testbot/1.0", address_policy=AddressPolicy())
    try:
        fetched = await fetch_robots(session, server.origin, LIMITS)
    finally:
        await session.close()
    assert (fetched.outcome, fetched.error_kind) == (UNREACHABLE, "ssrf")
    assert server.accepted == 0


async def test_session_ignores_proxy_environment(
    server: HostileServer, guard: ConnectGuard, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{server.port}")
    result = await get("http://10.0.0.1/", AddressPolicy(["127.0.0.0/8"]))
    assert (result.outcome, result.error_kind) == (model.BLOCKED, "ssrf")
    assert server.accepted == 0


@pytest.mark.parametrize(
    "url",
    ["http://exa mple.com/", "http://a..b/", "http://[::1]:99999/", "http://\u2603.example/",
     "http://xn--/", "http://example.com:80:80/", "http://%00/", "http:/x", "//example.com/",
     "http://[zz::1]/", "http://999.999.999.999/", "http://0x100000000/"],
)
async def test_malformed_urls_never_raise(guard: ConnectGuard, url: str) -> None:
    result = await get(url, AddressPolicy(["127.0.0.0/8"]), FakeResolver({}))
    assert result.outcome in (model.BLOCKED, model.NETWORK_ERROR)
    assert guard.attempts == []
