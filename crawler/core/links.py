"""Out-links of a page and the URL normal form that makes one page one frontier row.

Pure: HTML (or an already parsed tree) in, normalised absolute URLs out.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from functools import lru_cache
from typing import Final, NamedTuple
from urllib.parse import SplitResult, unquote, urljoin, urlsplit, urlunsplit

from selectolax.lexbor import LexborHTMLParser
from w3lib.url import canonicalize_url

from crawler.core.ipv4 import parse_ipv4

MAX_URL_LENGTH: Final = 2083  # the historical Internet Explorer limit, the de facto maximum
DEFAULT_PORTS: Final = {"http": 80, "https": 443}
SESSION_ID_PARAMS: Final = frozenset({"jsessionid", "phpsessid", "sid", "sessionid"})
_SESSION_ID_PREFIX: Final = "aspsessionid"  # IIS appends random letters: ASPSESSIONIDQQGGGNCU
# ;jsessionid=... style path parameters (servlet containers rewrite URLs this way).
_PATH_SESSION_ID: Final = re.compile(
    r";(?:jsessionid|phpsessid|sessionid|sid|aspsessionid[a-z]*)=[^/;?#]*", re.IGNORECASE
)
# A percent-decoded host kept as the host: letters, digits, dots, hyphens (and underscores).
_ASCII_HOST: Final = re.compile(r"[A-Za-z0-9._-]+")
_HREF_JUNK: Final = str.maketrans("", "", "\t\n\r")  # browsers drop these inside URLs
_LINK_SELECTOR: Final = "a[href], area[href], link[href]"
# Elements examined per link kept, so a page of junk links (javascript:, duplicates) still
# ends the scan early.
_CANDIDATES_PER_LINK: Final = 10
# A page's feeds (<link rel="alternate" type=... href=...>): where a site announces them.
FEED_TYPES: Final = frozenset({"application/rss+xml", "application/atom+xml"})
MAX_FEEDS_PER_PAGE: Final = 8
_FEED_SELECTOR: Final = 'link[rel~="alternate"][type][href]'


class Link(NamedTuple):
    """An out-link: normalised absolute URL, and whether the page asked not to follow it
    (a NamedTuple: pages carry hundreds, and a tuple is cheaper to build than a dataclass)."""

    url: str
    nofollow: bool = False


def _is_session_param(pair: str) -> bool:
    name = pair.split("=", 1)[0].lower()
    return name in SESSION_ID_PARAMS or name.startswith(_SESSION_ID_PREFIX)


# The WHATWG URL Standard's forbidden domain code points: a host holding one, after its
# percent-encoding is undone, is no host (``http://a b/``, ``http://a%20b/``, ``http://a<b/``).
_FORBIDDEN_DOMAIN: Final = re.compile(r"[\x00-\x20#%/:<>?@\[\\\]^|\x7f]")


def _valid_domain(host: str) -> bool:
    """Whether ``host`` (lower case, IDNA-encoded, percent-decoded) is a valid WHATWG domain
    under beStrict: no forbidden code point, labels of 1 to 63 characters, at most 253 in all,
    one final root dot allowed. Browsers accept ``a..b``, but no such URL could be fetched."""
    if _FORBIDDEN_DOMAIN.search(host):
        return False
    name = host.removesuffix(".")
    return 0 < len(name) <= 253 and all(0 < len(label) <= 63 for label in name.split("."))


def _canonical_host(host: str) -> str:
    """The host as the WHATWG URL Standard's host parser leaves it: percent-encoding undone
    (when that leaves a plain ASCII name), an IPv4 spelling (``127.1``, ``0x7f.0.0.1``) as the
    dotted quad. ``ValueError`` for a host that ends in a number but is no address, or that
    is no valid domain."""
    if ":" in host:  # IPv6 literal
        return f"[{host}]"
    if "%" in host:
        decoded = unquote(host)
        if _ASCII_HOST.fullmatch(decoded):
            host = decoded.lower()
        elif _FORBIDDEN_DOMAIN.search(decoded.replace("%", "")):
            raise ValueError(f"forbidden code point in host {decoded!r}")
    address = parse_ipv4(host)
    if address is not None:
        return str(address)
    if not _valid_domain(host.replace("%", "") if "%" in host else host):
        raise ValueError(f"invalid host {host!r}")
    return host


def _without_default_port(parts: SplitResult) -> str:
    """host[:port], with the scheme's default port and any user:password@ removed, the host
    canonical (``_canonical_host``)."""
    host = _canonical_host(parts.hostname or "")
    port = parts.port  # raises ValueError on a malformed or out-of-range port
    return host if port is None or port == DEFAULT_PORTS.get(parts.scheme) else f"{host}:{port}"


# URLs already in normal form, in the plainest shape: lower-case http(s) scheme and ASCII host
# (letter-led last label, so no IP literal), an optional non-default port, a path and a query
# of unreserved characters only (nothing percent-encoded, no ;parameters), no fragment.
_PLAIN_URL: Final = re.compile(
    r"(https?)://((?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?)"
    r"(?::([1-9][0-9]{0,4}))?(/[A-Za-z0-9._~/-]*)(?:\?([A-Za-z0-9._~=&-]+))?"
)


def _already_normal(url: str) -> bool:
    """Whether ``url`` is its own normal form, decided without parsing it (`canonicalize_url`
    is slow). False means "not known to be": the full normalisation decides.
    tests/unit/test_links_fast_path.py holds the two to agreeing."""
    match = _PLAIN_URL.fullmatch(url)
    if match is None or len(url) > MAX_URL_LENGTH:
        return False
    scheme, host, port, path, query = match.groups()
    if len(host) > 253 or "--" in host or "/." in path or "//" in path:
        return False  # punycode and other IDNA subtleties, dot segments, empty segments
    if port is not None and (int(port) > 65_535 or int(port) == DEFAULT_PORTS[scheme]):
        return False
    if query is not None:  # key=value pairs, sorted as canonicalize_url sorts them
        previous = ("", "")
        for pair in query.split("&"):
            key, equals, value = pair.partition("=")
            if not key or not equals or "=" in value or (key, value) < previous:
                return False
            if _is_session_param(key):
                return False
            previous = (key, value)
    return True


def normalize_url(url: str) -> str | None:
    """The canonical form of an http(s) URL, or None when it is not one or is too long.

    Lower-case scheme and host, IDNA host, no default port, no credentials, normalised
    percent-encoding, no dot segments, "/" for an empty path, sorted query, no fragment (w3lib's
    `canonicalize_url`), then session-id query and ;path parameters removed, and an IPv4 host
    in any spelling the WHATWG URL Standard reads (``127.1``, ``0x7f.0.0.1``) as its dotted
    quad; a host that ends in a number but is no address is malformed. Idempotent.
    """
    if _already_normal(url):
        return url
    return _normalize(url)


@lru_cache(maxsize=65_536)
def _normalize(url: str) -> str | None:
    url = url.strip()
    if len(url) > MAX_URL_LENGTH:
        return None
    try:
        first = urlsplit(url)
        if first.scheme.lower() not in DEFAULT_PORTS or not first.hostname:
            return None
        parts = urlsplit(canonicalize_url(url))
        netloc = _without_default_port(parts)
    except ValueError:  # also UnicodeError: bad IDNA label, bad port, bad IPv6 literal
        return None
    if not netloc or parts.hostname is None:
        return None
    path = _PATH_SESSION_ID.sub("", parts.path) or "/"
    query = "&".join(
        pair for pair in parts.query.split("&") if pair and not _is_session_param(pair)
    )
    normalized = urlunsplit((parts.scheme, netloc, path, query, ""))
    return normalized if len(normalized) <= MAX_URL_LENGTH else None


def site_of(url: str) -> str:
    """scheme://host[:port] of a URL (lower case, default port dropped): the politeness key."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    try:
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        port = None
    if ":" in host:
        host = f"[{host}]"
    if port is not None and port != DEFAULT_PORTS.get(scheme):
        return f"{scheme}://{host}:{port}"
    return f"{scheme}://{host}"


def is_trap(
    url: str,
    max_depth_segments: int = 12,
    max_repeated_segment: int = 3,
    max_length: int = MAX_URL_LENGTH,
) -> bool:
    """Whether a URL looks like a crawler trap: too long, too deep, or a path segment repeated
    (calendars and relative-link loops produce /a/b/a/b/a/b/... and ever deeper paths)."""
    if len(url) > max_length:
        return True
    segments = [segment for segment in urlsplit(url).path.split("/") if segment]
    if len(segments) > max_depth_segments:
        return True
    return bool(segments) and max(Counter(segments).values()) > max_repeated_segment


@lru_cache(maxsize=65_536)
def _resolve(base_url: str, href: str) -> str | None:
    """Normalised absolute URL of a raw href attribute, None when it is not a link to follow.
    Cached: a site repeats its navigation links on every page (see ``_resolve_href``)."""
    href = href.strip().translate(_HREF_JUNK)
    if not href or href.startswith("#"):
        return None  # a jump within this page
    try:
        url = urljoin(base_url, href)
    except ValueError:  # e.g. a malformed IPv6 literal
        return None
    # Normalisation drops the fragment; without it "page.html#section" is often already normal.
    head, fragment, _ = url.partition("#")
    if fragment and _already_normal(head):
        return head
    return normalize_url(url)


# An href that is a relative path (no scheme, no ";" parameters, not starting with "/", "?"
# or "#") resolves against its base's directory alone, so every page of a directory shares
# ``_resolve``'s cache for their navigation links.
_PATH_RELATIVE: Final = re.compile(r"[A-Za-z0-9._~%+-][A-Za-z0-9._~%+/?=&#-]*")
# An absolute http(s) href of plain characters resolves to itself whatever the base.
_PLAIN_ABSOLUTE: Final = re.compile(r"https?://[A-Za-z0-9.-]+(?::[0-9]+)?(?:/[A-Za-z0-9._~%+/?=&#-]*)?")


def _directory_of(base_url: str) -> str:
    """scheme://netloc/dir/ of a base URL: all a path-relative href is resolved against."""
    try:
        parts = urlsplit(base_url)
    except ValueError:
        return base_url
    path = parts.path[: parts.path.rfind("/") + 1]
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _resolve_href(base_url: str, directory: str, href: str) -> str | None:
    """``_resolve(base_url, href)``, through a cache key that many pages share where the href
    allows: a path-relative href against the base's directory, a plain absolute one against
    nothing, and either without its fragment (which normalisation drops)."""
    if _PATH_RELATIVE.fullmatch(href):
        return _resolve(directory, href.partition("#")[0])
    if _PLAIN_ABSOLUTE.fullmatch(href):
        return _resolve("", href.partition("#")[0])
    return _resolve(base_url, href)


def _base_url(tree: LexborHTMLParser, page_url: str) -> str:
    """The document's base URL: the first <base href>, resolved against the page URL."""
    base = tree.css_first("base[href]")
    if base is None:
        return page_url
    href = (base.attributes.get("href") or "").strip().translate(_HREF_JUNK)
    try:
        return urljoin(page_url, href) if href else page_url
    except ValueError:
        return page_url


def extract_links(
    html_or_parser: str | LexborHTMLParser,
    page_url: str,
    *,
    max_links: int = 1000,
    follow_nofollow: bool = False,
) -> list[Link]:
    """Distinct normalised http(s) out-links in document order, at most `max_links` of them.

    Reads a[href], area[href] and link[rel~=alternate][href], resolved against <base href>.
    Skips fragment-only, javascript:, mailto:, tel:, data: and other non-http(s) targets, and
    rel=nofollow links unless `follow_nofollow` (then they are kept, flagged). The candidates
    are selected in C, and the loop over them stops at `max_links` kept links (or 10x that
    many candidates), so a page with 100,000 links costs little more than its parse.
    """
    if max_links <= 0:
        return []
    tree = (
        html_or_parser
        if isinstance(html_or_parser, LexborHTMLParser)
        else LexborHTMLParser(html_or_parser)
    )
    if tree.root is None:
        return []
    base_url = _base_url(tree, page_url)
    directory = _directory_of(base_url)
    links: list[Link] = []
    seen: set[str] = set()
    candidates_left = max_links * _CANDIDATES_PER_LINK
    for node in tree.css(_LINK_SELECTOR):
        attributes = node.attributes
        href = attributes.get("href")
        if not href:
            continue
        candidates_left -= 1
        if candidates_left < 0:
            break
        rel_tokens = (attributes.get("rel") or "").lower().split()
        if node.tag == "link" and ("alternate" not in rel_tokens or "stylesheet" in rel_tokens):
            continue
        nofollow = "nofollow" in rel_tokens
        if nofollow and not follow_nofollow:
            continue
        url = _resolve_href(base_url, directory, href)
        if url is None or url in seen:
            continue
        seen.add(url)
        links.append(Link(url=url, nofollow=nofollow))
        if len(links) >= max_links:
            break
    return links


def feed_hrefs(tree: LexborHTMLParser) -> tuple[str, ...]:
    """The RSS and Atom feeds a page announces (``<link rel="alternate"
    type="application/rss+xml" href=...>``, or ``application/atom+xml``), in document order,
    at most ``MAX_FEEDS_PER_PAGE``, as written: joined with the page's ``<base href>`` when
    it has one, still relative to the page otherwise (``resolve_feeds`` makes them URLs).
    Only the ``<head>`` is searched, where HTML puts them, so a large page costs no more."""
    head = tree.head
    if head is None:
        return ()
    found: list[str] = []
    for node in head.css(_FEED_SELECTOR):
        attributes = node.attributes
        kind = (attributes.get("type") or "").split(";", 1)[0].strip().lower()
        href = (attributes.get("href") or "").strip().translate(_HREF_JUNK)
        if kind in FEED_TYPES and href and href not in found:
            found.append(href)
            if len(found) >= MAX_FEEDS_PER_PAGE:
                break
    if not found:
        return ()
    base = tree.css_first("base[href]")
    base_href = (base.attributes.get("href") or "").strip() if base is not None else ""
    if base_href:
        with contextlib.suppress(ValueError):  # a malformed base: the hrefs as written
            found = [urljoin(base_href, href) for href in found]
    return tuple(found)


def resolve_feeds(page_url: str, hrefs: tuple[str, ...]) -> tuple[str, ...]:
    """The feed URLs of ``feed_hrefs`` for the page at ``page_url``, normalised, each once."""
    urls: dict[str, None] = {}
    for href in hrefs:
        try:
            url = normalize_url(urljoin(page_url, href))
        except ValueError:
            url = None
        if url is not None:
            urls[url] = None
    return tuple(urls)
