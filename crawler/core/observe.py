"""Interpret one fetch: fingerprint the page, compare it with the previous version.

A change is a simhash distance of at least the threshold (docs/MODEL.md section 1); bytes
that differ under the threshold are a cosmetic change, recorded (``content_changed``) but not
counted. A URL watched exactly (``UrlRecord.exact``) changed when its visible text did
(``text_hash``), numbers included.

A stored fingerprint taken under another rule (another region, or no text hash for a URL now
watched exactly) is re-taken from the stored previous version before the comparison
(``needs_baseline``, ``rebased``): the edge reads that version, this module judges it.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from itertools import pairwise
from typing import TYPE_CHECKING

from crawler.core.estimate import dated_change_days
from crawler.core.extract import ParsedPage, parse_page
from crawler.core.fingerprint import content_hash, hamming_distance, same_content, text_hash
from crawler.core.last_modified import observe_last_modified
from crawler.core.model import (
    DISALLOWED,
    GONE,
    NOT_MODIFIED,
    OK,
    REDIRECT,
    SECONDS_PER_DAY,
    FetchResult,
    Observation,
    UrlRecord,
    UrlState,
)
from crawler.core.periodic import PeriodicModel, detect_period_from_intervals
from crawler.core.region import Region

if TYPE_CHECKING:  # checked field by field, as dataclasses.replace is
    from dataclasses import replace as replace_record
else:
    from crawler.core.model import replace_record

HTML_TYPES = ("text/html", "application/xhtml+xml")
MAX_CHANGE_BRACKETS = 64
MIN_CHANGES_FOR_PERIOD = 8
DATED_BRACKET_DAYS = 60.0 / SECONDS_PER_DAY


def is_html(content_type: str | None, body: bytes) -> bool:
    """HTML by header, or sniffed when the header is missing."""
    if content_type:
        return _is_html_type(content_type)
    head = body[:512].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html"))


@functools.lru_cache(maxsize=256)
def _is_html_type(content_type: str) -> bool:
    """Whether a Content-Type names HTML: asked twice a fetch (parse and observe), of a few
    distinct headers (remembered: the split and lower cost more than the lookup)."""
    return content_type.split(";", 1)[0].strip().lower() in HTML_TYPES


def parse_result(
    result: FetchResult, *, page_url: str | None = None, max_links: int = 1000,
    region: Region | None = None,
) -> ParsedPage | None:
    """Parse a fetched HTML page once (text, features, and out-links when ``page_url`` is
    given); None when there is no HTML body to parse."""
    if result.outcome != OK or not is_html(result.content_type, result.body):
        return None
    return parse_page(
        result.body, result.content_type, page_url=page_url, max_links=max_links, region=region
    )


def as_permanent_redirect(result: FetchResult) -> FetchResult:
    """A fetch that followed a permanent redirect, recorded on the old URL as the redirect
    itself: the content it reached belongs to the target, not to this URL's history."""
    return replace(result, outcome=REDIRECT, body=b"", error_kind=None, truncated=False)


def same_fingerprinted_bytes(
    record: UrlRecord, result: FetchResult, exact: bytes | None = None
) -> bool:
    """Whether the fetch returned exactly the bytes whose fingerprint is stored, under the same
    region: its simhash is then the stored one, and parsing the page again would only repeat
    the work (in a re-crawl most fetches are such; parsing is most of a fetch's CPU). Their
    out-links are the stored ones too, unless none were read since the URL joined its window.
    ``exact`` is the body's ``content_hash`` when the caller has it."""
    return (
        result.outcome == OK
        and not record.out_links_unread
        and record.last_simhash is not None
        and record.last_content_hash is not None
        and record.fingerprint_region == record.region.key
        # A URL watched exactly without a text hash yet is parsed once to take it.
        and (not record.exact or record.last_text_hash is not None)
        and same_content(
            record.last_content_hash, content_hash(result.body) if exact is None else exact,
            result.body,
        )
    )


def observe(
    record: UrlRecord,
    result: FetchResult,
    threshold_bits: int,
    page: ParsedPage | None = None,
    *,
    same_bytes: bool | None = None,
    exact: bytes | None = None,
) -> Observation:
    """Compare a fetch with the stored version of the page.

    ``page`` is the fetch already parsed by ``parse_result`` (parsed here when omitted, unless
    the bytes are the stored version's: ``same_fingerprinted_bytes``); non-HTML content gets
    only the exact hash. ``same_bytes`` is ``same_fingerprinted_bytes`` when the caller has it,
    and ``exact`` the body's ``content_hash`` (each page's body is hashed once).

    A URL watched exactly changed when its text hash differs from the stored one (without a
    stored text hash, the simhash rule decides). A fingerprint stored under another region is
    not compared with (the edge re-takes it first, ``rebased``): when no version is stored,
    this fetch is the new baseline, unchanged when the bytes are identical, else unknown.
    """
    simhash: int | None = None
    text: bytes | None = None
    distance: int | None = None
    changed: bool | None = None
    content_changed: bool | None = None
    if result.outcome != OK:
        exact = None
    elif exact is None:
        exact = content_hash(result.body)
    if same_bytes is None:
        same_bytes = page is None and same_fingerprinted_bytes(record, result, exact)
    if same_bytes or (result.outcome == NOT_MODIFIED and record.last_content_hash is not None):
        # The stored version again (the same bytes, or the server's 304): its fingerprint. The
        # same bytes keep their new hash (a hash stored in the old form is replaced by it).
        simhash = record.last_simhash
        text = record.last_text_hash
        if exact is None:
            exact = record.last_content_hash
        distance, changed, content_changed = 0, False, False
    elif result.outcome == OK:
        assert exact is not None
        if page is None:
            page = parse_result(result, region=record.region)
        simhash = None if page is None else page.simhash
        if page is not None and record.exact:
            text = text_hash(page.raw_text)
        if record.last_content_hash is not None:
            content_changed = not same_content(record.last_content_hash, exact, result.body)
            if simhash is not None and record.fingerprint_region != record.region.key:
                changed = False if not content_changed else None
            elif simhash is not None and record.last_simhash is not None:
                distance = hamming_distance(simhash, record.last_simhash)
                if text is not None and record.last_text_hash is not None:
                    changed = text != record.last_text_hash
                else:
                    changed = distance >= threshold_bits
            else:
                # Non-HTML (or a page that turned into/out of HTML): exact hash only.
                changed = content_changed
    return Observation(
        fetched_at=result.fetched_at, outcome=result.outcome,
        status=result.answered_status,  # a redirected URL answered its 3xx, not the target's
        size_bytes=len(result.body), duration_seconds=result.duration_seconds,
        simhash=simhash, content_hash=exact, simhash_distance=distance, changed=changed,
        content_changed=content_changed, last_modified=result.last_modified,
        error_kind=result.error_kind, truncated=result.truncated, text_hash=text,
    )


def needs_baseline(record: UrlRecord) -> bool:
    """Whether the stored fingerprint was taken under another rule than the record's: another
    region (``crawler watch``, or the URL joined a window with one), or no text hash for a URL
    watched exactly. The previous version, when stored, is then fingerprinted again under the
    current rule (``rebased``), so that this fetch is compared with it rather than with
    nothing."""
    return record.last_content_hash is not None and (
        record.fingerprint_region != record.region.key
        or (record.exact and record.last_text_hash is None)
    )


def rebased(record: UrlRecord, previous: ParsedPage) -> UrlRecord:
    """``record`` with the fingerprint of its previous version (``previous``, parsed under
    ``record.region`` from the stored body whose hash is ``last_content_hash``) in place of
    the one stored under the old rule."""
    return replace_record(
        record, last_simhash=previous.simhash, fingerprint_region=record.region.key,
        last_text_hash=text_hash(previous.raw_text) if record.exact else None,
    )


def updated_record(record: UrlRecord, result: FetchResult, obs: Observation) -> UrlRecord:
    """The URL's state after this fetch (schedule aside)."""
    if obs.outcome == DISALLOWED:
        # Not requested, but a fetch of the URL all the same: counted, nothing else changes.
        return replace_record(record, state=UrlState.DISALLOWED, fetch_count=record.fetch_count + 1)
    if obs.outcome == REDIRECT:
        # Moved permanently: the URL now points elsewhere; its target is a URL of its own.
        return _without_content(record, obs, UrlState.REDIRECTED, consecutive_failures=0)
    if obs.outcome == GONE:
        # A lifespan ends; consecutive_failures counts the gone answers in a row.
        return _without_content(
            record, obs, UrlState.GONE, consecutive_failures=record.consecutive_failures + 1
        )
    if obs.outcome not in (OK, NOT_MODIFIED):
        # A failure: a URL never fetched, or failing already, is in error; others keep state.
        failing = record.state in (UrlState.NEW, UrlState.ERROR)
        return _without_content(
            record, obs, UrlState.ERROR if failing else record.state,
            consecutive_failures=record.consecutive_failures + 1,
        )
    history = record.history
    brackets = record.change_brackets_days
    periodic = record.periodic
    lm_history, lm_evidence = record.last_modified_history, record.last_modified_evidence_days
    # A 304 need not repeat the Last-Modified it confirms.
    last_modified = result.last_modified
    if last_modified is None and obs.outcome == NOT_MODIFIED:
        last_modified = record.last_modified
    if obs.changed is not None and record.last_fetched_at is not None:
        interval_days = (obs.fetched_at - record.last_fetched_at) / SECONDS_PER_DAY
        if interval_days > 0:
            history = history.observe(interval_days, obs.changed)
            lm_history, lm_evidence = observe_last_modified(
                record, obs.fetched_at, last_modified, interval_days, obs.changed
            )
            if obs.changed:
                start_days = record.last_fetched_at / SECONDS_PER_DAY
                end_days = obs.fetched_at / SECONDS_PER_DAY
                since_change = dated_change_days(
                    start_days, end_days, _days(last_modified), _days(record.last_modified)
                )
                if since_change is not None:
                    # A credible Last-Modified dates the change: the period detector gets a
                    # bracket of about a minute around it instead of the whole interval.
                    end_days -= since_change
                    start_days = max(start_days, end_days - DATED_BRACKET_DAYS)
                brackets = (*brackets, start_days, end_days)[-2 * MAX_CHANGE_BRACKETS :]
                if _period_test_due(record.change_count + 1):
                    periodic = detect_update_clock(brackets)
    return replace_record(
        record, state=UrlState.ACTIVE, last_fetched_at=obs.fetched_at, last_status=obs.status,
        last_simhash=obs.simhash, last_content_hash=obs.content_hash, last_text_hash=obs.text_hash,
        fingerprint_region=record.region.key if obs.outcome == OK else record.fingerprint_region,
        etag=result.etag if obs.outcome == OK else (result.etag or record.etag),
        last_modified=last_modified, fetch_count=record.fetch_count + 1,
        change_count=record.change_count + (1 if obs.changed else 0), consecutive_failures=0,
        history=history, change_brackets_days=brackets, periodic=periodic,
        last_modified_history=lm_history, last_modified_evidence_days=lm_evidence,
    )


def _without_content(
    record: UrlRecord, obs: Observation, state: UrlState, *, consecutive_failures: int
) -> UrlRecord:
    """The URL after a fetch that brought no content: counted, its status kept, its history
    untouched."""
    return replace_record(
        record, state=state, last_status=obs.status, fetch_count=record.fetch_count + 1,
        consecutive_failures=consecutive_failures,
    )


def _days(posix_seconds: float | None) -> float | None:
    return None if posix_seconds is None else posix_seconds / SECONDS_PER_DAY


def _period_test_due(change_count: int) -> bool:
    """Whether to re-test for an update clock at this change: every 8th change up to 64,
    then every 32nd. Each test costs milliseconds; the model in between is kept."""
    if change_count < MIN_CHANGES_FOR_PERIOD:
        return False
    return change_count % (8 if change_count <= 64 else 32) == 0


def detect_update_clock(brackets_days: tuple[float, ...]) -> PeriodicModel | None:
    """A regular update period (1 h, 1 d, 1 w) from the change brackets, when the evidence
    is strong enough (crawler.core.periodic's test); None for a Poisson-looking page.

    Consecutive fetch intervals tile time, so the gap between one changed bracket and the
    next is where fetches saw no change: those gaps are the unchanged evidence that refutes
    a period the page does not keep (docs/MODEL.md section 3.1).
    """
    pairs = list(zip(brackets_days[::2], brackets_days[1::2], strict=True))
    if len(pairs) < MIN_CHANGES_FOR_PERIOD:
        return None
    gaps = [(end, start) for (_, end), (start, _) in pairwise(pairs) if start > end]
    return detect_period_from_intervals(pairs, gaps, min_events=MIN_CHANGES_FOR_PERIOD)
