"""robots.txt policy (RFC 9309): classification, caching, unreachability, matching."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler.core import model
from crawler.core.robots import (
    ALLOW_ALL,
    DISALLOW_ALL,
    OK,
    ROBOTS_MAX_BYTES,
    RULES,
    UNAVAILABLE,
    UNREACHABLE,
    RobotsFetch,
    RobotsPolicy,
    RobotsState,
    decide_robots,
    needs_fetch,
    product_token,
    robots_outcome,
    robots_text,
    rules_changed,
)

DAY = 86400.0
RULES_TEXT = "User-agent: *\nDisallow: /private\n\nUser-agent: ExampleBot\nDisallow: /\n"


def fetched(outcome: str, body: str = "", status: int | None = 200,
            retry_after: float | None = None) -> RobotsFetch:
    return RobotsFetch(fetched_at=0.0, outcome=outcome, status=status, body=body,
                       retry_after_seconds=retry_after)


def classify(outcome: str, status: int | None, error_kind: str | None = None) -> str:
    return robots_outcome(fetched_at=0.0, outcome=outcome, status=status, body=b"",
                          truncated=False, error_kind=error_kind,
                          retry_after_seconds=None).outcome


@pytest.mark.parametrize(
    ("outcome", "status", "error_kind", "expected"),
    [
        (model.OK, 200, None, OK),
        (model.GONE, 404, None, UNAVAILABLE),
        (model.GONE, 410, None, UNAVAILABLE),
        (model.HTTP_ERROR, 401, "http_401", UNAVAILABLE),
        (model.HTTP_ERROR, 403, "http_403", UNAVAILABLE),
        (model.HTTP_ERROR, 429, "http_429", UNREACHABLE),
        (model.HTTP_ERROR, 500, "http_500", UNREACHABLE),
        (model.HTTP_ERROR, 503, "http_503", UNREACHABLE),
        (model.TIMEOUT, None, "timeout_total", UNREACHABLE),
        (model.NETWORK_ERROR, None, "connect_failed", UNREACHABLE),
        (model.HTTP_ERROR, None, "too_many_redirects", UNAVAILABLE),
        (model.HTTP_ERROR, 302, "redirect_loop", UNAVAILABLE),
        (model.BLOCKED, None, "ssrf", UNREACHABLE),
    ],
)
def test_classification(outcome: str, status: int | None, error_kind: str | None,
                        expected: str) -> None:
    assert classify(outcome, status, error_kind) == expected


def test_ok_rules_apply_and_cache_at_most_a_day() -> None:
    state = decide_robots(None, fetched(OK, RULES_TEXT), 100.0, cache_seconds=7 * DAY)
    assert state.expires_at == 100.0 + DAY
    assert not needs_fetch(state, 100.0 + DAY - 1) and needs_fetch(state, 100.0 + DAY)
    policy = RobotsPolicy.from_state(state, "testbot")
    assert policy.mode == RULES
    assert not policy.allowed("http://h/private/x") and policy.allowed("http://h/public")
    assert policy.allowed("http://h/robots.txt")


def test_4xx_means_no_restrictions() -> None:
    state = decide_robots(None, fetched(UNAVAILABLE, status=404), 0.0)
    policy = RobotsPolicy.from_state(state, "testbot")
    assert policy.mode == ALLOW_ALL and policy.allowed("http://h/anything")


def test_never_fetched_means_disallow() -> None:
    assert needs_fetch(None, 0.0)
    policy = RobotsPolicy.from_state(None, "testbot")
    assert not policy.allowed("http://h/a") and policy.allowed("http://h/robots.txt")


def test_unreachable_disallows_and_backs_off_then_uses_last_good_copy() -> None:
    state = decide_robots(None, fetched(OK, RULES_TEXT), 0.0)
    now = state.expires_at
    gaps = []
    while now < 31 * DAY:
        state = decide_robots(state, fetched(UNREACHABLE, status=503), now)
        gaps.append(state.expires_at - now)
        mode = RobotsPolicy.from_state(state, "testbot").mode
        assert mode == (DISALLOW_ALL if now - DAY < 30 * DAY else RULES)
        now = state.expires_at
    assert state.unreachable_since == DAY
    assert gaps == sorted(gaps) and gaps[0] == 60.0 and gaps[-1] == DAY
    assert state.body == RULES_TEXT and state.good_at == 0.0
    recovered = decide_robots(state, fetched(OK, "User-agent: *\nDisallow:\n"), now)
    assert recovered.unreachable_since is None
    assert RobotsPolicy.from_state(recovered, "testbot").allowed("http://h/private/x")


def test_unreachable_without_a_good_copy_stays_disallowed() -> None:
    state = decide_robots(None, fetched(UNREACHABLE, status=None), 0.0)
    now = 0.0
    while now < 60 * DAY:
        now = state.expires_at
        state = decide_robots(state, fetched(UNREACHABLE, status=None), now)
    assert RobotsPolicy.from_state(state, "testbot").mode == DISALLOW_ALL


def test_retry_after_is_honoured_within_the_cap() -> None:
    state = decide_robots(None, fetched(UNREACHABLE, status=429, retry_after=3600.0), 0.0)
    assert state.expires_at == 3600.0
    state = decide_robots(None, fetched(UNREACHABLE, status=429, retry_after=9 * DAY), 0.0)
    assert state.expires_at == DAY


@pytest.mark.parametrize(
    ("token", "allowed"),
    [("ExampleBot", False), ("examplebot", False), ("Example", True), ("testbot", True)],
)
def test_product_token_matching_is_case_insensitive_and_whole(token: str, allowed: bool) -> None:
    policy = RobotsPolicy(RULES, token, RULES_TEXT)
    assert policy.allowed("http://h/public") is allowed


def test_product_token_of_user_agent() -> None:
    assert product_token("crawler/0.1 (+https://example.org/bot)") == "crawler"
    assert product_token("My_Bot-2") == "My_Bot-"
    with pytest.raises(ValueError):
        product_token("/1.0")


@pytest.mark.parametrize(
    ("value", "expected"),
    [("86400", (60.0, True)), ("-1", (None, False)), ("abc", (None, False)),
     ("0", (0.0, False)), ("10", (10.0, False)), ("nan", (None, False)), ("inf", (None, False))],
)
def test_crawl_delay(value: str, expected: tuple[float | None, bool]) -> None:
    policy = RobotsPolicy(RULES, "testbot", f"User-agent: *\nCrawl-delay: {value}\n")
    assert policy.crawl_delay(60.0) == expected


def test_html_error_page_parses_as_no_rules() -> None:
    page = "<!DOCTYPE html><html><body><h1>404</h1><p>Disallow: nothing</p></body></html>"
    state = decide_robots(None, fetched(OK, page), 0.0)
    assert RobotsPolicy.from_state(state, "testbot").allowed("http://h/x")


def test_robots_text_drops_a_cut_line() -> None:
    body = b"User-agent: *\nDisallow: /a\n" + b"#" * ROBOTS_MAX_BYTES + b"\nAllow: /"
    text = robots_text(body, truncated=True)
    assert text == "User-agent: *\nDisallow: /a\n"
    assert robots_text(b"\xef\xbb\xbfUser-agent: *\nDisallow: /\xff\n", False).startswith("User")


@given(st.binary(max_size=2000), st.booleans())
def test_robots_text_never_raises_and_is_capped(body: bytes, truncated: bool) -> None:
    text = robots_text(body, truncated)
    assert len(text.encode("utf-8")) <= 3 * ROBOTS_MAX_BYTES
    RobotsPolicy(RULES, "testbot", text).allowed("http://h/x")


def test_rules_changed() -> None:
    first = decide_robots(None, fetched(OK, RULES_TEXT), 0.0)
    same = decide_robots(first, fetched(OK, RULES_TEXT), DAY)
    other = decide_robots(same, fetched(OK, "User-agent: *\nDisallow: /x\n"), 2 * DAY)
    down = decide_robots(other, fetched(UNREACHABLE, status=500), 3 * DAY)
    assert rules_changed(None, first) and not rules_changed(first, same)
    assert rules_changed(same, other) and rules_changed(other, down)


def test_state_maps_to_columns() -> None:
    state = decide_robots(None, fetched(OK, RULES_TEXT), 5.0)
    assert set(RobotsState.__slots__) == {
        "body", "status", "fetched_at", "good_at", "expires_at", "unreachable_since"
    }
    assert (state.fetched_at, state.good_at, state.status) == (5.0, 5.0, 200)
