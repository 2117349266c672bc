"""Plain data passed between the edge (database, HTTP) and the pure core.

Times are POSIX seconds (floats) here; the estimator and planner work in days, and the
conversion happens once, in ``crawler.core.observe`` and ``crawler.core.schedule``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

from crawler.core.estimate import ChangeHistory, LastModifiedHistory
from crawler.core.periodic import PeriodicModel
from crawler.core.region import WHOLE_PAGE, Region

SECONDS_PER_DAY = 86400.0



class Outcome(StrEnum):
    """What one fetch came to: recorded per observation and counted in metrics."""

    OK = "ok"
    NOT_MODIFIED = "not_modified"
    GONE = "gone"
    HTTP_ERROR = "http_error"
    NETWORK_ERROR = "network_error"
    TIMEOUT = "timeout"
    REDIRECT = "redirect"
    DISALLOWED = "disallowed"  # robots.txt forbids it: recorded, not requested
    BLOCKED = "blocked"  # refused before connecting (SSRF protection, bad scheme, URL too long)


class UrlState(StrEnum):
    """A URL's lifecycle state (``urls.state``; the table's CHECK constraint lists the same)."""

    NEW = "new"
    ACTIVE = "active"
    GONE = "gone"
    ERROR = "error"
    REDIRECTED = "redirected"
    DISALLOWED = "disallowed"


# Short names for the outcomes (the same enumeration members, not copies).
OK = Outcome.OK
NOT_MODIFIED = Outcome.NOT_MODIFIED
GONE = Outcome.GONE
HTTP_ERROR = Outcome.HTTP_ERROR
NETWORK_ERROR = Outcome.NETWORK_ERROR
TIMEOUT = Outcome.TIMEOUT
REDIRECT = Outcome.REDIRECT
DISALLOWED = Outcome.DISALLOWED
BLOCKED = Outcome.BLOCKED

CONTENT_OUTCOMES = frozenset({Outcome.OK, Outcome.NOT_MODIFIED})


@dataclass(frozen=True, slots=True)
class UrlRecord:
    """What the daemon knows about a URL when it fetches it (a row of ``urls``)."""

    url_id: int
    url: str
    host_id: int = 0
    state: UrlState = UrlState.NEW
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
    # Cho & Garcia-Molina's Last-Modified statistics, and the recent (Last-Modified, fetched
    # at) pairs, flattened, in POSIX days, that decide whether to believe them.
    last_modified_history: LastModifiedHistory = field(default_factory=LastModifiedHistory)
    last_modified_evidence_days: tuple[float, ...] = ()
    # The region whose text is fingerprinted (the URL's, else its site's), and the key of the
    # region ``last_simhash`` was computed under (crawler.core.region.Region.key).
    region: Region = WHOLE_PAGE
    fingerprint_region: str = ""
    # Whether the out-links were read since the URL joined its site (``site_id``): a page
    # crawled before it joined a window must be fetched whole and parsed once, whatever its
    # validators and content hash say, or its links are never read.
    out_links_read: bool = False
    # ``crawler watch --exact``: any change of the region's visible text is a change (numbers
    # included), judged by ``last_text_hash``, the hash of that text as last fetched (None
    # when it was not taken: a URL fingerprinted while it was not watched exactly).
    exact: bool = False
    last_text_hash: bytes | None = None
    # ``crawler bound``: the watcher's own shortest and longest interval (seconds, None: the
    # crawler's setting) and weekly windows when fetching is allowed (crawler.core.url_bounds).
    own_min_interval_seconds: float | None = None
    own_max_interval_seconds: float | None = None
    fetch_windows: str = ""

    @property
    def out_links_unread(self) -> bool:
        """A window page whose links were not read since it joined: fetch it whole, parse it."""
        return self.site_id is not None and not self.out_links_read


_RECORD_FIELDS = tuple(f.name for f in fields(UrlRecord))
# The slots' own setters: what the frozen __init__ reaches through object.__setattr__.
_RECORD_SETTERS = {name: getattr(UrlRecord, name).__set__ for name in _RECORD_FIELDS}
_KEEP = object()


def _compile(name: str, signature: str, value: str, doc: str) -> Callable[..., UrlRecord]:
    """A function ``name(signature)`` written out for UrlRecord's fields, as dataclasses
    writes __init__: a new record and one slot setter call per field, giving it ``value``
    (an expression of the field's name ``{n}``), with no loop and no dict to walk.
    UrlRecord has no ``__post_init__``, so filling the slots directly builds the very value
    its ``__init__`` would (tests/unit/test_model.py compares them field by field)."""
    source = "\n".join(
        [
            f"def {name}({signature}):",
            "    made = _new(_UrlRecord)",
            *(f"    _set_{n}(made, {value.format(n=n)})" for n in _RECORD_FIELDS),
            "    return made",
        ]
    )
    namespace: dict[str, Any] = {"_KEEP": _KEEP, "_new": object.__new__, "_UrlRecord": UrlRecord}
    namespace.update({f"_set_{field}": setter for field, setter in _RECORD_SETTERS.items()})
    exec(source, namespace)
    function: Callable[..., UrlRecord] = namespace[name]
    function.__module__ = __name__
    function.__doc__ = doc
    return function


replace_record = _compile(
    "replace_record",
    f"record, /, *, {', '.join(f'{n}=_KEEP' for n in _RECORD_FIELDS)}",
    "record.{n} if {n} is _KEEP else {n}",
    """``dataclasses.replace(record, **changes)`` at a fraction of the cost.

    Every fetch copies its record (``crawler.core.observe.updated_record``), and the simulator
    replays millions of fetches: ``replace`` spends ~15 us a copy on UrlRecord's 25 fields
    here, this ~4 us. An unknown field is a TypeError, as for any unexpected keyword.
    """,
)

new_record = _compile(
    "new_record",
    f"{', '.join(_RECORD_FIELDS)}, /",
    "{n}",
    """``UrlRecord(*values)`` with every field given, in declaration order.

    A claim builds one record per due URL, thousands a second: the frozen ``__init__`` goes
    through ``object.__setattr__`` for each of the 25 fields and builds the default
    histories only to replace them (2.9 us with two arguments, 1.7 us with all here); this
    fills the slots directly.
    """,
)




@dataclass(frozen=True, slots=True)
class Exchange:
    """One redirect answer (3xx) as received: stored as its own WARC record under ``url``,
    the URI actually requested, so that an archive never shows the target's content there."""

    url: str  # the URI requested at this hop
    status: int
    reason: str
    headers: tuple[tuple[str, str], ...]
    location: str  # the absolute target (Location resolved against ``url``)
    body: bytes = b""  # decoded (Content-Encoding undone), capped like any body
    wire_body: bytes | None = None  # as received, when an encoding was undone
    truncated: bool = False
    # The request as sent (target and headers in wire order) and the answer's HTTP version.
    request_target: str = ""
    request_headers: tuple[tuple[str, str], ...] = ()
    http_version: str = "1.1"


@dataclass(frozen=True, slots=True)
class FetchResult:
    """What one request returned, before any interpretation."""

    fetched_at: float
    duration_seconds: float
    outcome: Outcome
    status: int | None = None
    body: bytes = b""
    content_type: str | None = None
    etag: str | None = None
    last_modified: float | None = None
    error_kind: str | None = None
    truncated: bool = False
    redirect_to: str | None = None
    retry_after_seconds: float | None = None
    # The final response's reason phrase and headers, as received (stored in the WARC record).
    reason: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    # The entity body as received, Content-Encoding still applied (what a WARC response
    # record stores); None when ``body`` is exactly that (no encoding) or was cut short.
    wire_body: bytes | None = None
    # The redirects followed, in order; the fields above are the final response's, from
    # ``final_url`` (None: the URL requested, when there was no redirect).
    redirects: tuple[Exchange, ...] = ()
    final_url: str | None = None
    # The final request as sent (target and headers in wire order) and the answer's HTTP
    # version, for the request and response records; empty when no request went out.
    request_target: str = ""
    request_headers: tuple[tuple[str, str], ...] = ()
    http_version: str = "1.1"

    @property
    def answered_status(self) -> int | None:
        """The status the URL requested answered with: its redirect's 3xx, if it had one."""
        return self.redirects[0].status if self.redirects else self.status


@dataclass(frozen=True, slots=True)
class Observation:
    """One row of ``observations``: what a fetch saw, compared with the previous version."""

    fetched_at: float
    outcome: Outcome
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
    # The hash of the visible text (crawler.core.fingerprint.text_hash), taken for a URL
    # watched exactly; kept on the URL's row, not in ``observations``.
    text_hash: bytes | None = None


@dataclass(frozen=True, slots=True)
class Schedule:
    """When to fetch a URL next, and the estimates behind that choice."""

    next_fetch_at: float
    change_rate_per_day: float | None = None
    fetch_rate_per_day: float | None = None
