"""IndexNow pings: the protocol's requests read and checked, and the receiver's
per-host state, pure (no I/O, no clock: every time is an argument).

The protocol (indexnow.org/documentation): one URL by ``GET /indexnow?url=URL&key=KEY
[&keyLocation=URL]``, up to 10,000 by ``POST /indexnow`` with a JSON body. The site proves
it owns the host by serving a UTF-8 text file holding the key, at ``{host}/{key}.txt`` or at
``keyLocation`` on the same host (then only URLs under that file's folder may be submitted
with it). Answers: 200, 202 (key validation pending), 400 (invalid format), 403 (key not
valid), 422 (URLs off the host, or a key not of the protocol's form), 429 (potential spam).

What this receiver adds, and why:

- A host is ``name[:port]`` as normalised URLs spell it, so that a site on a non-default port
  (or on loopback, in tests) can be pinged; the key file is read from the origin of
  ``keyLocation``, else of the first URL: the crawler's host, whose politeness the key check
  obeys.
- A host the collection does not hold is refused with 403, not 422: the request is
  well-formed (422 would send the sender looking for a mistake in its URLs), but this
  receiver refuses to act for that host, before any request to it.
- Floods are cut per host by a token bucket (``take``), before the database or the network
  is asked anything; the 429 carries when the next token comes (``Retry-After``).
- A key file is fetched at most once per host per ``check_interval``, whatever the key, and a
  key found valid is trusted for ``valid_for`` (``key_verdict``, ``key_checked``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final, Literal
from urllib.parse import urlsplit

from crawler.core.hostid import origin_of
from crawler.core.links import DEFAULT_PORTS, normalize_url

MAX_URLS: Final = 10_000  # indexnow.org: "You can submit up to 10,000 URLs per post"
KEY_PATTERN: Final = re.compile(r"[A-Za-z0-9-]{8,128}")
# A key file holds the key and nothing else: a few bytes more than the longest key (a byte
# order mark, a line break) are read, anything longer is not a key file.
KEY_FILE_MAX_BYTES: Final = 1024
# The source of the hints a ping leaves in url_hints.
HINT_SOURCE: Final = "indexnow"

# Outcomes, the label of crawler_indexnow_pings_total, and the status each is answered with:
# the protocol's answers (see the module), and 503, not the protocol's, when the receiver
# cannot answer now (database away, shutting down).
OUTCOME_STATUS: Final[Mapping[str, int]] = {
    "accepted": 200,
    "pending": 202,
    "invalid": 400,
    "wrong_key": 403,
    "unknown_host": 403,
    "outside_host": 422,
    "bad_key": 422,
    "rate_limited": 429,
    "unavailable": 503,
}

# A host as a ping may name it: no path, query, fragment, credentials or white space.
_HOST_TEXT: Final = re.compile(r"[^/?#@\s\\]{1,260}")


@dataclass(frozen=True, slots=True)
class Ping:
    """A well-formed ping: the host (``name[:port]``), the key, ``keyLocation`` and the URLs
    (normalised, each once, in order)."""

    host: str
    key: str
    key_location: str | None
    urls: tuple[str, ...]

    @property
    def key_url(self) -> str:
        """Where the key file is read: ``keyLocation``, else ``{key}.txt`` at the root of the
        first URL's origin."""
        return self.key_location or f"{origin_of(self.urls[0])}/{self.key}.txt"

    @property
    def key_origin(self) -> str:
        """The origin (the crawler's host) whose politeness the key check obeys, and the key
        of the receiver's per-host state."""
        return origin_of(self.key_url)


@dataclass(frozen=True, slots=True)
class Refusal:
    """A ping not acted on: its outcome (``OUTCOME_STATUS``) and why, in one line."""

    outcome: str
    reason: str

    @property
    def status(self) -> int:
        return OUTCOME_STATUS[self.outcome]


def _invalid(reason: str) -> Refusal:
    return Refusal("invalid", reason)


def url_host(url: str) -> str:
    """``name[:port]`` of a normalised URL (the default port is never spelt there)."""
    return url.split("://", 1)[1].split("/", 1)[0]


def _host_port(host: str) -> tuple[str, int | None] | None:
    """The name of ``host`` as normalisation spells it, and the port it gives (None when it
    gives none); None if it is no host."""
    if not _HOST_TEXT.fullmatch(host):
        return None
    normal = normalize_url(f"http://{host}/")
    if normal is None:
        return None
    return urlsplit(normal).hostname or "", urlsplit(f"http://{host}/").port


def belongs(url: str, host: str) -> bool:
    """Whether normalised ``url`` is on ``host`` (``name`` or ``name:port``): the same name,
    on the port given, or on its scheme's default port when none is (``h:443`` is
    ``https://h/``; ``h`` is not ``http://h:8080/``)."""
    wanted = _host_port(host)
    if wanted is None:
        return False
    name, port = wanted
    parts = urlsplit(url)
    if parts.hostname != name:
        return False
    if port is None:
        return parts.port is None
    return (parts.port or DEFAULT_PORTS.get(parts.scheme)) == port


def _folder(url: str) -> str:
    """A key file's folder without its scheme: what the URLs it covers start with (the
    protocol allows http and https URLs under one key)."""
    rest = url.split("://", 1)[1].split("?", 1)[0]
    return rest.rsplit("/", 1)[0] + "/"


def check(host: str, key: str, key_location: str | None, urls: list[str]) -> Ping | Refusal:
    """The ping, or why it is refused: a malformed URL, host or key location is 400; a key
    not of the protocol's form and URLs off the host (or outside the key file's folder) 422."""
    if not urls:
        return _invalid("no URL given")
    if len(urls) > MAX_URLS:
        return _invalid(f"{len(urls)} URLs; at most {MAX_URLS} per request")
    normal: dict[str, None] = {}
    for text in urls:
        url = normalize_url(text)
        if url is None:
            return _invalid(f"not an http(s) URL: {text[:200]!r}")
        normal[url] = None
    if _host_port(host) is None:
        return _invalid(f"not a host: {host[:200]!r}")
    location = None
    if key_location is not None:
        location = normalize_url(key_location)
        if location is None:
            return _invalid(f"keyLocation is not an http(s) URL: {key_location[:200]!r}")
    if not KEY_PATTERN.fullmatch(key):
        return Refusal("bad_key", "the key must be 8 to 128 characters of a-z, A-Z, 0-9 "
                                  "and '-'")
    outside = [url for url in normal if not belongs(url, host)]
    if outside:
        return Refusal("outside_host", f"{len(outside)} URLs not on host {host}, such as "
                                       f"{outside[0][:200]}")
    if location is not None:
        if not belongs(location, host):
            return Refusal("outside_host", f"keyLocation {location[:200]} is not on host {host}")
        folder = _folder(location)
        under = [url for url in normal if not url.split("://", 1)[1].startswith(folder)]
        if under:
            return Refusal("outside_host", f"{len(under)} URLs not under the key file's "
                                           f"folder {folder}, such as {under[0][:200]}")
    return Ping(host, key, location, tuple(normal))


def read_get(params: Mapping[str, str]) -> Ping | Refusal:
    """``GET /indexnow?url=...&key=...[&keyLocation=...]``: one URL, on its own host."""
    url, key = params.get("url"), params.get("key")
    if not url or key is None:
        return _invalid("url and key are required")
    normal = normalize_url(url)
    if normal is None:
        return _invalid(f"not an http(s) URL: {url[:200]!r}")
    return check(url_host(normal), key, params.get("keyLocation"), [url])


def read_post(body: bytes) -> Ping | Refusal:
    """``POST /indexnow``: a JSON object with host, key, urlList and an optional keyLocation."""
    try:
        data = json.loads(body.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        return _invalid(f"not JSON: {error}")
    if not isinstance(data, dict):
        return _invalid("the body must be a JSON object")
    host, key, urls = data.get("host"), data.get("key"), data.get("urlList")
    location = data.get("keyLocation")
    if not isinstance(host, str) or not isinstance(key, str):
        return _invalid("host and key are required, as strings")
    if not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
        return _invalid("urlList must be a list of URLs")
    if location is not None and not isinstance(location, str):
        return _invalid("keyLocation must be a URL")
    return check(host, key, location, urls)


def key_file_matches(body: bytes, key: str) -> bool:
    """Whether a key file's body is the key: UTF-8 (a byte order mark allowed), the key and
    nothing else but surrounding white space (a final line break)."""
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError:
        return False
    return text.strip() == key


# --- the receiver's per-host state -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Bucket:
    """A host's token bucket: ``tokens`` left at time ``at``."""

    tokens: float
    at: float


def refilled(bucket: Bucket | None, now: float, *, per_second: float, burst: float) -> float:
    """The tokens ``bucket`` holds at ``now`` (a host never seen has a full bucket)."""
    if bucket is None:
        return burst
    return min(burst, bucket.tokens + max(0.0, now - bucket.at) * per_second)


def take(
    bucket: Bucket | None, now: float, *, per_second: float, burst: float
) -> tuple[bool, Bucket]:
    """One ping of a host at ``now``: whether it may go on, and the host's bucket after it.
    A refused ping takes nothing, so a flood is refused as long as it lasts and no longer."""
    tokens = refilled(bucket, now, per_second=per_second, burst=burst)
    if tokens >= 1.0:
        return True, Bucket(tokens - 1.0, now)
    return False, Bucket(tokens, now)


def retry_after(bucket: Bucket, now: float, *, per_second: float, burst: float) -> float:
    """Seconds until ``bucket`` holds a token again (0 when it does)."""
    tokens = refilled(bucket, now, per_second=per_second, burst=burst)
    return 0.0 if tokens >= 1.0 else (1.0 - tokens) / per_second


def idle(bucket: Bucket, now: float, *, per_second: float, burst: float) -> bool:
    """Whether ``bucket`` is full again: the same as no bucket, so it may be forgotten."""
    return refilled(bucket, now, per_second=per_second, burst=burst) >= burst


NEVER: Final = float("-inf")


@dataclass(frozen=True, slots=True)
class KeyState:
    """A host's key (with its file's URL) last found valid, until when it is trusted, and
    when the host's key file was last fetched for any other key."""

    verified: tuple[str, str] | None = None
    verified_until: float = NEVER
    checked_at: float = NEVER


KeyVerdict = Literal["valid", "check", "refuse"]


def key_verdict(
    state: KeyState | None, key: str, key_url: str, now: float, *, check_interval: float
) -> KeyVerdict:
    """What a ping with ``key`` (its file at ``key_url``) needs: nothing (``valid``: verified
    and still trusted), a fetch of the key file (``check``), or a refusal without one
    (``refuse``: not verified, and the host's key file was fetched less than
    ``check_interval`` ago, so a flood of wrong keys costs one fetch per interval). The key
    last verified is checked again once its trust lapses, whatever other keys were tried
    meanwhile: a wrong key sent now and then cannot lock the site's own key out."""
    if state is None:
        return "check"
    if state.verified == (key, key_url):
        return "valid" if now < state.verified_until else "check"
    return "check" if now - state.checked_at >= check_interval else "refuse"


def key_check_started(state: KeyState | None, now: float) -> KeyState:
    """A fetch of the host's key file starts at ``now``: other keys wait for the interval."""
    return replace(state or KeyState(), checked_at=now)


def key_checked(
    state: KeyState | None, key: str, key_url: str, valid: bool, now: float, *,
    valid_for: float,
) -> KeyState:
    """The host's state once its key file was read at ``now``: a valid key is trusted for
    ``valid_for``; a key the file no longer confirms is forgotten."""
    state = state or KeyState()
    if valid:
        return KeyState((key, key_url), now + valid_for, state.checked_at)
    if state.verified == (key, key_url):
        return KeyState(None, NEVER, state.checked_at)
    return state


def due_after_ping(now: float) -> float:
    """When a URL named by a ping with a verified key is due: now, so that it is fetched as
    soon as its host's politeness allows. The one place where trust in a site's pings would
    gate their effect."""
    return now
