"""URL patterns (crawler.core.patterns): the matcher, its layering and messages, the
CRAWLER_INCLUDE / CRAWLER_EXCLUDE settings, and the window links a transition offers."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from crawler.commands.errors import settings_error
from crawler.core.backoff import HostHealth
from crawler.core.model import FetchResult, Outcome, UrlRecord
from crawler.core.patterns import (
    EVERY_URL,
    PatternError,
    describe,
    global_filter,
    partition,
    rejection,
    site_filter,
)
from crawler.core.schedule import SchedulePolicy
from crawler.core.transition import HostContext, transition
from crawler.settings import Settings, default_settings

NOW = 1_800_000_000.0


def test_a_pattern_is_searched_anywhere_in_the_whole_url() -> None:
    f = global_filter([], [r"\.pdf$", "sessionid="])
    assert f.rejection("http://a.test/doc.pdf") == "CRAWLER_EXCLUDE"
    assert f.rejection("http://a.test/doc.pdf?x=1") is None  # $ anchors the end of the URL
    assert f.rejection("http://a.test/p?sessionid=42") == "CRAWLER_EXCLUDE"
    assert f.rejection("http://a.test/page") is None
    # The scheme and host are part of what is matched.
    assert global_filter([], ["^https://"]).rejection("https://a.test/") == "CRAWLER_EXCLUDE"
    assert global_filter([], ["a\\.test"]).rejection("http://b.test/a.test") is not None


def test_include_needs_one_match_and_exclude_wins() -> None:
    f = site_filter([r"^http://a\.test/blog/", r"^http://a\.test/$"], ["draft"])
    assert f.rejection("http://a.test/") is None
    assert f.rejection("http://a.test/blog/post") is None
    assert f.rejection("http://a.test/about") == "--include"
    assert f.rejection("http://a.test/blog/draft-2") == "--exclude"
    assert site_filter([], []).empty and site_filter([], []).rejection("http://x.test/") is None


def test_global_patterns_run_first_and_are_named_in_the_counts() -> None:
    filters = [global_filter([], [r"\.pdf$"]), site_filter(["/blog/"], ["draft"])]
    assert rejection(filters, "http://a.test/blog/draft.pdf") == "CRAWLER_EXCLUDE"
    kept, rejected = partition(filters, [
        "http://a.test/blog/a", "http://a.test/blog/a.pdf", "http://a.test/blog/draft",
        "http://a.test/shop", "http://a.test/x.pdf", "http://a.test/blog/b",
    ])
    assert kept == ["http://a.test/blog/a", "http://a.test/blog/b"]
    assert rejected == {"CRAWLER_EXCLUDE": 2, "--exclude": 1, "--include": 1}


def test_a_bad_pattern_is_one_line_naming_it() -> None:
    with pytest.raises(PatternError) as caught:
        site_filter([], ["ok", "(unclosed"])
    message = str(caught.value)
    assert "\n" not in message
    assert "--exclude pattern '(unclosed' is not a regular expression" in message


def test_settings_take_comma_separated_or_json_patterns_and_refuse_bad_ones() -> None:
    assert Settings(exclude=r"\.pdf$, \.zip$").exclude == [r"\.pdf$", r"\.zip$"]  # type: ignore[arg-type]
    # A pattern holding a comma needs the JSON form.
    assert Settings(include='["a{1,3}", "b"]').include == ["a{1,3}", "b"]  # type: ignore[arg-type]
    assert default_settings().include == [] and default_settings().exclude == []
    with pytest.raises(ValidationError) as caught:
        Settings(exclude="[unclosed")  # type: ignore[arg-type]
    error = settings_error(caught.value).message
    assert error.startswith("invalid CRAWLER_EXCLUDE: ") and "\n" not in error, error
    with pytest.raises(ValidationError) as caught:
        Settings(include="ok,(bad")  # type: ignore[arg-type]
    error = settings_error(caught.value).message
    assert error == ("invalid CRAWLER_INCLUDE: pattern '(bad' is not a regular expression: "
                     "missing ), unterminated subpattern at position 0"), error


def test_describe_lists_includes_then_excludes() -> None:
    assert describe(["^a", "b"], ["c"]) == "+^a +b -c"
    assert describe([], []) == ""


def test_window_discovery_skips_links_the_global_patterns_reject() -> None:
    settings = Settings(exclude=r"\.pdf$,/private/")  # type: ignore[arg-type]
    policy = SchedulePolicy(settings.model_copy(update={
        "schedule": "uniform", "default_interval": 3600.0, "max_outlinks": 100, "max_depth": 3}))
    config = global_filter(settings.include, settings.exclude)
    links = ('<a href="/a">a</a><a href="/b.pdf">b</a><a href="/private/c">c</a>'
             '<a href="/d">d</a>')
    body = f"<html><body><p>{'words ' * 20}</p>{links}</body></html>".encode()
    result = FetchResult(fetched_at=NOW, duration_seconds=0.1, outcome=Outcome.OK, status=200,
                         body=body, content_type="text/html")
    host = HostContext(HostHealth(), delay_seconds=2.0, next_request_at=NOW - 5.0)
    t = transition(UrlRecord(1, "http://a.test/", site_id=7, depth=0), result, host, policy,
                   url_filter=config, now=NOW, rng_value=0.5)
    assert t.window is not None
    assert t.window.out_links == ("http://a.test/a", "http://a.test/d")
    unfiltered = transition(
        UrlRecord(1, "http://a.test/", site_id=7, depth=0), result, host,
        policy, url_filter=EVERY_URL, now=NOW, rng_value=0.5,
    )
    assert unfiltered.window is not None and len(unfiltered.window.out_links or ()) == 4


def test_a_permanent_redirect_seeds_its_target_only_if_the_global_patterns_pass_it() -> None:
    settings = Settings(exclude=r"\.pdf$")  # type: ignore[arg-type]
    policy = SchedulePolicy(settings.model_copy(update={"max_outlinks": 100, "max_depth": 3}))
    config = global_filter(settings.include, settings.exclude)
    host = HostContext(HostHealth(), delay_seconds=2.0, next_request_at=NOW - 5.0)

    def redirected(to: str) -> FetchResult:
        return FetchResult(fetched_at=NOW, duration_seconds=0.1, outcome=Outcome.OK,
                           status=200, body=b"<p>x</p>", content_type="text/html",
                           redirect_to=to)

    refused = transition(UrlRecord(1, "http://a.test/doc"), redirected("http://a.test/doc.pdf"),
                         host, policy, url_filter=config, now=NOW, rng_value=0.5)
    assert refused.seed is None and refused.redirect_to == "http://a.test/doc.pdf"
    passed = transition(UrlRecord(1, "http://a.test/doc"), redirected("http://a.test/doc2"),
                        host, policy, url_filter=config, now=NOW, rng_value=0.5)
    assert passed.seed == "http://a.test/doc2"
