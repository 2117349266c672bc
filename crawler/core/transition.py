"""One fetch's whole effect, as one frozen value: the pure transition the worker records.

The daemon's worker calls ``transition`` on every path (a fetched page, a URL robots.txt
forbids, a permanent redirect) and hands the value to ``crawler.db.record.write_transition``,
which commits all of it in one transaction. The simulator calls the same function for each
simulated fetch, so both decide the same way from the same record, result and time.

Pure: no clock, no randomness, no I/O. ``now`` and ``rng_value`` are inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from crawler.core.backoff import HostHealth, health_after, host_verdict
from crawler.core.bounds import parse_bounded
from crawler.core.extract import ParsedPage
from crawler.core.fingerprint import content_hash
from crawler.core.links import is_trap, normalize_url, resolve_feeds, site_of
from crawler.core.model import (
    CONTENT_OUTCOMES,
    ErrorKind,
    FetchResult,
    Observation,
    Outcome,
    Schedule,
    UrlRecord,
    UrlState,
)
from crawler.core.observe import (
    as_permanent_redirect,
    observe,
    same_fingerprinted_bytes,
    updated_record,
)
from crawler.core.patterns import UrlFilter
from crawler.core.schedule import SchedulePolicy, next_fetch

if TYPE_CHECKING:  # the core reads the settings it is handed, never the environment
    from crawler.settings import Settings

if TYPE_CHECKING:  # checked field by field, as dataclasses.replace is
    from dataclasses import replace as replace_record
else:
    from crawler.core.model import replace_record


class ChangeKind(StrEnum):
    """Why a fetch produced a change event."""

    CHANGED = "changed"  # the content moved by at least the simhash threshold
    GONE = "gone"  # a live page answered 404/410
    BACK = "back"  # a gone page has content again


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """A change worth telling someone about (the change-event outbox, webhooks)."""

    url_id: int
    url: str
    fetched_at: float
    kind: ChangeKind
    previous_simhash: int | None
    new_simhash: int | None
    distance: int | None


@dataclass(frozen=True, slots=True)
class HostContext:
    """The leased host as the worker sees it just before recording a fetch."""

    health: HostHealth
    delay_seconds: float  # politeness delay between requests (Crawl-delay or the default)
    next_request_at: float  # the host's politeness clock before this fetch


@dataclass(frozen=True, slots=True)
class HostUpdate:
    """The ``hosts`` columns a fetch changes: politeness clock and backoff."""

    next_request_at: float
    consecutive_failures: int
    backoff_until: float | None


@dataclass(frozen=True, slots=True)
class WindowUpdate:
    """What a fetch of a windowed site's page tells the site's window."""

    site_id: int
    out_links: tuple[str, ...] | None  # None: the fetch saw no content, keep the old links
    state_changed: bool
    first_fetch: bool


@dataclass(frozen=True, slots=True)
class Transition:
    """Everything one fetch changes, written in one transaction."""

    before: UrlRecord
    record: UrlRecord  # the URL's row after the fetch, with the schedule's rate estimate
    observation: Observation
    schedule: Schedule
    host: HostUpdate
    redirect_to: str | None  # stored on the URL row
    seed: str | None  # a permanent redirect's target, seeded as a URL of its own
    window: WindowUpdate | None
    event: ChangeEvent | None
    # The page's visible text (its watched region's) as this fetch's parse extracted it: what
    # a change event diffs, so that the page is not parsed twice. None when it was not parsed.
    text: str | None = None
    # The feeds the page announces (absolute URLs): the edge registers them for the host's
    # sitemaps (crawler.daemon.sitemaps.page_feeds).
    feeds: tuple[str, ...] = ()

    @property
    def url_id(self) -> int:
        return self.record.url_id


def forbidden(now: float) -> FetchResult:
    """The result recorded for a URL robots.txt forbids: not requested, but a fetch."""
    return FetchResult(
        fetched_at=now, duration_seconds=0.0, outcome=Outcome.DISALLOWED,
        error_kind=ErrorKind.ROBOTS_TXT,
    )


def window_links(
    record: UrlRecord, page: ParsedPage, max_depth: int, url_filter: UrlFilter
) -> tuple[str, ...]:
    """The out-links that may join the page's window: same site, not traps, not too deep,
    passed by the global URL patterns (the site's own are applied where they are stored)."""
    if (record.depth or 0) + 1 > max_depth:
        return ()
    origin = site_of(record.url)
    return tuple(
        link.url for link in page.links
        if site_of(link.url) == origin and not is_trap(link.url)
        and url_filter.rejection(link.url) is None
    )


def change_event(before: UrlRecord, obs: Observation) -> ChangeEvent | None:
    """The event a fetch raises: a real change, a page gone, or a gone page back."""
    kind: ChangeKind | None = None
    if obs.outcome == Outcome.GONE and before.state != UrlState.GONE:
        kind = ChangeKind.GONE
    elif obs.outcome in CONTENT_OUTCOMES and before.state == UrlState.GONE:
        kind = ChangeKind.BACK
    elif obs.changed:
        kind = ChangeKind.CHANGED
    if kind is None:
        return None
    return ChangeEvent(
        before.url_id, before.url, obs.fetched_at, kind, previous_simhash=before.last_simhash,
        new_simhash=obs.simhash, distance=obs.simhash_distance,
    )


def host_update(
    host: HostContext, result: FetchResult, settings: Settings, *, now: float, rng_value: float
) -> HostUpdate:
    """The host's politeness clock and backoff after a request (none for a forbidden URL)."""
    if result.outcome == Outcome.DISALLOWED:
        health, next_request_at = host.health, host.next_request_at
    else:
        health = health_after(
            host.health, host_verdict(result), now, settings,
            retry_after_seconds=result.retry_after_seconds, rng_value=rng_value,
        )
        next_request_at = now + host.delay_seconds
    return HostUpdate(next_request_at, health.consecutive_failures, health.backoff_until)


def transition(
    record: UrlRecord,
    result: FetchResult,
    host: HostContext,
    policy: SchedulePolicy,
    *,
    url_filter: UrlFilter,
    now: float,
    rng_value: float,
    robots_expires_at: float | None = None,
) -> Transition:
    """Everything ``result`` changes for ``record``.

    - ``record``: the URL as claimed; ``result``: what the request returned, or
      ``forbidden(now)`` when robots.txt forbade it;
    - ``host``: the host's health and politeness before the fetch; ``policy``: the settings
      under the plan in force; ``url_filter``: CRAWLER_INCLUDE and CRAWLER_EXCLUDE, compiled
      once by the caller, applied to the links the page adds;
    - ``now``: POSIX seconds when the fetch ended (the politeness clock and backoff start
      there); ``rng_value`` in [0, 1): the backoff's jitter;
    - ``robots_expires_at``: when the host's robots.txt is next fetched (a forbidden URL is
      rechecked then).

    A permanent redirect followed to content is recorded on this URL as the redirect itself,
    and its target is returned in ``seed``. A temporary one keeps the content it led to as
    this URL's version; either way the observation's status is the 3xx the URL answered.
    """
    settings = policy.settings
    target = normalize_url(result.redirect_to) if result.redirect_to else None
    permanent = target is not None and result.outcome in CONTENT_OUTCOMES
    followed = normalize_url(result.redirects[0].location) if result.redirects else None
    if permanent:
        result = as_permanent_redirect(result)
    page = None
    exact = content_hash(result.body) if result.outcome == Outcome.OK else None
    same_bytes = not permanent and same_fingerprinted_bytes(record, result, exact)
    if not permanent and not same_bytes:
        # Bounded, never raises: a page the parser fails on is recorded with parse_error.
        result, page = parse_bounded(
            result, page_url=record.url if record.site_id is not None else None,
            max_links=settings.max_outlinks, region=record.region,
        )
    obs = observe(record, result, settings.simhash_threshold, page, same_bytes=same_bytes,
                  exact=exact)
    after = updated_record(record, result, obs)
    schedule = next_fetch(after, obs, policy, robots_expires_at=robots_expires_at)
    window = None
    if record.site_id is not None and not permanent:
        links: tuple[str, ...] | None = None
        if page is not None:
            links = window_links(record, page, settings.max_depth, url_filter)
        elif obs.outcome == Outcome.GONE:
            links = ()
        window = WindowUpdate(
            record.site_id, links, after.state != record.state, record.last_fetched_at is None
        )
    return Transition(
        before=record,
        record=replace_record(
            after, change_rate_per_day=schedule.change_rate_per_day,
            # A window page's body was examined for links (page_url given): read, even when
            # it held none, so that its next fetch is conditional again. A gone page's links
            # are dropped: unread again, so that the fetch finding it back reads them.
            out_links_read=(record.out_links_read and obs.outcome != Outcome.GONE)
            or (record.site_id is not None and not permanent and result.outcome == Outcome.OK),
        ),
        observation=obs,
        schedule=schedule,
        host=host_update(host, result, settings, now=now, rng_value=rng_value),
        # A temporary redirect's content is this URL's version, but the row says where the
        # URL pointed (as it shows the 3xx it answered).
        redirect_to=target if permanent else result.redirect_to or followed,
        # A permanent redirect's target is seeded only if the global URL patterns pass it.
        seed=target if permanent and url_filter.rejection(target or "") is None else None,
        window=window,
        event=change_event(record, obs),
        text=None if page is None else page.raw_text,
        feeds=resolve_feeds(record.url, page.feeds) if page is not None and page.feeds else (),
    )
