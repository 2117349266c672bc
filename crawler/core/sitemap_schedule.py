"""When to read a sitemap or feed again: a sitemap is a page whose change rate is estimated.

Each read of a file is one observation of the page model (docs/MODEL.md section 2): it
changed when the listing it gives (every URL with its dates, in order: ``listing_digest``)
differs from the last one read, and not when it is the same listing or the server answered
304 to the conditional GET. The observation goes through the very functions a page's fetch
goes through (``crawler.core.observe.updated_record`` for the change history and
``crawler.core.schedule.next_fetch`` for the next time), under the plan in force, so a file
that changes hourly is read about hourly and one that never changes is read ever more
rarely, at least every ``max_interval_seconds``: a sitemap is how a site says it has new
pages, so it is never left for the page schedule's longest interval. Failures back off as a
page's do; a file robots.txt disallows is looked at again when robots.txt is next fetched.

Clocked update detection is off for these files: their changes are a site's publications,
which the Poisson estimate follows, and the detector needs change brackets kept per file.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from crawler.core.estimate import ChangeHistory
from crawler.core.model import (
    CONTENT_OUTCOMES,
    OK,
    FetchResult,
    Observation,
    Outcome,
    Schedule,
    UrlRecord,
    UrlState,
)
from crawler.core.observe import updated_record
from crawler.core.schedule import SchedulePolicy, next_fetch
from crawler.core.sitemaps import Entry


@dataclass(frozen=True, slots=True)
class SitemapState:
    """What the schedule knows of one file (its ``sitemaps`` row): the last read that got
    an answer with content or a 304 (``answered_at``, the start of the next interval), the
    digest of the listing it gave, and the change statistics."""

    host_id: int
    answered_at: float | None = None
    digest: bytes | None = None
    reads: int = 0
    changes: int = 0
    consecutive_failures: int = 0
    history: ChangeHistory = field(default_factory=ChangeHistory)
    change_rate_per_day: float | None = None
    etag: str | None = None
    last_modified: float | None = None


@dataclass(frozen=True, slots=True)
class SitemapRead:
    """One read as the schedule sees it: when it ended, what it came to, and the digest of
    the listing it gave (None without content: a 304, a failure)."""

    fetched_at: float
    outcome: Outcome
    status: int | None = None
    digest: bytes | None = None
    etag: str | None = None
    last_modified: float | None = None


@dataclass(frozen=True, slots=True)
class AfterRead:
    """The file's state after a read, whether the read saw a change (None: the first read,
    or no answer), and the next read's time and the rates behind it."""

    state: SitemapState
    changed: bool | None
    schedule: Schedule


def listing_digest(entries: Iterable[Entry]) -> bytes:
    """A digest of what a file lists, in order: each URL with the dates it claims. The
    file's other bytes (white space, a generator's timestamp comment, the order of
    attributes) are no change of the listing."""
    digest = hashlib.blake2b(digest_size=16)
    for entry in entries:
        digest.update(entry.url.encode("utf-8", "surrogatepass"))
        for hint in entry.hints:
            digest.update(b"\0" + hint.kind.encode() + struct.pack("<d", hint.claimed))
        digest.update(b"\n")
    return digest.digest()


def _record(state: SitemapState, max_interval_seconds: float) -> UrlRecord:
    """The file as the page model's record: its statistics, and its longest interval as its
    own bound (``crawler bound``'s field, which every outcome's schedule is held to)."""
    return UrlRecord(
        url_id=0, url="", host_id=state.host_id,
        state=UrlState.ACTIVE if state.answered_at is not None else UrlState.NEW,
        last_fetched_at=state.answered_at, last_content_hash=state.digest, etag=state.etag,
        last_modified=state.last_modified, fetch_count=state.reads, change_count=state.changes,
        consecutive_failures=state.consecutive_failures, history=state.history,
        change_rate_per_day=state.change_rate_per_day,
        own_max_interval_seconds=max_interval_seconds,
    )


def after_read(
    state: SitemapState, read: SitemapRead, policy: SchedulePolicy, *,
    max_interval_seconds: float, robots_expires_at: float | None = None,
) -> AfterRead:
    """The file's state after ``read`` and when to read it next."""
    changed: bool | None = None
    digest = read.digest
    if read.outcome == Outcome.NOT_MODIFIED:
        digest = state.digest
        changed = False if state.answered_at is not None else None
    elif read.outcome == OK and state.digest is not None:
        changed = digest != state.digest
    content = read.outcome in CONTENT_OUTCOMES
    result = FetchResult(
        fetched_at=read.fetched_at, duration_seconds=0.0, outcome=read.outcome,
        status=read.status, etag=read.etag, last_modified=read.last_modified,
    )
    obs = Observation(
        fetched_at=read.fetched_at, outcome=read.outcome, status=read.status, size_bytes=0,
        duration_seconds=0.0, simhash=None, content_hash=digest if content else None,
        simhash_distance=None, changed=changed, content_changed=changed,
        last_modified=read.last_modified, error_kind=None, truncated=False,
    )
    after = updated_record(_record(state, max_interval_seconds), result, obs)
    timeless = policy.settings.model_copy(update={"detect_periods": False})
    schedule = next_fetch(after, obs, replace(policy, settings=timeless),
                          robots_expires_at=robots_expires_at)
    rate = schedule.change_rate_per_day
    new_state = SitemapState(
        host_id=state.host_id, answered_at=after.last_fetched_at,
        digest=after.last_content_hash if content else state.digest, reads=after.fetch_count,
        changes=after.change_count, consecutive_failures=after.consecutive_failures,
        history=after.history,
        change_rate_per_day=rate if rate is not None else state.change_rate_per_day,
        etag=after.etag if content else state.etag,
        last_modified=after.last_modified if content else state.last_modified,
    )
    return AfterRead(new_state, changed, schedule)
