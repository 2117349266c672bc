"""Watching exactly (issue 35): any change of the visible text is a change, numbers included;
and a change of rule compares with the previous version under the new rule."""

from __future__ import annotations

from dataclasses import replace

from crawler.core.backoff import HostHealth
from crawler.core.extract import parse_page
from crawler.core.fingerprint import hamming_distance, text_hash
from crawler.core.model import FetchResult, Outcome, UrlRecord
from crawler.core.observe import needs_baseline, rebased
from crawler.core.patterns import EVERY_URL
from crawler.core.region import Region
from crawler.core.schedule import SchedulePolicy
from crawler.core.transition import ChangeKind, HostContext, Transition, transition
from crawler.settings import default_settings

NOW = 1_800_000_000.0
URL = "http://a.test/shop"
POLICY = SchedulePolicy(default_settings(
    schedule="uniform", default_interval=3600.0, simhash_threshold=6, max_outlinks=100,
    max_depth=3,
))
HOST = HostContext(HostHealth(), delay_seconds=2.0, next_request_at=NOW - 5.0)
# About 400 distinct words: a changed price moves the simhash by a few bits only.
FILLER = " ".join(f"item{i} description{i % 37}" for i in range(200))


def shop(price: str, *, script: str = "", side: str = "News of the week") -> bytes:
    return (f"<html><head><script>{script}</script></head><body><p>{FILLER}</p>"
            f"<span id='price'>{price}</span><aside>{side}</aside></body></html>").encode()


def ok(body: bytes, at: float) -> FetchResult:
    return FetchResult(fetched_at=at, duration_seconds=0.1, outcome=Outcome.OK, status=200,
                       body=body, content_type="text/html")


def step(record: UrlRecord, body: bytes, at: float) -> Transition:
    return transition(record, ok(body, at), HOST, POLICY, url_filter=EVERY_URL, now=at,
                      rng_value=0.5)


def test_a_price_change_on_a_long_page_is_under_the_simhash_threshold() -> None:
    """The case the issue reports: the default rule calls it unchanged."""
    first = step(UrlRecord(1, URL), shop("12.50"), NOW)
    second = step(first.record, shop("15.99"), NOW + 60)
    distance = second.observation.simhash_distance
    assert distance is not None and distance < POLICY.settings.simhash_threshold
    assert second.observation.changed is False and second.event is None


def test_watched_exactly_a_price_change_is_a_change_and_markup_is_not() -> None:
    first = step(UrlRecord(1, URL, exact=True), shop("12.50"), NOW)
    assert first.record.last_text_hash is not None and first.observation.changed is None
    price = step(first.record, shop("15.99"), NOW + 60)
    assert price.observation.changed is True
    assert price.observation.simhash_distance is not None  # still recorded
    assert price.event is not None and price.event.kind == ChangeKind.CHANGED
    assert price.record.change_count == 1
    # New markup with the same text (a script, whitespace): the bytes moved, the text did not.
    markup = step(price.record, shop("15.99", script="var build = 7;").replace(b"<p>", b"<p>\n "),
                  NOW + 120)
    assert markup.observation.content_changed is True
    assert markup.observation.changed is False and markup.event is None
    # The same bytes again: the stored text hash is kept.
    same = step(markup.record, shop("15.99", script="var build = 7;").replace(b"<p>", b"<p>\n "),
                NOW + 180)
    assert same.observation.changed is False
    assert same.record.last_text_hash == markup.record.last_text_hash


def test_watched_exactly_outside_the_region_is_no_change() -> None:
    record = UrlRecord(1, URL, exact=True, region=Region(watch="#price"),
                       fingerprint_region=Region(watch="#price").key)
    first = step(record, shop("12.50"), NOW)
    aside = step(first.record, shop("12.50", side="Other news"), NOW + 60)
    assert aside.observation.changed is False
    price = step(aside.record, shop("12.51", side="Other news"), NOW + 120)
    assert price.observation.changed is True


def test_a_url_not_watched_exactly_stores_no_text_hash() -> None:
    """The default rule costs nothing more than before."""
    first = step(UrlRecord(1, URL), shop("12.50"), NOW)
    assert first.record.last_text_hash is None and first.observation.text_hash is None


def test_turning_exact_on_compares_with_the_previous_version_not_nothing() -> None:
    old = step(UrlRecord(1, URL), shop("12.50"), NOW).record
    watched = replace(old, exact=True)
    assert needs_baseline(watched)  # no text hash to compare with yet
    previous = parse_page(shop("12.50"), "text/html", region=watched.region)
    based = rebased(watched, previous)
    assert not needs_baseline(based)
    assert based.last_text_hash == text_hash(previous.raw_text)
    changed = step(based, shop("15.99"), NOW + 60)
    assert changed.observation.changed is True and changed.event is not None


def test_a_new_region_compares_with_the_previous_version_under_it() -> None:
    """A region set after the last fetch (or a window joined): the previous version is
    fingerprinted again under it, so the next fetch is a change or not, never unknown."""
    old = step(UrlRecord(1, URL), shop("12.50"), NOW).record
    region = Region(watch="#price")
    moved = UrlRecord(1, URL, region=region, last_simhash=old.last_simhash,
                      last_content_hash=old.last_content_hash, fingerprint_region=old.region.key,
                      last_fetched_at=old.last_fetched_at, fetch_count=1)
    assert needs_baseline(moved)
    unbased = step(moved, shop("99.00"), NOW + 60)
    assert unbased.observation.changed is None  # what happens without a stored version
    based = rebased(moved, parse_page(shop("12.50"), "text/html", region=region))
    assert based.fingerprint_region == region.key
    changed = step(based, shop("99.00"), NOW + 60)
    assert changed.observation.changed is True
    assert changed.event is not None
    assert changed.event.previous_simhash == based.last_simhash
    assert hamming_distance(changed.event.previous_simhash or 0,
                            changed.observation.simhash or 0) == changed.event.distance
    unchanged = step(based, shop("12.50", side="Other news"), NOW + 60)
    assert unchanged.observation.changed is False
