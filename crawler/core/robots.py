"""robots.txt as RFC 9309 defines it: what a fetch of it means, how long that holds, and
what it allows. Pure: no I/O, no clock (``now`` is a parameter); ``crawler.net.fetch.fetch_robots``
is the edge that produces a ``RobotsFetch``; ``crawler.core.robotstxt`` parses and matches.

The rules (RFC 9309, section 2.3.1 and 2.4):
- 2xx: the file's rules apply (at most the first 500 KiB are parsed);
- 4xx ("unavailable"): no restrictions, as if the file were empty;
- 5xx, 429, timeout, connection failure ("unreachable"): complete disallow, retried with a
  backoff that doubles with the time the host has been unreachable; after 30 days of
  unreachability the last good copy is used if there is one (else disallow continues:
  the RFC allows either, and a host failing for a month gains nothing from our traffic);
- more than 5 redirects or a redirect loop: unavailable (the RFC's MAY);
- an HTML error page served with status 200 is parsed like any file (the RFC says to parse
  what a 2xx returns): its lines are no directives, so it usually means "no restrictions".
A copy is cached for at most 24 hours.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from crawler.core import model, robotstxt
from crawler.core.model import AnyErrorKind, ErrorKind

ROBOTS_MAX_BYTES = 500 * 1024  # RFC 9309 section 2.5: parse at least 500 KiB
ROBOTS_CACHE_MAX_SECONDS = 86400.0  # RFC 9309 section 2.4: SHOULD NOT cache beyond 24 h
UNREACHABLE_GRACE_SECONDS = 30 * 86400.0  # RFC 9309 section 2.3.1.4
RETRY_MIN_SECONDS = 60.0

OK = "ok"
UNAVAILABLE = "unavailable"
UNREACHABLE = "unreachable"

# Policy modes.
RULES = "rules"
ALLOW_ALL = "allow_all"
DISALLOW_ALL = "disallow_all"

_PRODUCT_TOKEN = re.compile(r"[A-Za-z_-]+")
_BOM_PREFIXES = (b"\xef\xbb\xbf", b"\xef\xbb", b"\xef")
_UNAVAILABLE_KINDS = frozenset(
    {ErrorKind.TOO_MANY_REDIRECTS, ErrorKind.REDIRECT_LOOP, ErrorKind.BAD_REDIRECT_SCHEME})


@dataclass(frozen=True, slots=True)
class RobotsFetch:
    """What one request for /robots.txt returned, classified."""

    fetched_at: float
    outcome: str  # OK, UNAVAILABLE or UNREACHABLE
    status: int | None = None
    body: str = ""
    truncated: bool = False
    error_kind: AnyErrorKind | None = None
    retry_after_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class RobotsState:
    """A host's robots.txt knowledge; each field is a ``hosts`` column (robots_*), times in
    POSIX seconds. ``body`` is the last good copy (``""`` after a 4xx: no rules), kept through
    failures; ``unreachable_since`` is set while the last fetches failed; ``status`` is that of
    the last fetch (None when no response arrived)."""

    body: str | None
    status: int | None
    fetched_at: float
    good_at: float | None
    expires_at: float
    unreachable_since: float | None = None

    @property
    def mode(self) -> str:
        """RULES, ALLOW_ALL or DISALLOW_ALL, as decided at the last fetch."""
        if self.unreachable_since is not None:
            unreachable_seconds = self.fetched_at - self.unreachable_since
            if self.body is None or unreachable_seconds < UNREACHABLE_GRACE_SECONDS:
                return DISALLOW_ALL
        return RULES if self.body else ALLOW_ALL


def product_token(user_agent: str) -> str:
    """The product token of a User-Agent ("crawler/0.1 (+https://...)" -> "crawler"): the
    [a-zA-Z_-]+ that robots.txt groups name (RFC 9309 section 2.2.1)."""
    match = _PRODUCT_TOKEN.match(user_agent.strip())
    if match is None:
        raise ValueError(f"no product token in user agent {user_agent!r}")
    return match.group(0)


def robots_text(body: bytes, truncated: bool) -> str:
    """The text parsed: UTF-8 (RFC 9309 section 2.3), at most 500 KiB, whole lines only (a
    cut line is dropped: "Allow: /private-reports" cut to "Allow: /" would allow too much)."""
    body = body[:ROBOTS_MAX_BYTES]
    if truncated or len(body) == ROBOTS_MAX_BYTES:
        cut = max(body.rfind(b"\n"), body.rfind(b"\r"))
        body = body[: cut + 1] if cut >= 0 else b""
    # A byte-order mark, or what is left of one, before the first line is not part of it.
    for bom in _BOM_PREFIXES:
        if body.startswith(bom):
            body = body[len(bom):]
            break
    return body.decode("utf-8", errors="replace")


def robots_outcome(
    *,
    fetched_at: float,
    outcome: str,
    status: int | None,
    body: bytes,
    truncated: bool,
    error_kind: AnyErrorKind | None,
    retry_after_seconds: float | None,
) -> RobotsFetch:
    """Classify a fetch of /robots.txt (fields of a ``FetchResult``) per RFC 9309 2.3.1."""
    if outcome == model.OK:
        verdict = OK
    elif outcome == model.GONE or error_kind in _UNAVAILABLE_KINDS:
        verdict = UNAVAILABLE
    elif outcome == model.HTTP_ERROR and status is not None and 300 <= status < 500:
        verdict = UNREACHABLE if status == 429 else UNAVAILABLE
    else:
        # 5xx, 429, timeouts, connection failures, refused addresses, corrupt bodies.
        verdict = UNREACHABLE
    return RobotsFetch(
        fetched_at=fetched_at,
        outcome=verdict,
        status=status,
        body=robots_text(body, truncated) if verdict == OK else "",
        truncated=truncated,
        error_kind=error_kind,
        retry_after_seconds=retry_after_seconds,
    )


def decide_robots(
    previous: RobotsState | None,
    fetched: RobotsFetch,
    now: float,
    *,
    cache_seconds: float = ROBOTS_CACHE_MAX_SECONDS,
    retry_min_seconds: float = RETRY_MIN_SECONDS,
    retry_max_seconds: float = ROBOTS_CACHE_MAX_SECONDS,
) -> RobotsState:
    """The host's robots state after ``fetched``; ``expires_at`` is when to fetch it again."""
    cache_seconds = min(cache_seconds, ROBOTS_CACHE_MAX_SECONDS)
    if fetched.outcome in (OK, UNAVAILABLE):
        return RobotsState(
            body=fetched.body if fetched.outcome == OK else "",
            status=fetched.status,
            fetched_at=now,
            good_at=now,
            expires_at=now + cache_seconds,
        )
    since = now
    if previous is not None and previous.unreachable_since is not None:
        since = min(previous.unreachable_since, now)
    # Retry after as long as the host has been down (so the waits double), within bounds;
    # a Retry-After the server sent is honoured within the same cap.
    retry_seconds = min(max(retry_min_seconds, now - since), retry_max_seconds)
    if fetched.retry_after_seconds is not None:
        retry_seconds = max(retry_seconds, min(fetched.retry_after_seconds, retry_max_seconds))
    return RobotsState(
        body=previous.body if previous is not None else None,
        status=fetched.status,
        fetched_at=now,
        good_at=previous.good_at if previous is not None else None,
        expires_at=now + retry_seconds,
        unreachable_since=since,
    )


def needs_fetch(state: RobotsState | None, now: float) -> bool:
    """Whether robots.txt must be (re)fetched before the host's next page."""
    return state is None or now >= state.expires_at


def rules_changed(previous: RobotsState | None, current: RobotsState) -> bool:
    """Whether what robots.txt allows may have changed (disallowed URLs must be rechecked)."""
    return previous is None or previous.mode != current.mode or (
        current.mode == RULES and previous.body != current.body)


class RobotsPolicy:
    """What a host's robots.txt allows for one product token.

    Matching follows Google's conformance suite (``crawler.core.robotstxt``); on top of it, as
    RFC 9309 2.2.2 asks, /robots.txt itself is always allowed and the URL is percent-encoded
    as the patterns are. docs/ROBOTS.md lists the differences.
    """

    def __init__(self, mode: str, user_agent_token: str, body: str = "") -> None:
        self.mode = mode
        self.user_agent_token = user_agent_token
        self._rules = robotstxt.parse(body) if mode == RULES else None

    @classmethod
    def from_state(cls, state: RobotsState | None, user_agent_token: str) -> RobotsPolicy:
        """The policy in force; no state yet means robots.txt was never fetched: disallow."""
        if state is None:
            return cls(DISALLOW_ALL, user_agent_token)
        return cls(state.mode, user_agent_token, state.body or "")

    def allowed(self, url: str) -> bool:
        """Whether ``url`` may be fetched; /robots.txt itself always may (RFC 9309 2.2.2)."""
        try:
            path = urlsplit(url).path
        except ValueError:
            return False
        if path == "/robots.txt":
            return True
        if self.mode == DISALLOW_ALL:
            return False
        if self._rules is None:
            return True
        return self._rules.allowed(self.user_agent_token, robotstxt.escape_pattern(url))

    def crawl_delay(self, max_delay: float) -> tuple[float | None, bool]:
        """(Crawl-delay in seconds honoured, whether the file asked for more than max_delay);
        values that are not a finite non-negative number ("abc", -1) are ignored (None)."""
        if self._rules is None:
            return None, False
        delay = robotstxt.crawl_delay_seconds(self._rules.group_for(self.user_agent_token))
        if delay is None:
            return None, False
        return min(delay, max_delay), delay > max_delay
