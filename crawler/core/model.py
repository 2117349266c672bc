"""Plain data passed between the edge (database, HTTP) and the pure core.

Times are POSIX seconds (floats) here; the estimator and planner work in days, and the
conversion happens once, in ``crawler.core.observe`` and ``crawler.core.schedule``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from crawler.core.estimate import ChangeHistory
from crawler.core.periodic import PeriodicModel

SECONDS_PER_DAY = 86400.0

# Fetch outcomes, recorded per observation and counted in metrics.
OK = "ok"
NOT_MODIFIED = "not_modified"
GONE = "gone"
HTTP_ERROR = "http_error"
NETWORK_ERROR = "network_error"
TIMEOUT = "timeout"
REDIRECT = "redirect"
DISALLOWED = "disallowed"
BLOCKED = "blocked"  # refused before connecting (SSRF protection, bad scheme, URL too long)

CONTENT_OUTCOMES = frozenset({OK, NOT_MODIFIED})


@dataclass(frozen=True, slots=True)
class UrlRecord:
    """What the daemon knows about a URL when it fetches it (a row of ``urls``)."""

    url_id: int
    url: str
    host_id: int = 0
    state: str = "new"
    importance: float = 1.0
    last_fetched_at: float | None = None  # last fetch that observed content
    last_status: int | None = None
    last_simhash: int | None = None
    last_content_hash: bytes | None = None
    etag: str | None = None
    last_modified: float | None = None
    fetch_count: int = 0
    change_count: int = 0
    consecutive_failures: int = 0
    history: ChangeHistory = field(default_factory=ChangeHistory)
    change_rate_per_day: float | None = None
    # (start, end] of the newest intervals that saw a change, in POSIX days, flattened.
    change_brackets_days: tuple[float, ...] = ()
    periodic: PeriodicModel | None = None
    site_id: int | None = None  # set when the URL belongs to a windowed site
    depth: int | None = None


@dataclass(frozen=True, slots=True)
class FetchResult:
    """What one request returned, before any interpretation."""

    fetched_at: float
    duration_seconds: float
    outcome: str
    status: int | None = None
    body: bytes = b""
    content_type: str | None = None
    etag: str | None = None
    last_modified: float | None = None
    error_kind: str | None = None
    truncated: bool = False
    redirect_to: str | None = None
    retry_after_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class Observation:
    """One row of ``observations``: what a fetch saw, compared with the previous version."""

    fetched_at: float
    outcome: str
    status: int | None
    size_bytes: int
    duration_seconds: float
    simhash: int | None
    content_hash: bytes | None
    simhash_distance: int | None
    changed: bool | None
    content_changed: bool | None
    last_modified: float | None
    error_kind: str | None
    truncated: bool


@dataclass(frozen=True, slots=True)
class Schedule:
    """When to fetch a URL next, and the estimates behind that choice."""

    next_fetch_at: float
    change_rate_per_day: float | None = None
    fetch_rate_per_day: float | None = None
