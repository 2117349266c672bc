"""The pure transition: one frozen value with everything a fetch changes, on every path."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest

from crawler.core.backoff import HostHealth
from crawler.core.model import Exchange, FetchResult, Outcome, UrlRecord, UrlState
from crawler.core.patterns import EVERY_URL
from crawler.core.schedule import SchedulePolicy
from crawler.core.transition import (
    ChangeKind,
    HostContext,
    forbidden,
    transition,
)
from crawler.settings import default_settings

NOW = 1_800_000_000.0
URL = "http://a.test/page"
POLICY = SchedulePolicy(default_settings(
    schedule="uniform", default_interval=3600.0, simhash_threshold=6, max_outlinks=100,
    max_depth=3,
))
HOST = HostContext(HostHealth(), delay_seconds=2.0, next_request_at=NOW - 5.0)


def page(text: str, links: str = "") -> bytes:
    return f"<html><body><p>{text}</p>{links}</body></html>".encode()


def ok(body: bytes, at: float = NOW, **fields: object) -> FetchResult:
    return FetchResult(fetched_at=at, duration_seconds=0.1, outcome=Outcome.OK, status=200,
                       body=body, content_type="text/html", **fields)  # type: ignore[arg-type]


def step(record: UrlRecord, result: FetchResult, **kw: object):  # type: ignore[no-untyped-def]
    return transition(record, result, HOST, POLICY, url_filter=EVERY_URL, now=result.fetched_at,
                      rng_value=0.5,
                      **kw)  # type: ignore[arg-type]


def test_first_fetch_records_content_and_moves_the_politeness_clock() -> None:
    t = step(UrlRecord(1, URL), ok(page("hello world " * 20)))
    assert t.record.state == UrlState.ACTIVE
    assert t.record.fetch_count == 1
    assert t.observation.simhash is not None and t.observation.changed is None
    assert t.schedule.next_fetch_at == NOW + 3600.0
    assert t.host.next_request_at == NOW + HOST.delay_seconds
    assert (t.event, t.seed, t.window) == (None, None, None)


def test_a_real_change_raises_a_change_event_and_a_cosmetic_one_does_not() -> None:
    first = step(UrlRecord(1, URL), ok(page("alpha beta gamma delta " * 30)))
    text = "completely different words about another subject entirely " * 30
    changed = step(first.record, ok(page(text), at=NOW + 7200))
    assert changed.observation.changed
    assert changed.event is not None and changed.event.kind == ChangeKind.CHANGED
    assert changed.event.previous_simhash == first.record.last_simhash
    assert changed.event.new_simhash == changed.observation.simhash
    assert changed.event.distance == changed.observation.simhash_distance
    same = step(first.record, ok(page("alpha beta gamma delta " * 30), at=NOW + 7200))
    assert same.event is None


def test_gone_then_back_raise_one_event_each() -> None:
    live = step(UrlRecord(1, URL), ok(page("text " * 50))).record
    gone_result = FetchResult(NOW + 10, 0.1, Outcome.GONE, status=404)
    gone = step(live, gone_result)
    assert gone.record.state == UrlState.GONE
    assert gone.event is not None and gone.event.kind == ChangeKind.GONE
    still = step(gone.record, replace(gone_result, fetched_at=NOW + 20))
    assert still.event is None
    back = step(still.record, ok(page("text " * 50), at=NOW + 30))
    assert back.event is not None and back.event.kind == ChangeKind.BACK


def test_a_forbidden_url_counts_its_fetch_and_waits_for_robots_txt() -> None:
    record = UrlRecord(1, URL, fetch_count=4)
    t = step(record, forbidden(NOW), robots_expires_at=NOW + 86400)
    assert t.record.state == UrlState.DISALLOWED
    assert t.record.fetch_count == 5  # counted: fetch_count == observations
    assert t.observation.outcome == Outcome.DISALLOWED
    assert t.schedule.next_fetch_at == NOW + 86400
    # Not requested: the host's clock and health are untouched.
    assert t.host.next_request_at == HOST.next_request_at
    assert (t.host.consecutive_failures, t.host.backoff_until) == (0, None)


def test_a_forbidden_url_is_not_rechecked_sooner_than_the_shortest_interval() -> None:
    t = step(UrlRecord(1, URL), forbidden(NOW), robots_expires_at=NOW + 1)
    assert t.schedule.next_fetch_at == NOW + POLICY.settings.min_interval


def test_a_permanent_redirect_is_recorded_as_such_and_seeds_its_target() -> None:
    t = step(UrlRecord(1, URL, site_id=3), ok(page("x"), redirect_to="HTTP://a.test/new#frag"))
    assert t.observation.outcome == Outcome.REDIRECT
    assert t.record.state == UrlState.REDIRECTED
    assert t.seed == t.redirect_to == "http://a.test/new"
    assert t.window is None
    assert t.schedule.next_fetch_at == NOW + POLICY.settings.max_interval


def hop(status: int, url: str, location: str) -> Exchange:
    return Exchange(url=url, status=status, reason="Moved", headers=(("Location", location),),
                    location=location, body=b"moved")


def test_a_redirected_url_shows_the_3xx_it_answered_not_its_targets_200() -> None:
    moved = step(UrlRecord(1, URL), ok(page("x"), redirect_to="http://a.test/new",
                                       redirects=(hop(301, URL, "http://a.test/new"),)))
    assert moved.observation.status == moved.record.last_status == 301
    assert moved.observation.outcome == Outcome.REDIRECT and moved.event is None
    found = step(UrlRecord(1, URL), ok(page("x"), redirects=(hop(302, URL, "http://a.test/t"),),
                                       final_url="http://a.test/t"))
    # A temporary redirect is watched through: the content is the URL's version.
    assert found.observation.outcome == Outcome.OK and found.observation.content_hash
    assert found.observation.status == found.record.last_status == 302
    assert found.redirect_to == "http://a.test/t" and found.seed is None


def test_a_windowed_page_offers_its_same_site_out_links() -> None:
    links = '<a href="/b">b</a><a href="http://other.test/c">c</a><a href="/d">d</a>'
    t = step(UrlRecord(1, URL, site_id=7, depth=0), ok(page("words " * 20, links)))
    assert t.window is not None
    assert t.window.out_links == ("http://a.test/b", "http://a.test/d")
    assert t.window.first_fetch and t.window.state_changed
    deep = step(UrlRecord(1, URL, site_id=7, depth=3), ok(page("words", links)))
    assert deep.window is not None and deep.window.out_links == ()


def test_an_error_keeps_the_window_links_and_a_gone_page_loses_them() -> None:
    record = UrlRecord(1, URL, site_id=7, depth=0, state=UrlState.ACTIVE)
    error = step(record, FetchResult(NOW, 1.0, Outcome.TIMEOUT, error_kind="timeout_total"))
    assert error.window is not None and error.window.out_links is None
    gone = step(record, FetchResult(NOW, 0.1, Outcome.GONE, status=410))
    assert gone.window is not None and gone.window.out_links == ()


@pytest.mark.parametrize("rng_value", [0.0, 0.99])
def test_a_throttled_host_backs_off_with_the_given_jitter(rng_value: float) -> None:
    result = FetchResult(NOW, 0.1, Outcome.HTTP_ERROR, status=503)
    t = transition(UrlRecord(1, URL), result, HOST, POLICY, url_filter=EVERY_URL, now=NOW,
                   rng_value=rng_value)
    assert t.host.consecutive_failures == 1
    assert t.host.backoff_until is not None
    base = POLICY.settings.backoff_base_seconds
    assert t.host.backoff_until == pytest.approx(NOW + base * (0.5 + 0.5 * rng_value))
    assert t.record.consecutive_failures == 1 and t.record.state == UrlState.ERROR


def test_the_transition_is_a_function_of_its_inputs() -> None:
    record = UrlRecord(1, URL, site_id=2, depth=1)
    result = ok(page("same input", '<a href="/x">x</a>'))
    assert step(record, result) == step(record, result)


def test_identical_bytes_reuse_the_stored_fingerprint_without_parsing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A re-fetch of exactly the stored bytes is unchanged with the stored simhash; the parser
    is not run (the fingerprint of identical bytes is known), and a window keeps its links."""
    body = page("stable words on a page that does not change " * 20, '<a href="/b">b</a>')
    site_record = replace(UrlRecord(1, URL), site_id=7, depth=0)
    first = step(site_record, ok(body))
    assert first.window is not None and first.window.out_links == ("http://a.test/b",)
    # A stored simhash no parse of this body gives proves it is reused, not recomputed.
    stored = replace(first.record, last_simhash=first.record.last_simhash ^ 0b111)

    def no_parse(*args: object, **kwargs: object) -> None:
        raise AssertionError("identical bytes were parsed again")

    with monkeypatch.context() as patched:
        patched.setattr("crawler.core.transition.parse_bounded", no_parse)
        again = step(stored, ok(body, at=NOW + 3600))
    assert again.observation.simhash == stored.last_simhash
    assert (again.observation.simhash_distance, again.observation.changed) == (0, False)
    assert again.observation.content_changed is False
    assert again.record.last_simhash == stored.last_simhash
    assert again.window is not None and again.window.out_links is None  # keep the old links
    assert again.event is None
    # One byte more: parsed, fingerprinted afresh, compared with the stored simhash.
    edited = step(stored, ok(body + b" ", at=NOW + 7200))
    assert edited.observation.simhash == first.record.last_simhash
    assert edited.observation.simhash_distance == 3
    assert edited.observation.content_changed is True
    assert edited.window is not None and edited.window.out_links == ("http://a.test/b",)


def test_a_content_hash_stored_before_sha1_is_matched_and_replaced() -> None:
    """A URL whose stored hash is the old BLAKE2b-128 of the same bytes: the re-fetch is the
    stored version (not parsed, not a cosmetic change), and the hash is rewritten as SHA-1."""
    body = page("stable words on a page that does not change " * 20)
    first = step(UrlRecord(1, URL), ok(body))
    legacy = replace(first.record,
                     last_content_hash=hashlib.blake2b(body, digest_size=16).digest())
    again = step(legacy, ok(body, at=NOW + 3600))
    assert (again.observation.changed, again.observation.content_changed) == (False, False)
    assert again.observation.content_hash == hashlib.sha1(body).digest()
    assert again.record.last_content_hash == hashlib.sha1(body).digest()
    edited = step(legacy, ok(body + b" ", at=NOW + 7200))
    assert edited.observation.content_changed is True


def test_a_window_page_crawled_before_it_joined_is_fetched_whole_and_parsed() -> None:
    """Its stored validators and content hash came from before it joined: no 304 and no
    identical-bytes shortcut may keep its links unread."""
    from crawler.net.fetch import conditional_headers

    body = page("words " * 50, '<a href="/other">o</a>')
    crawled = step(UrlRecord(1, URL), ok(body, etag='"v1"')).record
    assert crawled.etag == '"v1"' and not crawled.out_links_read
    assert conditional_headers(crawled) == {"If-None-Match": '"v1"'}
    joined = replace(crawled, site_id=7, depth=0)
    assert joined.out_links_unread and conditional_headers(joined) == {}
    again = step(joined, ok(body, at=NOW + 60, etag='"v1"'))
    assert again.window is not None and again.window.out_links == ("http://a.test/other",)
    assert again.record.out_links_read and not again.record.out_links_unread
    assert conditional_headers(again.record) == {"If-None-Match": '"v1"'}
    # Read, a 304 or the same bytes again keep the stored links and the flag.
    same = step(again.record, ok(body, at=NOW + 120, etag='"v1"'))
    assert same.window is not None and same.window.out_links is None
    assert same.record.out_links_read


def test_a_window_member_that_is_not_html_is_read_once_and_then_fetched_conditionally() -> None:
    pdf = FetchResult(fetched_at=NOW, duration_seconds=0.1, outcome=Outcome.OK, status=200,
                      body=b"%PDF-1.4 not html", content_type="application/pdf", etag='"p"')
    t = step(UrlRecord(1, URL, site_id=7, depth=1), pdf)
    assert t.record.out_links_read
    not_modified = FetchResult(fetched_at=NOW + 60, duration_seconds=0.1,
                               outcome=Outcome.NOT_MODIFIED, status=304)
    unread = step(UrlRecord(1, URL, site_id=7, depth=1, last_content_hash=b"x"), not_modified)
    assert not unread.record.out_links_read  # a 304 reads nothing


def test_a_window_page_found_back_with_its_old_bytes_has_its_links_read_again() -> None:
    """Gone, a window page loses its links; found back, even byte for byte as it was, it is
    parsed and offers them again (its validators are not sent): its part of the window comes
    back with it."""
    links = '<a href="/b">b</a><a href="/c">c</a>'
    body = page("words " * 20, links)
    live = step(UrlRecord(1, URL, site_id=7, depth=0), ok(body, etag='"v1"')).record
    assert live.out_links_read and not live.out_links_unread
    gone = step(live, FetchResult(NOW + 10, 0.1, Outcome.GONE, status=404))
    assert gone.window is not None and gone.window.out_links == ()
    assert gone.record.out_links_unread
    back = step(gone.record, ok(body, at=NOW + 20, etag='"v1"'))
    assert back.event is not None and back.event.kind == ChangeKind.BACK
    assert back.window is not None
    assert back.window.out_links == ("http://a.test/b", "http://a.test/c")
    assert back.record.out_links_read
