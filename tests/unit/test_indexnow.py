"""IndexNow pings read and checked as indexnow.org/documentation specifies, and the receiver's
per-host state (token bucket, key cache), pure (crawler.core.indexnow)."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler.core.indexnow import (
    MAX_URLS,
    OUTCOME_STATUS,
    Bucket,
    KeyState,
    Ping,
    Refusal,
    belongs,
    due_after_ping,
    idle,
    key_check_started,
    key_checked,
    key_file_matches,
    key_verdict,
    read_get,
    read_post,
    retry_after,
    take,
)

KEY = "73134416ae45434d98edc086e0bf6740"  # the documentation's example key


def post(**fields: object) -> Ping | Refusal:
    return read_post(json.dumps(fields).encode())


def refused(read: Ping | Refusal) -> tuple[str, int]:
    assert isinstance(read, Refusal), read
    return read.outcome, read.status


def test_the_protocols_answers() -> None:
    assert OUTCOME_STATUS["accepted"] == 200
    assert OUTCOME_STATUS["pending"] == 202
    assert OUTCOME_STATUS["invalid"] == 400
    assert OUTCOME_STATUS["wrong_key"] == OUTCOME_STATUS["unknown_host"] == 403
    assert OUTCOME_STATUS["outside_host"] == OUTCOME_STATUS["bad_key"] == 422
    assert OUTCOME_STATUS["rate_limited"] == 429


def test_one_url_by_get() -> None:
    ping = read_get({"url": "https://www.example.com/product.html", "key": KEY})
    assert ping == Ping("www.example.com", KEY, None, ("https://www.example.com/product.html",))
    # The key file: {key}.txt at the root of the URL's host.
    assert ping.key_url == f"https://www.example.com/{KEY}.txt"
    assert ping.key_origin == "https://www.example.com"


def test_a_url_is_normalised_and_its_port_is_its_hosts() -> None:
    ping = read_get({"url": "HTTP://127.0.0.1:8080/a/../b?z=1&a=2#frag", "key": KEY})
    assert isinstance(ping, Ping)
    assert ping.urls == ("http://127.0.0.1:8080/b?a=2&z=1",)
    assert ping.host == "127.0.0.1:8080"
    assert ping.key_url == f"http://127.0.0.1:8080/{KEY}.txt"


@pytest.mark.parametrize("params", [
    {"key": KEY}, {"url": "https://example.com/"}, {"url": "", "key": KEY},
    {"url": "ftp://example.com/a", "key": KEY}, {"url": "not a url", "key": KEY},
    {"url": "https://example.com/" + "a" * 3000, "key": KEY},
    {"url": "https://example.com/", "key": KEY, "keyLocation": "mailto:x@example.com"},
])
def test_a_malformed_get_is_a_bad_request(params: dict[str, str]) -> None:
    assert refused(read_get(params)) == ("invalid", 400)


@pytest.mark.parametrize("key", ["a" * 7, "a" * 129, "abc_defgh", "abcdefgh ", "clé-clé-clé", ""])
def test_a_key_off_the_protocols_schema_is_422(key: str) -> None:
    assert refused(read_get({"url": "https://example.com/", "key": key})) == ("bad_key", 422)


@pytest.mark.parametrize("key", ["a" * 8, "Z" * 128, "abc-DEF-0123"])
def test_keys_of_8_to_128_letters_digits_and_dashes(key: str) -> None:
    assert isinstance(read_get({"url": "https://example.com/", "key": key}), Ping)


def test_a_set_of_urls_by_post() -> None:
    ping = post(host="www.example.com", key=KEY, urlList=[
        "https://www.example.com/url1", "https://www.example.com/folder/url2",
        "http://www.example.com/url3", "https://www.example.com/url1",
    ])
    assert isinstance(ping, Ping)
    # http and https may be mixed; each URL is taken once.
    assert ping.urls == ("https://www.example.com/url1", "https://www.example.com/folder/url2",
                         "http://www.example.com/url3")
    assert ping.key_url == f"https://www.example.com/{KEY}.txt"


@pytest.mark.parametrize("body", [
    b"", b"{", b"[]", b'"text"', b"\xff\xfe",
    json.dumps({"key": KEY, "urlList": ["https://e.com/"]}).encode(),
    json.dumps({"host": "e.com", "urlList": ["https://e.com/"]}).encode(),
    json.dumps({"host": "e.com", "key": KEY}).encode(),
    json.dumps({"host": "e.com", "key": KEY, "urlList": "https://e.com/"}).encode(),
    json.dumps({"host": "e.com", "key": KEY, "urlList": []}).encode(),
    json.dumps({"host": "e.com", "key": KEY, "urlList": [1]}).encode(),
    json.dumps({"host": "e.com", "key": 12345678, "urlList": ["https://e.com/"]}).encode(),
    json.dumps({"host": "e.com/path", "key": KEY, "urlList": ["https://e.com/"]}).encode(),
    json.dumps({"host": "u@e.com", "key": KEY, "urlList": ["https://e.com/"]}).encode(),
    json.dumps({"host": "e.com", "key": KEY, "keyLocation": 5,
                "urlList": ["https://e.com/"]}).encode(),
])
def test_a_malformed_post_is_a_bad_request(body: bytes) -> None:
    assert refused(read_post(body)) == ("invalid", 400)


def test_at_most_ten_thousand_urls_per_post() -> None:
    urls = [f"https://e.com/{i}" for i in range(MAX_URLS + 1)]
    assert refused(post(host="e.com", key=KEY, urlList=urls)) == ("invalid", 400)
    ping = post(host="e.com", key=KEY, urlList=urls[:MAX_URLS])
    assert isinstance(ping, Ping) and len(ping.urls) == MAX_URLS


def test_a_post_with_a_byte_order_mark_is_read() -> None:
    body = b"\xef\xbb\xbf" + json.dumps(
        {"host": "e.com", "key": KEY, "urlList": ["https://e.com/"]}).encode()
    assert isinstance(read_post(body), Ping)


def test_urls_that_do_not_belong_to_the_host_are_422() -> None:
    outcome = post(host="www.example.com", key=KEY,
                   urlList=["https://www.example.com/a", "https://example.com/b"])
    assert refused(outcome) == ("outside_host", 422)
    assert refused(post(host="example.com", key=KEY, urlList=["https://sub.example.com/"])) \
        == ("outside_host", 422)


@pytest.mark.parametrize(("url", "host", "expected"), [
    ("https://example.com/", "example.com", True),
    ("http://example.com/", "EXAMPLE.com", True),
    ("https://example.com/", "example.com:443", True),
    ("http://example.com:443/", "example.com:443", True),
    ("http://example.com/", "example.com:443", False),
    ("http://example.com:8080/", "example.com", False),
    ("http://example.com:8080/", "example.com:8080", True),
    ("http://127.0.0.1:5555/x", "127.0.0.1:5555", True),
    ("http://127.0.0.1:5555/x", "127.0.0.1:5556", False),
    ("http://127.0.0.2:5555/x", "127.0.0.1:5555", False),
    ("https://example.com/", "example.com/", False),
    ("https://example.com/", "", False),
])
def test_belongs(url: str, host: str, expected: bool) -> None:
    assert belongs(url, host) is expected


def test_a_key_location_covers_its_folder_on_its_host() -> None:
    location = "https://www.example.com/catalog/myIndexNowKey63638.txt"
    ping = post(host="www.example.com", key=KEY, keyLocation=location,
                urlList=["https://www.example.com/catalog/a", "http://www.example.com/catalog/b/c"])
    assert isinstance(ping, Ping)
    assert ping.key_url == location
    assert ping.key_origin == "https://www.example.com"
    # The documentation's example: a key in /catalog/ is not valid for /help/.
    outside = post(host="www.example.com", key=KEY, keyLocation=location,
                   urlList=["https://www.example.com/help/a"])
    assert refused(outside) == ("outside_host", 422)
    elsewhere = read_get({"url": "https://www.example.com/a", "key": KEY,
                          "keyLocation": f"https://other.example.com/{KEY}.txt"})
    assert refused(elsewhere) == ("outside_host", 422)


def test_the_key_file_holds_the_key_and_nothing_else() -> None:
    assert key_file_matches(KEY.encode(), KEY)
    assert key_file_matches(f"{KEY}\n".encode(), KEY)
    assert key_file_matches(f"\ufeff{KEY}\r\n".encode(), KEY)
    assert not key_file_matches(f"{KEY}x".encode(), KEY)
    assert not key_file_matches(f"<html><body>{KEY}</body></html>".encode(), KEY)
    assert not key_file_matches(b"", KEY)
    assert not key_file_matches(b"\xff" + KEY.encode(), KEY)
    assert not key_file_matches(KEY.upper().encode(), KEY)


# --- the token bucket -----------------------------------------------------------------------

RATE = 0.5  # per second
BURST = 3.0


def test_a_burst_then_the_rate() -> None:
    bucket: Bucket | None = None
    answers = []
    for _ in range(5):
        allowed, bucket = take(bucket, 100.0, per_second=RATE, burst=BURST)
        answers.append(allowed)
    assert answers == [True, True, True, False, False]
    assert bucket is not None
    assert retry_after(bucket, 100.0, per_second=RATE, burst=BURST) == pytest.approx(2.0)
    assert not take(bucket, 101.9, per_second=RATE, burst=BURST)[0]
    allowed, bucket = take(bucket, 102.0, per_second=RATE, burst=BURST)
    assert allowed
    assert not idle(bucket, 102.0, per_second=RATE, burst=BURST)
    assert idle(bucket, 102.0 + BURST / RATE, per_second=RATE, burst=BURST)
    # A clock that steps back refills nothing.
    assert not take(bucket, 50.0, per_second=RATE, burst=BURST)[0]


def test_a_refused_ping_takes_nothing() -> None:
    allowed, bucket = take(Bucket(0.5, 10.0), 10.0, per_second=RATE, burst=BURST)
    assert not allowed and bucket.tokens == 0.5
    assert take(bucket, 11.0, per_second=RATE, burst=BURST)[0]


@given(st.lists(st.floats(0.0, 600.0, allow_nan=False), min_size=1, max_size=200))
def test_a_flood_gets_at_most_the_burst_and_the_rate(times: list[float]) -> None:
    times.sort()
    bucket: Bucket | None = None
    accepted = 0
    for at in times:
        allowed, bucket = take(bucket, at, per_second=RATE, burst=BURST)
        accepted += allowed
    assert accepted <= BURST + RATE * (times[-1] - times[0]) + 1e-9


# --- the key cache --------------------------------------------------------------------------

INTERVAL = 300.0
VALID_FOR = 3600.0
URL = f"https://e.com/{KEY}.txt"


def verdict(state: KeyState | None, now: float, key: str = KEY, url: str = URL) -> str:
    return key_verdict(state, key, url, now, check_interval=INTERVAL)


def checked(state: KeyState | None, valid: bool, now: float, key: str = KEY,
            url: str = URL) -> KeyState:
    return key_checked(key_check_started(state, now), key, url, valid, now,
                       valid_for=VALID_FOR)


def test_a_verified_key_is_trusted_then_checked_again() -> None:
    assert verdict(None, 0.0) == "check"
    state = checked(None, True, 0.0)
    assert verdict(state, 1.0) == "valid"
    assert verdict(state, VALID_FOR - 1) == "valid"
    assert verdict(state, VALID_FOR) == "check"
    # The same key at another location is another key file.
    assert verdict(state, 1.0, url="https://e.com/k/other.txt") == "refuse"


def test_a_wrong_key_is_refused_without_a_fetch_for_the_interval() -> None:
    state = checked(None, False, 0.0, key="wrongkey1")
    for key in ("wrongkey1", "wrongkey2", KEY):
        assert verdict(state, INTERVAL - 1, key=key) == "refuse"
        assert verdict(state, INTERVAL, key=key) == "check"


def test_a_wrong_key_does_not_evict_the_sites_own() -> None:
    state = checked(None, True, 0.0)
    state = checked(state, False, 10.0, key="wrongkey1")
    assert verdict(state, 20.0) == "valid"
    # Once its trust lapses, the site's key is checked again whatever was tried meanwhile.
    state = checked(state, False, VALID_FOR - 5, key="wrongkey2")
    assert verdict(state, VALID_FOR) == "check"


def test_a_key_the_file_stops_confirming_is_forgotten() -> None:
    state = checked(None, True, 0.0)
    state = checked(state, False, VALID_FOR)
    assert state.verified is None
    assert verdict(state, VALID_FOR + 1) == "refuse"
    assert verdict(state, VALID_FOR + INTERVAL) == "check"


@given(st.lists(st.tuples(st.floats(0.0, 3 * 3600.0, allow_nan=False),
                          st.sampled_from(["wrongkey1", "wrongkey2", "wrongkey3", KEY])),
                min_size=1, max_size=300))
def test_a_flood_of_wrong_keys_costs_one_fetch_per_interval(pings: list[tuple[float, str]]) -> None:
    """Only KEY is in the file. Fetches for keys other than the verified one are at least an
    interval apart; renewals of the verified key happen once per trust period."""
    pings.sort()
    state: KeyState | None = None
    wrong_fetches: list[float] = []
    for at, key in pings:
        if verdict(state, at, key=key) == "check":
            if key != KEY:
                wrong_fetches.append(at)
            state = checked(state, key == KEY, at, key=key)
    gaps = [b - a for a, b in itertools.pairwise(wrong_fetches)]
    assert all(gap >= INTERVAL for gap in gaps), wrong_fetches
    span = pings[-1][0] - pings[0][0]
    assert len(wrong_fetches) <= math.floor(span / INTERVAL) + 1


def test_a_ping_makes_a_url_due_now() -> None:
    assert due_after_ping(1234.5) == 1234.5
