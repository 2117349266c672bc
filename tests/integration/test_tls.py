"""HTTPS on loopback with the tests' own certificate authority (trusted via ``ca_bundle``).

A valid certificate is fetched; each certificate failure is refused before any request is
sent, with a TLS-specific error kind and no body; a silent server is cut by the connect
timeout; redirects cross between http and https, and every https hop passes the SSRF check.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from tls import PAGE, TestCA, never_handshakes, serve, server_context

from crawler.core import model
from crawler.core.model import FetchResult, UrlRecord
from crawler.core.robots import UNREACHABLE
from crawler.net.fetch import fetch, fetch_robots, new_session, tls_context
from crawler.net.session import host_session
from crawler.net.ssrf import AddressPolicy
from crawler.settings import default_settings

pytestmark = pytest.mark.timeout(60)

LIMITS = default_settings(connect_timeout=1.0, first_byte_timeout=1.0, total_timeout=3.0
)


@pytest.fixture(scope="module")
def ca() -> TestCA:
    return TestCA()


@pytest.fixture
async def session(ca: TestCA, tmp_path: Path) -> AsyncIterator[aiohttp.ClientSession]:
    client = new_session(
        "testbot/1.0",
        address_policy=AddressPolicy(["127.0.0.0/8"]),
        ca_bundle=ca.write(tmp_path / "ca.pem"),
    )
    yield client
    await client.close()


async def get(session: aiohttp.ClientSession, url: str) -> FetchResult:
    started = time.monotonic()
    result = await fetch(session, UrlRecord(url_id=1, url=url), LIMITS)
    assert time.monotonic() - started < LIMITS.total_timeout + 1.0, result
    return result


async def test_valid_certificate_is_fetched(
    ca: TestCA, session: aiohttp.ClientSession, tmp_path: Path
) -> None:
    async with serve(server_context(*ca.issue(["127.0.0.1"]), tmp_path)) as origin:
        result = await get(session, origin + "/page")
    assert (result.outcome, result.status, result.body) == (model.OK, 200, PAGE)


async def test_one_tls_connection_per_host_lease(
    ca: TestCA, session: aiohttp.ClientSession, tmp_path: Path
) -> None:
    peers: set[tuple[str, int]] = set()
    context = server_context(*ca.issue(["127.0.0.1"]), tmp_path)
    async with serve(context, peers=peers) as origin:
        async with host_session(session) as lease:
            assert (await fetch_robots(lease, origin, LIMITS)).outcome == "ok"
            for n in range(4):
                assert (await get(lease, f"{origin}/p{n}")).body == PAGE
        assert len(peers) == 1, peers  # one handshake for the whole lease
        await get(session, f"{origin}/outside-a-lease")
    assert len(peers) == 2


def _certificate(ca: TestCA, case: str) -> tuple[bytes, bytes]:
    now = dt.datetime.now(dt.UTC)
    if case == "expired":
        return ca.issue(["127.0.0.1"], not_before=now - 10 * dt.timedelta(days=1),
                        not_after=now - dt.timedelta(days=1))
    if case == "wrong_host":
        return ca.issue(["www.example.org", "127.0.0.2"])
    if case == "self_signed":
        return ca.issue(["127.0.0.1"], self_signed=True)
    assert case == "untrusted_chain"
    return TestCA("some other CA").issue(["127.0.0.1"])


@pytest.mark.parametrize(
    ("case", "kind"),
    [
        ("expired", "tls_expired"),
        ("wrong_host", "tls_hostname_mismatch"),
        ("self_signed", "tls_self_signed"),
        ("untrusted_chain", "tls_untrusted"),
    ],
)
async def test_bad_certificates_are_refused_without_a_body(
    ca: TestCA, session: aiohttp.ClientSession, tmp_path: Path, case: str, kind: str
) -> None:
    async with serve(server_context(*_certificate(ca, case), tmp_path)) as origin:
        result = await get(session, origin + "/page")
        robots = await fetch_robots(session, origin, LIMITS)
    assert (result.outcome, result.error_kind) == (model.NETWORK_ERROR, kind)
    assert result.status is None and not result.body
    # On robots.txt the same failure makes the host unreachable (RFC 9309: disallow all).
    assert robots.outcome == UNREACHABLE


async def test_certificate_from_our_ca_is_refused_without_the_bundle(
    ca: TestCA, tmp_path: Path
) -> None:
    client = new_session(
        "testbot/1.0", address_policy=AddressPolicy(["127.0.0.0/8"])
    )
    try:
        async with serve(server_context(*ca.issue(["127.0.0.1"]), tmp_path)) as origin:
            result = await get(client, origin + "/page")
    finally:
        await client.close()
    assert (result.outcome, result.error_kind) == (model.NETWORK_ERROR, "tls_untrusted")


async def test_server_that_never_finishes_the_handshake_times_out(
    session: aiohttp.ClientSession,
) -> None:
    async with never_handshakes() as origin:
        result = await get(session, origin + "/page")
    assert (result.outcome, result.error_kind) == (model.TIMEOUT, "timeout_connect")
    assert result.duration_seconds < LIMITS.connect_timeout + 1.0


async def test_plain_http_spoken_to_an_https_client_is_a_handshake_error(
    session: aiohttp.ClientSession,
) -> None:
    async with serve() as origin:
        result = await get(session, origin.replace("http://", "https://") + "/page")
    assert (result.outcome, result.error_kind) == (model.NETWORK_ERROR, "tls_handshake")


async def test_redirects_from_http_to_https_and_back(
    ca: TestCA, session: aiohttp.ClientSession, tmp_path: Path
) -> None:
    context = server_context(*ca.issue(["127.0.0.1"]), tmp_path)
    async with serve() as http_origin, serve(context) as https_origin:
        up = await get(session, f"{http_origin}/to?url={https_origin}/up")
        down = await get(session, f"{https_origin}/to?url={http_origin}/down")
        round_trip = await get(
            session, f"{http_origin}/to?url={https_origin}/to?url={http_origin}/back"
        )
    for result in (up, down, round_trip):
        assert (result.outcome, result.status, result.body) == (model.OK, 200, PAGE)


@pytest.mark.parametrize(
    "target", ["https://169.254.169.254/latest/meta-data/", "https://10.0.0.1/", "https://[::1]/"]
)
async def test_https_hops_pass_the_ssrf_check(
    ca: TestCA, session: aiohttp.ClientSession, tmp_path: Path, target: str
) -> None:
    direct = await get(session, target)
    assert (direct.outcome, direct.error_kind) == (model.BLOCKED, "ssrf")
    async with serve(server_context(*ca.issue(["127.0.0.1"]), tmp_path)) as origin:
        hop = await get(session, f"{origin}/to?url={target}")
    assert (hop.outcome, hop.error_kind) == (model.BLOCKED, "ssrf")
    assert not hop.body


def test_unreadable_ca_bundle_is_a_clear_error(tmp_path: Path) -> None:
    bogus = tmp_path / "bundle.pem"
    bogus.write_text("not a certificate\n")
    with pytest.raises(ValueError, match="CRAWLER_CA_BUNDLE"):
        tls_context(bogus)
    with pytest.raises(ValueError, match="CRAWLER_CA_BUNDLE"):
        tls_context(tmp_path / "missing.pem")
