"""Each fault a hostile server can commit, and the outcome fetch() records for it.

Limits are short (total 2 s) so that a hang shows as a failure and the file stays fast; every
call must return within its bound (total timeout + 1 s).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest
from hostile import PAGE, HostileServer, bomb, http_date

from crawler.core import model
from crawler.core.extract import decode_body
from crawler.core.model import FetchResult, UrlRecord
from crawler.core.observe import is_html, parse_result
from crawler.core.robots import (
    ALLOW_ALL,
    DISALLOW_ALL,
    OK,
    RULES,
    UNAVAILABLE,
    UNREACHABLE,
    RobotsFetch,
    RobotsPolicy,
    RobotsState,
    decide_robots,
)
from crawler.net.fetch import fetch, fetch_robots, new_session
from crawler.net.ssrf import AddressPolicy
from crawler.settings import Settings, default_settings

pytestmark = pytest.mark.timeout(60)

LIMITS = default_settings(connect_timeout=0.5, first_byte_timeout=1.0, total_timeout=2.0,
                          max_body_bytes=1024 * 1024)
BOUND_SECONDS = LIMITS.total_timeout + 1.0


@pytest.fixture
async def server() -> AsyncIterator[HostileServer]:
    hostile = HostileServer()
    await hostile.start()
    yield hostile
    await hostile.stop()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    client = new_session(
        "testbot/1.0", address_policy=AddressPolicy(["127.0.0.0/8"])
    )
    yield client
    await client.close()


async def get(
    session: aiohttp.ClientSession, url: str, limits: Settings = LIMITS
) -> FetchResult:
    started = time.monotonic()
    result = await fetch(session, UrlRecord(url_id=1, url=url), limits)
    assert time.monotonic() - started < limits.total_timeout + 1.0, result
    return result


# --- sizes and encodings -----------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "zstd"])
async def test_decompression_bomb_costs_at_most_the_cap(
    server: HostileServer, session: aiohttp.ClientSession, encoding: str
) -> None:
    bomb(encoding)  # compressed beforehand: the server shares the loop the client's bound runs on
    result = await get(session, server.url(f"/bomb/{encoding}"))
    assert result.outcome == model.OK
    assert result.truncated
    assert result.error_kind == "decompression_bomb"
    assert len(result.body) == LIMITS.max_body_bytes
    assert set(result.body) == {0}


async def test_nested_encodings_are_undone_in_order(
    server: HostileServer, session: aiohttp.ClientSession
) -> None:
    result = await get(session, server.url("/nested"))
    assert (result.outcome, result.error_kind, result.body) == (model.OK, None, PAGE)


async def test_bomb_inside_nested_encodings_is_capped(
    server: HostileServer, session: aiohttp.ClientSession
) -> None:
    bomb("gzip")  # compressed beforehand, as above
    result = await get(session, server.url("/nested-bomb"))
    assert result.truncated and result.error_kind == "decompression_bomb"
    assert len(result.body) == LIMITS.max_body_bytes


async def test_corrupt_and_unknown_encodings(
    server: HostileServer, session: aiohttp.ClientSession
) -> None:
    corrupt = await get(session, server.url("/bad-gzip"))
    assert (corrupt.outcome, corrupt.error_kind) == (model.HTTP_ERROR, "bad_encoding")
    unknown = await get(session, server.url("/compress"))
    assert (unknown.outcome, unknown.error_kind) == (model.HTTP_ERROR, "unsupported_encoding")


async def test_endless_body_is_cut_at_the_cap(
    server: HostileServer, session: aiohttp.ClientSession
) -> None:
    result = await get(session, server.url("/endless"))
    assert (result.outcome, result.error_kind, result.truncated) == (model.OK, "too_large", True)
    assert len(result.body) == LIMITS.max_body_bytes


async def test_content_length_larger_than_body(
    server: HostileServer, session: aiohttp.ClientSession
) -> None:
    result = await get(session, server.url("/cl-larger"))
    assert (result.outcome, result.error_kind) == (model.NETWORK_ERROR, "broken_body")


async def test_content_length_smaller_than_body_and_next_request_unharmed(
    server: HostileServer, session: aiohttp.ClientSession
) -> None:
    # Extra bytes in the same packet are parsed as the next response and refused...
    same_packet = await get(session, server.url("/cl-smaller"))
    assert (same_packet.outcome, same_packet.error_kind) == (
        model.NETWORK_ERROR, "bad_status_line"
    )
    # ...extra bytes that come later are never read: the body is what Content-Length says.
    result = await get(session, server.url("/cl-smaller-later"))
    assert (result.outcome, result.body) == (model.OK, PAGE[:10])
    after = await get(session, server.url("/ok"))
    assert (after.outcome, after.body) == (model.OK, PAGE)


@pytest.mark.parametrize("path", ["/chunked-broken", "/chunked-garbage"])
async def test_chunked_body_broken_mid_stream(
    server: HostileServer, session: aiohttp.ClientSession, path: str
) -> None:
    result = await get(session, server.url(path))
    assert (result.outcome, result.error_kind) == (model.NETWORK_ERROR, "broken_body")


# --- time -----------------------------------------------------------------------------------


async def test_server_that_accepts_and_never_answers(
    server: HostileServer, session: aiohttp.ClientSession
) -> None:
    started = time.monotonic()
    result = await get(session, server.url("/silent"))
    assert (result.outcome, result.error_kind) == (model.TIMEOUT, "timeout_first_byte")
    assert time.monotonic() - started < LIMITS.first_byte_timeout + 0.5
    # With a first-byte timeout longer than the total, the total cuts it.
    patient = LIMITS.model_copy(update={
        "first_byte_timeout": 10.0, "total_timeout": 1.0, "connect_timeout": 0.5})
    result = await get(session, server.url("/silent"), patient)
    assert (result.outcome, result.error_kind) == (model.TIMEOUT, "timeout_total")


@pytest.mark.parametrize("path", ["/trickle?interval=0.4", "/trickle-head?interval=0.2"])
async def test_trickling_server_is_cut_by_the_total_timeout(
    server: HostileServer, session: aiohttp.ClientSession, path: str
) -> None:
    started = time.monotonic()
    result = await get(session, server.url(path))
    elapsed = time.monotonic() - started
    assert (result.outcome, result.error_kind) == (model.TIMEOUT, "timeout_total")
    assert LIMITS.total_timeout - 0.1 < elapsed < BOUND_SECONDS


async def test_silence_within_the_body_is_a_read_timeout(
    server: HostileServer, session: aiohttp.ClientSession
) -> None:
    result = await get(session, server.url("/trickle?interval=5"))
    assert (result.outcome, result.error_kind) == (model.TIMEOUT, "timeout_read")


@pytest.fixture
def full_backlog() -> Iterator[int]:
    """A loopback port whose accept queue is full, so that a new connect hangs (SYN dropped)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    time.sleep(0.05)
    yield port
    for filler in fillers:
        filler.close()
    listener.close()


async def test_connect_timeout(session: aiohttp.ClientSession, full_backlog: int) -> None:
    started = time.monotonic()
    result = await get(session, f"http://127.0.0.1:{full_backlog}/")
    assert (result.outcome, result.error_kind) == (model.TIMEOUT, "timeout_connect")
    assert time.monotonic() - started < LIMITS.connect_timeout + 0.5


# --- protocol -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/no-status", "/garbage-status"])
async def test_no_status_line(
    server: HostileServer, session: aiohttp.ClientSession, path: str
) -> None:
    result = await get(session, server.url(path))
    assert (result.outcome, result.error_kind) == (model.NETWORK_ERROR, "bad_status_line")


async def test_connection_closed_without_a_byte(
    server: HostileServer, session: aiohttp.ClientSession
) -> None:
    result = await get(session, server.url("/close"))
    assert (result.outcome, result.error_kind) == (model.NETWORK_ERROR, "server_disconnected")


async def test_connection_refused(session: aiohttp.ClientSession) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, never listening: connect is refused
        result = await get(session, f"http://127.0.0.1:{port}/")
    assert (result.outcome, result.error_kind) == (model.NETWORK_ERROR, "connect_failed")


# --- redirects ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/loop", "/loop-a"])
async def test_redirect_loop(
    server: HostileServer, session: aiohttp.ClientSession, path: str
) -> None:
    result = await get(session, server.url(path))
    assert (result.outcome, result.error_kind) == (model.HTTP_ERROR, "redirect_loop")
    assert len(server.requests) <= 2


async def test_21_hop_chain_stops_after_5_redirects(
    server: HostileServer, session: aiohttp.ClientSession
) -> None:
    result = await get(session, server.url("/chain/21"))
    assert (result.outcome, result.error_kind) == (model.HTTP_ERROR, "too_many_redirects")
    assert len(server.requests) == LIMITS.max_redirects + 1
    ok = await get(session, server.url("/chain/5"))
    assert (ok.outcome, ok.body) == (model.OK, PAGE)


async def test_permanent_redirect_is_reported(
    server: HostileServer, session: aiohttp.ClientSession
) -> None:
    result = await get(session, server.url("/moved"))
    assert (result.outcome, result.redirect_to) == (model.OK, server.url("/ok"))


@pytest.mark.parametrize(
    "target", ["file:///etc/passwd", "data:text/html,<p>hi</p>", "javascript:alert(1)"]
)
async def test_redirect_to_other_schemes_is_refused(
    server: HostileServer, session: aiohttp.ClientSession, target: str
) -> None:
    from urllib.parse import quote

    result = await get(session, server.url("/redirect?to=" + quote(target)))
    assert (result.outcome, result.error_kind) == (model.BLOCKED, "bad_redirect_scheme")
    assert result.status == 302


# --- status codes ---------------------------------------------------------------------------


async def test_429_retry_after_seconds_and_date(
    server: HostileServer, session: aiohttp.ClientSession
) -> None:
    seconds = await get(session, server.url("/status/429?retry_after=120"))
    assert (seconds.outcome, seconds.status, seconds.error_kind) == (
        model.HTTP_ERROR, 429, "http_429"
    )
    assert seconds.retry_after_seconds == 120.0
    from urllib.parse import quote

    date = http_date(time.time() + 3600)
    dated = await get(session, server.url("/status/429?retry_after=" + quote(date)))
    assert dated.retry_after_seconds is not None
    assert 3590 < dated.retry_after_seconds <= 3600


async def test_host_answering_500_to_everything(
    server: HostileServer, session: aiohttp.ClientSession
) -> None:
    for _ in range(3):
        result = await get(session, server.url("/status/500"))
        assert (result.outcome, result.status, result.error_kind) == (
            model.HTTP_ERROR, 500, "http_500"
        )


async def test_etag_is_recorded(server: HostileServer, session: aiohttp.ClientSession) -> None:
    first = await get(session, server.url("/etag"))
    assert (first.outcome, first.etag) == (model.OK, '"v1"')


# --- content --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "readable"),
    [
        ("/invalid-utf8", True),
        ("/contradictory-charset", True),
        # A UTF-16 label on 8-bit bytes decodes to nonsense, but never raises.
        ("/contradictory-charset?lie=utf-16", False),
    ],
)
async def test_bad_charsets_decode_without_crashing(
    server: HostileServer, session: aiohttp.ClientSession, path: str, readable: bool
) -> None:
    result = await get(session, server.url(path))
    assert result.outcome == model.OK
    text = decode_body(result.body, result.content_type)
    assert ("<p>" in text) is readable
    assert is_html(result.content_type, result.body)
    assert parse_result(result) is not None


async def test_pdf_served_as_html_is_not_parsed(
    server: HostileServer, session: aiohttp.ClientSession
) -> None:
    result = await get(session, server.url("/pdf-as-html"))
    assert result.outcome == model.OK
    assert result.content_type == "application/pdf"
    # Not HTML: the worker fingerprints the raw bytes (exact hash) and parses nothing.
    assert not is_html(result.content_type, result.body)
    assert parse_result(result) is None


async def test_url_too_long(session: aiohttp.ClientSession, server: HostileServer) -> None:
    result = await get(session, server.url("/" + "a" * 2100))
    assert (result.outcome, result.error_kind) == (model.BLOCKED, "url_too_long")
    assert server.accepted == 0


# --- robots.txt -----------------------------------------------------------------------------


async def robots(
    server: HostileServer, session: aiohttp.ClientSession, mode: str
) -> tuple[RobotsFetch, RobotsState, RobotsPolicy]:
    server.robots_mode = mode
    started = time.monotonic()
    fetched = await fetch_robots(session, server.origin, LIMITS)
    assert time.monotonic() - started < BOUND_SECONDS
    state = decide_robots(None, fetched, now=1_000_000.0)
    return fetched, state, RobotsPolicy.from_state(state, "testbot")


@pytest.mark.parametrize(
    ("mode", "outcome"),
    [
        ("status-503", UNREACHABLE),
        ("status-500", UNREACHABLE),
        ("status-429", UNREACHABLE),
        ("timeout", UNREACHABLE),
        ("status-404", UNAVAILABLE),
        ("status-403", UNAVAILABLE),
        ("redirect-6", UNAVAILABLE),
        ("loop", UNAVAILABLE),
    ],
)
async def test_robots_failures(
    server: HostileServer, session: aiohttp.ClientSession, mode: str, outcome: str
) -> None:
    fetched, _state, policy = await robots(server, session, mode)
    assert fetched.outcome == outcome
    expected_mode = DISALLOW_ALL if outcome == UNREACHABLE else ALLOW_ALL
    assert policy.mode == expected_mode
    assert policy.allowed(server.url("/page")) is (outcome == UNAVAILABLE)
    assert policy.allowed(server.url("/robots.txt"))


async def test_robots_five_redirects_are_followed(
    server: HostileServer, session: aiohttp.ClientSession
) -> None:
    fetched, _state, policy = await robots(server, session, "redirect-5")
    assert (fetched.outcome, policy.mode) == (OK, RULES)
    assert not policy.allowed(server.url("/page"))


async def test_robots_only_first_500_kib_parsed(
    server: HostileServer, session: aiohttp.ClientSession
) -> None:
    fetched, _state, policy = await robots(server, session, "huge")
    assert fetched.outcome == OK and fetched.truncated
    assert len(fetched.body.encode()) <= 500 * 1024
    assert not policy.allowed(server.url("/early"))
    assert policy.allowed(server.url("/late"))  # the rule past 500 KiB is not read


async def test_robots_html_error_page_with_200_allows(
    server: HostileServer, session: aiohttp.ClientSession
) -> None:
    fetched, _state, policy = await robots(server, session, "html")
    assert fetched.outcome == OK
    assert policy.allowed(server.url("/anything"))


@pytest.mark.parametrize(
    ("value", "expected"), [("86400", (30.0, True)), ("-1", (None, False)),
                            ("abc", (None, False)), ("2.5", (2.5, False))]
)
async def test_robots_crawl_delay(
    server: HostileServer, session: aiohttp.ClientSession, value: str,
    expected: tuple[float | None, bool],
) -> None:
    _fetched, _state, policy = await robots(server, session, f"delay-{value}")
    assert policy.crawl_delay(max_delay=30.0) == expected
    assert not policy.allowed(server.url("/private/x"))


async def test_robots_503_for_days_then_last_good_copy(
    server: HostileServer, session: aiohttp.ClientSession
) -> None:
    server.robots_mode = "ok"
    day = 86400.0
    state = decide_robots(None, await fetch_robots(session, server.origin, LIMITS), 0.0)
    server.robots_mode = "status-503"
    now = state.expires_at
    while now < 40 * day:
        state = decide_robots(state, await fetch_robots(session, server.origin, LIMITS), now)
        policy = RobotsPolicy.from_state(state, "testbot")
        if now < 30 * day:
            assert policy.mode == DISALLOW_ALL
        now = state.expires_at
    assert policy.mode == RULES  # after 30 days: the last good copy
    assert not policy.allowed(server.url("/private/a")) and policy.allowed(server.url("/a"))
    # Retries back off: gaps double from 1 minute to the 24 h cap, so about a dozen retries
    # on the first day and one a day after it (not one a minute: 57,600 over 40 days).
    times = [when for when, _path in server.requests]
    assert 40 <= len(times) <= 60


async def test_server_still_serves_after_every_fault(
    server: HostileServer, session: aiohttp.ClientSession
) -> None:
    for path in ("/cl-larger", "/chunked-broken", "/no-status", "/close", "/bomb/gzip"):
        await get(session, server.url(path))
    result = await asyncio.wait_for(get(session, server.url("/ok")), BOUND_SECONDS)
    assert (result.outcome, result.body) == (model.OK, PAGE)
