"""Plain data passed between the edge (database, HTTP) and the pure core.

Times are POSIX seconds (floats) here; the estimator and planner work in days, and the
conversion happens once, in ``crawler.core.observe`` and ``crawler.core.schedule``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, NewType, TypeAlias

from crawler.core.estimate import ChangeHistory, LastModifiedHistory
from crawler.core.periodic import PeriodicModel
from crawler.core.region import WHOLE_PAGE, Region

try:
    from crawler.core import _speedups
except ImportError:  # built without a C compiler: dataclasses.replace gives the same records
    _speedups = None  # type: ignore[assignment]

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


class ErrorKind(StrEnum):
    """Why a fetch failed, was cut short or was not sent: recorded with its observation
    (``observations.error_kind``), on its host (``hosts.last_error_kind``) and in alerts, and
    a metric's label. The values are what those rows and dashboards hold. An error status is
    not a member but ``http_<status>`` (``http_error_kind``); the HTTP edge maps exceptions
    to members in one function (``crawler.net.fetch.failure_of``)."""

    # Time: the connection, the first byte, every later silence, the whole request.
    TIMEOUT_CONNECT = "timeout_connect"
    TIMEOUT_FIRST_BYTE = "timeout_first_byte"
    TIMEOUT_READ = "timeout_read"
    TIMEOUT_TOTAL = "timeout_total"
    # Size: the body was cut at the cap (a bomb: by an implausible compression ratio).
    TOO_LARGE = "too_large"
    DECOMPRESSION_BOMB = "decompression_bomb"
    # Protocol.
    BAD_STATUS_LINE = "bad_status_line"
    BAD_RESPONSE = "bad_response"
    BROKEN_BODY = "broken_body"
    BAD_ENCODING = "bad_encoding"
    UNSUPPORTED_ENCODING = "unsupported_encoding"
    SERVER_DISCONNECTED = "server_disconnected"
    # Redirects.
    TOO_MANY_REDIRECTS = "too_many_redirects"
    REDIRECT_LOOP = "redirect_loop"
    BAD_REDIRECT_SCHEME = "bad_redirect_scheme"
    # Addresses: refused before connecting.
    SSRF = "ssrf"
    URL_TOO_LONG = "url_too_long"
    BAD_URL = "bad_url"
    BAD_SCHEME = "bad_scheme"
    # Connecting.
    DNS = "dns"
    CONNECT_FAILED = "connect_failed"
    # TLS: which certificate check refused, or any other handshake failure.
    TLS_NOT_YET_VALID = "tls_not_yet_valid"
    TLS_EXPIRED = "tls_expired"
    TLS_SELF_SIGNED = "tls_self_signed"
    TLS_UNTRUSTED = "tls_untrusted"
    TLS_HOSTNAME_MISMATCH = "tls_hostname_mismatch"
    TLS_CERT_INVALID = "tls_cert_invalid"
    TLS_HANDSHAKE = "tls_handshake"
    # Any other network failure, by its exception's class (or nearest listed base class):
    # named so because stored rows and dashboards match on these names.
    CLIENT_OS_ERROR = "ClientOSError"
    CLIENT_CONNECTION_RESET = "ClientConnectionResetError"
    SERVER_CONNECTION_ERROR = "ServerConnectionError"
    CLIENT_CONNECTION_ERROR = "ClientConnectionError"
    CLIENT_ERROR = "ClientError"
    CONNECTION_RESET = "ConnectionResetError"
    BROKEN_PIPE = "BrokenPipeError"
    CONNECTION_ERROR = "ConnectionError"
    OS_ERROR = "OSError"
    # Content: a page the bounded parser refused (fingerprinted on its bytes alone).
    PARSE_ERROR = "parse_error"
    # Not requested: robots.txt forbids the URL.
    ROBOTS_TXT = "robots_txt"
    # Answered but not stored: the collection's fault (crawler.store.health), or any other
    # exception while recording.
    STORAGE_DISK_FULL = "storage_disk_full"
    STORAGE_READ_ONLY = "storage_read_only"
    STORAGE_DIRECTORY_GONE = "storage_directory_gone"
    STORAGE_IO_ERROR = "storage_io_error"
    STORAGE_ERROR = "storage_error"


# ``http_<status>``: an answer with an error status, named by it (any number a server sends).
HttpErrorKind = NewType("HttpErrorKind", str)
AnyErrorKind: TypeAlias = ErrorKind | HttpErrorKind


def http_error_kind(status: int) -> HttpErrorKind:
    return HttpErrorKind(f"http_{status}")


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
    # Whether the URL had change hints when claimed (its fetch then tests them,
    # crawler.db.hints); None when the claim did not say (the record looks it up).
    hinted: bool | None = None

    @property
    def out_links_unread(self) -> bool:
        """A window page whose links were not read since it joined: fetch it whole, parse it."""
        return self.site_id is not None and not self.out_links_read


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
    error_kind: AnyErrorKind | None = None
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


def copies_by_slots(cls: type) -> bool:
    """Whether ``_speedups.replace_slots`` makes exactly the instance ``dataclasses.replace``
    would: a dataclass keeping every field, and nothing else, in slots of its own, whose
    ``__init__`` only stores its arguments (no ``__post_init__``, no ``init=False`` field)."""
    if not dataclasses.is_dataclass(cls) or cls.__bases__ != (object,):
        return False
    fields = dataclasses.fields(cls)
    return (
        set(cls.__dict__.get("__slots__", ())) == {f.name for f in fields}
        and all(f.init for f in fields)
        and not hasattr(cls, "__post_init__")
    )


# ``replace_record(record, **changes)``: dataclasses.replace for a UrlRecord or a FetchResult,
# in C when it can be: every fetch copies its record twice, and dataclasses.replace sets each of
# 20 to 33 fields through object.__setattr__ (the simulator's largest single cost). A caller
# imports dataclasses.replace under this name when type checking, so that mypy checks the
# changes field by field.
if TYPE_CHECKING:
    replace_record = dataclasses.replace
elif _speedups is not None and all(map(copies_by_slots, (UrlRecord, FetchResult))):
    replace_record = _speedups.replace_slots
else:
    replace_record = dataclasses.replace


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
    error_kind: AnyErrorKind | None
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
