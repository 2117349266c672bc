"""Google's robots.txt conformance suite, as data (tests/data/robots_cases.json).

The cases were transcribed from github.com/google/robotstxt-spec-test (src/main/resources/CTC,
whose correctness cases mirror robots_test.cc of github.com/google/robotstxt); each names its
source file. ``kind`` is the suite's test_type: "standard" (RFC 9309) or "google-specific".
Every standard case must pass the matcher; the policy the daemon applies differs on purpose
where RFC 9309 asks for more (docs/ROBOTS.md), and those cases are asserted here by name.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from crawler.core import robotstxt
from crawler.core.robots import RULES, RobotsPolicy, robots_text

CASES_PATH = Path(__file__).parent.parent / "data" / "robots_cases.json"


def _load() -> list[dict[str, Any]]:
    flat = []
    for entry in json.loads(CASES_PATH.read_text(encoding="utf-8")):
        raw = (base64.b64decode(entry["body_base64"]) if "body_base64" in entry
               else entry["body"].encode("utf-8"))
        for expectation in entry["expect"]:
            flat.append({"source": entry["source"], "raw": raw, **expectation})
    return flat


CASES = _load()
STANDARD = [c for c in CASES if c["kind"] == "standard"]


def _id(case: dict[str, Any]) -> str:
    return f"{case['source'].rsplit('/', 1)[-1]}:{case['agent']}:{case['url']}"


def test_the_suite_is_complete() -> None:
    """400 expectations, 378 of them standard: nothing was lost in transcription."""
    assert len(CASES) == 400 and len(STANDARD) == 378


@pytest.mark.parametrize("case", STANDARD, ids=_id)
def test_matcher_passes_every_standard_case(case: dict[str, Any]) -> None:
    rules = robotstxt.parse(robots_text(case["raw"], truncated=False))
    assert rules.allowed(case["agent"], case["url"]) is case["allowed"]


def _rfc_differs(case: dict[str, Any]) -> bool:
    """Cases where RFC 9309 asks the daemon for another answer than the suite gives."""
    path = robotstxt.url_path(case["url"])
    return path == "/robots.txt" or not case["url"].isascii()


@pytest.mark.parametrize("case", STANDARD, ids=_id)
def test_policy_passes_every_standard_case_the_rfc_agrees_with(case: dict[str, Any]) -> None:
    policy = RobotsPolicy(RULES, case["agent"], robots_text(case["raw"], truncated=False))
    expected = True if _rfc_differs(case) else case["allowed"]
    assert policy.allowed(case["url"]) is expected


def test_the_deliberate_differences_are_these_six() -> None:
    """Four disallow /robots.txt itself; two expect a raw non-ASCII URL not to match."""
    differing = [c for c in STANDARD if _rfc_differs(c) and not c["allowed"]]
    assert sorted((c["agent"], c["url"]) for c in differing) == sorted([
        ("asdfbot", "http://m.example.com/robots.txt"),
        ("BarBot", "http://example.com/robots.txt"),
        ("AB", "http://example.com/robots.txt"),
        ("XYZ", "http://example.com/robots.txt"),
        ("FooBot", "http://foo.bar/foo/bar/ツ"),
        ("FooBot", "http://foo.bar/foo/bar/ツ"),
    ])


def test_robots_txt_itself_is_always_allowed_unlike_the_suite() -> None:
    """RFC 9309 2.2.2: "/robots.txt" is implicitly allowed; the suite disallows it under "/"."""
    body = "User-agent: *\nDisallow: /\n"
    assert not robotstxt.parse(body).allowed("bot", "http://h/robots.txt")
    assert RobotsPolicy(RULES, "bot", body).allowed("http://h/robots.txt")


def test_a_non_ascii_url_is_percent_encoded_unlike_the_suite() -> None:
    """RFC 9309 2.2.2: octets outside US-ASCII are percent-encoded before comparison, in the URL
    as in the rule; the suite leaves the URL to the caller and so expects a raw "ツ" not to
    match "/foo/bar/%E3%83%84"."""
    body = "User-agent: FooBot\nDisallow: /\nAllow: /foo/bar/ツ\n"
    assert not robotstxt.parse(body).allowed("FooBot", "http://foo.bar/foo/bar/ツ")
    policy = RobotsPolicy(RULES, "FooBot", body)
    assert policy.allowed("http://foo.bar/foo/bar/ツ")
    assert policy.allowed("http://foo.bar/foo/bar/%e3%83%84")
    assert not policy.allowed("http://foo.bar/foo/bar/baz")


@pytest.mark.parametrize(
    ("agent", "allowed"),
    [("AB42bot", True), ("AB", False), ("barbarbot-prod", False), ("barbarbot", False),
     ("barbar", True)],
)
def test_product_token_matching(agent: str, allowed: bool) -> None:
    """An agent line names the leading [A-Za-z_-] run of its value, matched whole (2.2.1)."""
    body = ("User-agent: AB42bot\nDisallow: /\n\nUser-agent: barbarbot*\nDisallow: /\n\n"
            "User-agent: barbarbot-prod\nDisallow: /\n")
    assert robotstxt.parse(body).allowed(agent, "http://h/page") is allowed


@pytest.mark.parametrize(
    ("body", "allowed"),
    [(b"\xef\xbb\xbfUser-agent: *\nDisallow: /\n", False),
     (b"\xef\xbbUser-agent: *\nDisallow: /\n", False),
     (b"\xefUser-agent: *\nDisallow: /\n", False),
     (b"\xef\x11\xbfUser-agent: *\nDisallow: /\n", True),
     (b"User-agent: *\n\xef\xbb\xbfDisallow: /\n", True)],
)
def test_byte_order_mark_only_before_the_first_line(body: bytes, allowed: bool) -> None:
    rules = robotstxt.parse(robots_text(body, truncated=False))
    assert rules.allowed("bot", "http://h/page") is allowed


# robots_test.cc, TestGetPathParamsQuery: what part of a URL is matched.
@pytest.mark.parametrize(
    ("url", "path"),
    [("", "/"), ("http://www.example.com", "/"), ("http://www.example.com/", "/"),
     ("http://www.example.com/a", "/a"), ("http://www.example.com/a/", "/a/"),
     ("http://www.example.com/a/b?c=http://d.e/", "/a/b?c=http://d.e/"),
     ("http://www.example.com/a/b?c=d&e=f#fragment", "/a/b?c=d&e=f"),
     ("example.com", "/"), ("example.com/", "/"), ("example.com/a", "/a"),
     ("example.com/a/", "/a/"), ("example.com/a/b?c=d&e=f#fragment", "/a/b?c=d&e=f"),
     ("a", "/"), ("a/", "/"), ("/a", "/a"), ("a/b", "/b"), ("example.com?a", "/?a"),
     ("example.com/a;b#c", "/a;b"), ("//a/b/c", "/b/c")],
)
def test_url_path(url: str, path: str) -> None:
    assert robotstxt.url_path(url) == path


# robots_test.cc, TestMaybeEscapePattern.
@pytest.mark.parametrize(
    ("pattern", "escaped"),
    [("http://www.example.com", "http://www.example.com"), ("/a/b/c", "/a/b/c"),
     ("á", "%C3%A1"), ("%aa", "%AA")],
)
def test_escape_pattern(pattern: str, escaped: str) -> None:
    assert robotstxt.escape_pattern(pattern) == escaped


def test_matching_is_bounded_on_hostile_patterns() -> None:
    """Many stars against a long path: positions, not backtracking (quadratic at worst)."""
    body = "User-agent: *\nDisallow: /" + "*a" * 100 + "b\n"
    assert robotstxt.parse(body).allowed("bot", "http://h/" + "a" * 2000)
