"""Keeping up with sitemaps and feeds (issue 37): a file's next read from the page model's
estimator, the digest that says whether its listing changed, the feeds a page announces,
and a feed with bytes that are no UTF-8 read on."""

from __future__ import annotations

import pytest

from crawler.core.extract import parse_page
from crawler.core.links import feed_hrefs, resolve_feeds
from crawler.core.model import FetchResult, Outcome, UrlRecord
from crawler.core.patterns import EVERY_URL
from crawler.core.schedule import SchedulePolicy
from crawler.core.sitemap_schedule import SitemapRead, SitemapState, after_read, listing_digest
from crawler.core.sitemaps import (
    ATOM,
    DateHint,
    Entry,
    SitemapReader,
    location_allows,
    location_prefixes,
    read_document,
)
from crawler.core.transition import HostContext, transition
from crawler.settings import default_settings

NOW = 1_800_000_000.0
HOUR = 3600.0
DAY = 86400.0
MAX = DAY
BOUNDS = {"min_interval": 60.0, "max_interval": 30 * DAY}
UNIFORM = SchedulePolicy(default_settings(schedule="uniform", default_interval=7 * DAY, **BOUNDS))
OPTIMAL = SchedulePolicy(default_settings(schedule="optimal", default_interval=7 * DAY, **BOUNDS),
                         mu=0.05)


def reads(state: SitemapState, changes: list[bool], every: float,
          policy: object = OPTIMAL) -> tuple[SitemapState, float]:
    """The state after one read per ``every`` seconds, each changed or not (a new digest or
    the same), and the interval the last read scheduled."""
    at = NOW
    interval = 0.0
    digest = state.digest or b"d0"
    for n, changed in enumerate(changes):
        at += every
        if changed:
            digest = b"d%d" % (n + 1)
        done = after_read(state, SitemapRead(at, Outcome.OK, 200, digest), policy,  # type: ignore[arg-type]
                          max_interval_seconds=MAX)
        state = done.state
        interval = done.schedule.next_fetch_at - at
    return state, interval


def test_a_file_that_changes_is_read_more_often_than_one_that_does_not() -> None:
    first = after_read(SitemapState(host_id=1), SitemapRead(NOW, Outcome.OK, 200, b"a"),
                       OPTIMAL, max_interval_seconds=MAX)
    assert first.changed is None  # nothing to compare the first listing with
    assert first.state.answered_at == NOW and first.state.digest == b"a"
    busy, busy_interval = reads(first.state, [True] * 12, HOUR)
    quiet, quiet_interval = reads(first.state, [False] * 12, HOUR)
    assert busy.changes == 12 and quiet.changes == 0
    assert busy.change_rate_per_day is not None and quiet.change_rate_per_day is not None
    assert busy.change_rate_per_day > 5 * quiet.change_rate_per_day
    assert busy_interval < quiet_interval <= MAX
    # However rarely it changes, it is read at least every max_interval_seconds.
    _, never = reads(first.state, [False] * 60, DAY, OPTIMAL)
    assert never == pytest.approx(MAX)
    _, uniform = reads(first.state, [False] * 3, HOUR, UNIFORM)
    assert uniform == pytest.approx(MAX)  # the uniform 7 days, held to the file's bound


def test_a_304_is_an_unchanged_read_that_keeps_the_listing_and_validators() -> None:
    state = after_read(SitemapState(host_id=1), SitemapRead(NOW, Outcome.OK, 200, b"a",
                                                           etag='"v1"'),
                       OPTIMAL, max_interval_seconds=MAX).state
    again = after_read(state, SitemapRead(NOW + HOUR, Outcome.NOT_MODIFIED, 304),
                       OPTIMAL, max_interval_seconds=MAX)
    assert again.changed is False
    assert again.state.digest == b"a" and again.state.etag == '"v1"'
    assert again.state.reads == 2 and again.state.history.fetches == 1


def test_failures_back_off_within_the_files_bound_and_robots_waits_for_its_expiry() -> None:
    state = SitemapState(host_id=1)
    waits = []
    for n in range(12):
        done = after_read(state, SitemapRead(NOW + n, Outcome.HTTP_ERROR, 500), OPTIMAL,
                          max_interval_seconds=MAX)
        state = done.state
        waits.append(done.schedule.next_fetch_at - (NOW + n))
    assert waits == sorted(waits) and waits[0] == 60.0 and waits[-1] == MAX
    assert state.consecutive_failures == 12 and state.answered_at is None
    forbidden = after_read(SitemapState(host_id=1), SitemapRead(NOW, Outcome.DISALLOWED),
                           OPTIMAL, max_interval_seconds=MAX, robots_expires_at=NOW + 2 * HOUR)
    assert forbidden.schedule.next_fetch_at == NOW + 2 * HOUR


def test_the_digest_is_the_listing_urls_dates_and_order() -> None:
    a = Entry("http://a.example/1", (DateHint("lastmod", 1.0),))
    b = Entry("http://a.example/2")
    assert listing_digest([a, b]) == listing_digest([a, b])
    assert listing_digest([a, b]) != listing_digest([b, a])
    assert listing_digest([a, b]) != listing_digest([Entry(a.url, (DateHint("lastmod", 2.0),)),
                                                     b])
    assert listing_digest([a]) != listing_digest([a, b])
    assert listing_digest([]) != listing_digest([a])
    # The same listing in other bytes is the same listing.
    spaced = read_document(b"<urlset>\n  <url><loc> http://a.example/1 </loc></url>\n</urlset>",
                           "http://a.example/s.xml")[1]
    tight = read_document(b"<urlset><url><loc>http://a.example/1</loc></url></urlset>",
                          "http://a.example/s.xml")[1]
    assert listing_digest(spaced) == listing_digest(tight)


PAGE = b"""<!doctype html><html><head><title>Blog</title>
<link rel="stylesheet" href="/style.css">
<link rel="alternate" type="application/rss+xml" title="Posts" href="/feed/">
<link rel="alternate" type="application/atom+xml" href="https://blog.example/atom.xml">
<link rel="alternate" type="application/rss+xml" href="/feed/">
<link rel="alternate" hreflang="fr" href="/fr/">
<link rel="alternate stylesheet" type="text/css" href="/alt.css">
<link rel="alternate" type="Application/RSS+XML; charset=utf-8" href="comments/feed">
<link rel="icon" type="image/svg+xml" href="/icon.svg">
</head><body><p>Hello</p>
<link rel="alternate" type="application/rss+xml" href="/in-body-feed">
</body></html>"""


def test_a_pages_feeds_are_its_head_links_to_rss_and_atom() -> None:
    page = parse_page(PAGE, "text/html")
    assert page.feeds == ("/feed/", "https://blog.example/atom.xml", "comments/feed")
    assert resolve_feeds("https://blog.example/2024/post", page.feeds) == (
        "https://blog.example/feed/", "https://blog.example/atom.xml",
        "https://blog.example/2024/comments/feed")
    based = PAGE.replace(b"<title>", b'<base href="https://cdn.example/x/"><title>')
    assert resolve_feeds("https://blog.example/p", parse_page(based, "text/html").feeds)[0] \
        == "https://cdn.example/feed/"
    plain = parse_page(b"<html><head><title>t</title></head><body>x</body></html>", "text/html")
    assert plain.feeds == ()
    from selectolax.lexbor import LexborHTMLParser

    assert feed_hrefs(LexborHTMLParser("no head at all")) == ()


def test_the_transition_carries_the_feeds_resolved_against_the_page() -> None:
    from crawler.core.backoff import HostHealth

    record = UrlRecord(url_id=1, url="https://blog.example/2024/post", host_id=1)
    result = FetchResult(NOW, 0.1, Outcome.OK, status=200, body=PAGE,
                         content_type="text/html")
    done = transition(record, result, HostContext(HostHealth(), 1.0, 0.0),
                      SchedulePolicy(default_settings()), url_filter=EVERY_URL, now=NOW,
                      rng_value=0.5)
    assert done.feeds == ("https://blog.example/feed/", "https://blog.example/atom.xml",
                          "https://blog.example/2024/comments/feed")


FEED = (b'<?xml version="1.0" encoding="utf-8"?>\n<feed xmlns="http://www.w3.org/2005/Atom">'
        b"<title>Caf\xe9 news</title>"
        b'<entry><link href="/a"/><title>\xff\xfe broken \xc3</title>'
        b"<updated>2024-05-01T10:00:00Z</updated></entry>"
        b'<entry><link href="/b"/><title>form\x0cfeed and \x01bell</title></entry>'
        b'<entry><link href="/c\xe9"/></entry>'
        b'<entry><link href="/d"/><summary>ok \xe2\x82\xac</summary></entry>'
        b"</feed>")


@pytest.mark.parametrize("chunk", [1, 3, 7, 64, 1 << 20])
def test_a_feed_with_bytes_that_are_no_utf8_is_read_on_and_the_repair_counted(
    chunk: int,
) -> None:
    reader = SitemapReader("http://a.example/feed.atom")
    entries = []
    for start in range(0, len(FEED), chunk):
        entries += reader.feed(FEED[start : start + chunk])
    entries += reader.close()
    assert (reader.kind, reader.error, reader.cut) == (ATOM, None, None)
    # /c held a byte that is no UTF-8: not the site's URL, counted invalid.
    assert [e.url for e in entries] == ["http://a.example/a", "http://a.example/b",
                                        "http://a.example/d"]
    assert reader.invalid == 1
    assert entries[0].hints == (DateHint("updated", 1714557600.0),)
    # é (\xe9), \xff, \xfe, a cut sequence (\xc3<), é in /c: 5 replaced; \x0c and \x01 dropped.
    assert reader.repaired == 7


def test_the_repair_leaves_other_encodings_and_valid_files_alone() -> None:
    latin = (b'<?xml version="1.0" encoding="ISO-8859-1"?><rss><channel><item>'
             b"<link>http://a.example/caf\xe9</link></item></channel></rss>")
    reader, entries = read_document(latin, "http://a.example/rss")
    assert (reader.error, reader.repaired) == (None, 0)
    assert [e.url for e in entries] == ["http://a.example/caf%C3%A9"]
    utf16 = ('<?xml version="1.0" encoding="UTF-16"?><urlset><url><loc>http://a.example/é'
             "</loc></url></urlset>").encode("utf-16")
    reader, entries = read_document(utf16, "http://a.example/s.xml")
    assert (reader.error, reader.repaired, len(entries)) == (None, 0, 1)
    valid = FEED.replace(b"\xff\xfe broken \xc3", b"fine").replace(b"\x0c", b" ").replace(
        b"\x01", b"").replace(b"\xe9", b"\xc3\xa9")
    reader, entries = read_document(valid, "http://a.example/feed.atom")
    assert (reader.error, reader.repaired, len(entries)) == (None, 0, 4)


@pytest.mark.parametrize("sitemap", [
    "https://a.example/sitemap.xml", "https://a.example/blog/sitemap.xml",
    "https://A.example:8443/x/y/feed", "https://cdn.example/maps/s.xml.gz",
    "https://a.example/blog/",
])
@pytest.mark.parametrize("robots", [None, "https://a.example", "https://a.example:8443"])
def test_the_location_prefixes_are_the_location_rule(sitemap: str, robots: str | None) -> None:
    targets = ["https://a.example/", "https://a.example/blog/post", "https://a.example/blogx",
               "https://a.example:8443/x/y/z?q=1", "https://a.example:8443/x/", "http://a.example/",
               "https://cdn.example/maps/p", "https://cdn.example/other", "https://b.example/"]
    prefixes = location_prefixes(sitemap, robots)
    for url in targets:
        assert url.startswith(prefixes) == location_allows(sitemap, url, robots), url
