"""The HTTP edge: one request, bounded in time and size, turned into a ``FetchResult``.

Redirects are followed hop by hop (at most ``max_redirects``, http(s) only, no loops), every
hop through the same checks; each 3xx answer is kept as received in ``FetchResult.redirects``,
for the collection to store every exchange under the URI that answered it. Every limit a
hostile server can push against is enforced here and reported as an ``error_kind``:

- time: ``timeout_connect``, ``timeout_first_byte`` (before the headers), ``timeout_read``
  (any silence in the body) and ``timeout_total`` (the whole request with its redirects: what
  cuts a server trickling a byte every few seconds);
- size: the body on the wire and decoded are both capped at ``max_body_bytes``, then cut and
  flagged ``truncated`` (``too_large``, or ``decompression_bomb`` for an implausible ratio);
- protocol: ``bad_status_line``, ``broken_body`` (short Content-Length, a chunked body cut),
  ``bad_encoding`` / ``unsupported_encoding``;
- redirects: ``too_many_redirects``, ``redirect_loop``, ``bad_redirect_scheme``;
- addresses: ``ssrf`` (outcome ``blocked``, see ``crawler.net.ssrf``), ``url_too_long``,
  ``bad_url``;
- TLS (``network_error``): the certificate check that refused (``tls_error_kind``), or
  ``tls_handshake``; a handshake that never finishes is cut by the connect timeout.

On a host lease's kept-alive session (``crawler.net.session``) any of these closes the
connection, so that it never serves another request.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import aiohttp

from crawler.core import model
from crawler.core.links import MAX_URL_LENGTH
from crawler.core.model import ErrorKind, FetchResult, UrlRecord, http_error_kind
from crawler.core.robots import ROBOTS_MAX_BYTES, RobotsFetch, robots_outcome
from crawler.net.decompress import CappedDecoder, DecodeError, UnsupportedEncoding
from crawler.net.session import drop_idle, new_session, reused_connection
from crawler.net.ssrf import canonical_ipv4, is_address_blocked
from crawler.net.tls import tls_context, tls_error_kind
from crawler.settings import Settings

__all__ = ["fetch", "fetch_robots", "new_session", "tls_context"]

ROBOTS_MAX_REDIRECTS = 5  # RFC 9309 section 2.3.1.2: follow at least five
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
PERMANENT_REDIRECTS = frozenset({301, 308})
HTML_TYPES = ("text/html", "application/xhtml+xml")
# A decoded/wire ratio above this is a bomb, not a big page: HTML compresses 5-20x, while a
# deflate bomb reaches ~1000x (and brotli or zstd far more).
BOMB_RATIO = 100.0
DECODE_SLICE_BYTES = 4096
# Magic numbers of common non-HTML formats served under an HTML (or no) Content-Type.
_MAGIC_TYPES = (
    (b"%PDF-", "application/pdf"),
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"PK\x03\x04", "application/zip"),
    (b"\x1f\x8b", "application/gzip"),
)


class _Refused(Exception):
    """A URL we will not request; ``kind`` is the error_kind recorded."""

    def __init__(self, kind: ErrorKind) -> None:
        super().__init__(kind)
        self.kind = kind


def parse_http_date(value: str | None) -> float | None:
    if not value:
        return None
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return None if parsed.tzinfo is None else parsed.timestamp()


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Retry-After in seconds, from either form (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    when = parse_http_date(value)
    return None if when is None else max(0.0, when - now)


def conditional_headers(record: UrlRecord) -> dict[str, str]:
    """If-None-Match / If-Modified-Since from the stored validators."""
    headers: dict[str, str] = {}
    if record.last_content_hash is None:
        return headers  # nothing stored to compare a 304 against
    if record.fingerprint_region != record.region.key:
        return headers  # the region changed: a 304 would leave its fingerprint unrecomputed
    if record.out_links_unread:
        return headers  # a window page whose links were never read: a 304 would keep them so
    if record.etag:
        headers["If-None-Match"] = record.etag
    if record.last_modified is not None:
        headers["If-Modified-Since"] = email.utils.formatdate(record.last_modified, usegmt=True)
    return headers


def canonical_url(url: str, max_length: int = MAX_URL_LENGTH) -> str:
    """The URL to request: http(s) only, length-capped, numeric IPv4 spellings normalised
    (``http://0x7f.1/`` becomes ``http://127.0.0.1/`` for the address check); ``_Refused``
    for a URL we will not request."""
    if len(url) > max_length:
        raise _Refused(ErrorKind.URL_TOO_LONG)
    try:
        parts = urlsplit(url)
        host = parts.hostname
        port = parts.port
    except ValueError as exc:
        raise _Refused(ErrorKind.BAD_URL) from exc
    if parts.scheme not in ("http", "https"):
        raise _Refused(ErrorKind.BAD_SCHEME)
    if not host:
        raise _Refused(ErrorKind.BAD_URL)
    if ":" in host:
        return url  # an IPv6 literal: already canonical for the address check
    try:
        ipv4 = canonical_ipv4(host)
    except ValueError as exc:
        raise _Refused(ErrorKind.BAD_URL) from exc
    if ipv4 is None or str(ipv4) == host:
        return url
    netloc = str(ipv4) if port is None else f"{ipv4}:{port}"
    return urlunsplit(parts._replace(netloc=netloc))


@dataclass(slots=True)
class _Body:
    data: bytes = b""
    truncated: bool = False
    error_kind: ErrorKind | None = None
    wire_bytes: int = 0
    wire: bytes | None = None  # the encoded entity, when a Content-Encoding was undone


async def _read_body(response: aiohttp.ClientResponse, cap: int, decode: bool) -> _Body:
    """Read at most ``cap`` bytes on the wire and ``cap`` bytes decoded, then stop."""
    body = _Body()
    decoder = CappedDecoder(response.headers.get("Content-Encoding"), cap) if decode else None
    parts: list[bytes] = []
    # The entity as received, kept for the collection when it is not what ``data`` holds.
    wire: list[bytes] | None = [] if decoder is not None and decoder.stages else None
    while chunk := await response.content.readany():
        wire_room = cap - body.wire_bytes
        wire_cut = len(chunk) > wire_room
        chunk = chunk[:wire_room]
        if wire is not None:
            wire.append(chunk)
        if decoder is None:
            body.wire_bytes += len(chunk)
            parts.append(chunk)
        else:
            # Small slices, so that the bytes consumed when the cap is hit measure the ratio.
            for start in range(0, len(chunk), DECODE_SLICE_BYTES):
                piece = chunk[start : start + DECODE_SLICE_BYTES]
                body.wire_bytes += len(piece)
                parts.append(decoder.feed(piece))
                if decoder.exceeded:
                    ratio = decoder.size / max(1, body.wire_bytes)
                    body.truncated = True
                    body.error_kind = (ErrorKind.DECOMPRESSION_BOMB if ratio > BOMB_RATIO
                                       else ErrorKind.TOO_LARGE)
                    break
            if body.truncated:
                break
        if wire_cut:
            body.truncated, body.error_kind = True, ErrorKind.TOO_LARGE
            break
    if decoder is not None and not body.truncated:
        parts.append(decoder.finish())
        if decoder.exceeded:
            body.truncated, body.error_kind = True, ErrorKind.TOO_LARGE
    body.data = b"".join(parts)
    if wire is not None and not body.truncated:
        body.wire = b"".join(wire)
    return body


def exchange_fields(response: aiohttp.ClientResponse) -> dict[str, Any]:
    """The exchange as it went over the wire, for the WARC records: the response's raw
    headers (``headers`` folds each name to one spelling; raw ones keep spelling, order and
    duplicates), its HTTP version, and the request as sent (with aiohttp's Host, Accept...)."""
    info = response.request_info
    version = response.version
    return {
        "headers": tuple((name.decode("utf-8", "surrogateescape"),
                          value.decode("utf-8", "surrogateescape"))
                         for name, value in response.raw_headers),
        "http_version": "1.1" if version is None else f"{version.major}.{version.minor}",
        "request_target": info.url.raw_path_qs,
        "request_headers": tuple(info.headers.items()),
    }


def sniff_content_type(declared: str | None, body: bytes) -> str | None:
    """The declared type, unless it claims HTML (or nothing) and the bytes say otherwise (a
    PDF served as text/html must be fingerprinted on its raw bytes, not parsed as HTML)."""
    media_type = (declared or "").split(";", 1)[0].strip().lower()
    if media_type and media_type not in HTML_TYPES:
        return declared
    head = body[:16].lstrip()
    for magic, sniffed in _MAGIC_TYPES:
        if head.startswith(magic):
            return sniffed
    return declared


# Failures before any response that mean "this kept-alive connection was already dead".
STALE_CONNECTION_KINDS = frozenset(
    {ErrorKind.SERVER_DISCONNECTED, ErrorKind.BAD_STATUS_LINE, ErrorKind.CLIENT_OS_ERROR})
# Error kinds that say nothing about the connection (the response was read to its end).
_CLEAN_KINDS = ("http_",)


def connection_anomaly(result: FetchResult) -> bool:
    """Whether the connection that served ``result`` must not serve another request."""
    if result.truncated or result.outcome in (model.NETWORK_ERROR, model.TIMEOUT):
        return True
    kind = result.error_kind
    return kind is not None and not kind.startswith(_CLEAN_KINDS)


async def fetch(
    session: aiohttp.ClientSession,
    record: UrlRecord,
    settings: Settings,
    *,
    send_validators: bool = True,
) -> FetchResult:
    """GET ``record.url`` once (following redirects) and report what happened; never raises
    for anything the network or the server does. On a kept-alive session a connection that
    showed any anomaly is closed, and a request that found its reused connection dead before
    any response is sent once more on a fresh one, within the same total timeout."""
    started, fetched_at = time.monotonic(), time.time()
    deadline = asyncio.get_running_loop().time() + settings.total_timeout
    attempt = functools.partial(_attempt, session, record, settings, send_validators, deadline,
                                started, fetched_at)
    result = await attempt()
    if (result.status is None and result.error_kind in STALE_CONNECTION_KINDS
            and reused_connection(session)):
        drop_idle(session)
        result = await attempt()
    if connection_anomaly(result):
        drop_idle(session)
    return result


async def _attempt(
    session: aiohttp.ClientSession,
    record: UrlRecord,
    settings: Settings,
    send_validators: bool,
    deadline: float,
    started: float,
    fetched_at: float,
) -> FetchResult:
    state: dict[str, Any] = {"phase": "connect", "permanent_target": None, "redirects": []}

    def result(outcome: model.Outcome, **fields: Any) -> FetchResult:
        fields.setdefault("redirect_to", state["permanent_target"])
        fields.setdefault("redirects", tuple(state["redirects"]))
        return FetchResult(
            fetched_at=fetched_at,
            duration_seconds=time.monotonic() - started,
            outcome=outcome,
            **fields,
        )

    try:
        async with asyncio.timeout_at(deadline):
            return await _follow(session, record, settings, send_validators, state, result)
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        outcome, kind = failure_of(exc, state["phase"])
        return result(outcome, error_kind=kind)


# Failures no test in ``failure_of`` names, by their exception's class or its nearest base
# class listed here (``ClientError`` and ``OSError`` end every chain that reaches them).
_CLASS_KINDS = {kind.value: kind for kind in (
    ErrorKind.CLIENT_OS_ERROR, ErrorKind.CLIENT_CONNECTION_RESET,
    ErrorKind.SERVER_CONNECTION_ERROR, ErrorKind.CLIENT_CONNECTION_ERROR, ErrorKind.CLIENT_ERROR,
    ErrorKind.CONNECTION_RESET, ErrorKind.BROKEN_PIPE, ErrorKind.CONNECTION_ERROR,
    ErrorKind.OS_ERROR,
)}


def failure_of(exc: BaseException, phase: str) -> tuple[model.Outcome, ErrorKind]:
    """The outcome and error kind of a request that raised ``exc`` in ``phase`` ("connect"
    until the response's headers were read, "body" after). The order of the tests matters:
    each class is a subclass of a later one."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return model.TIMEOUT, ErrorKind.TIMEOUT_CONNECT
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return model.TIMEOUT, (ErrorKind.TIMEOUT_READ if phase == "body"
                               else ErrorKind.TIMEOUT_FIRST_BYTE)
    if isinstance(exc, TimeoutError):
        return model.TIMEOUT, ErrorKind.TIMEOUT_TOTAL
    if isinstance(exc, aiohttp.ClientPayloadError):
        return model.NETWORK_ERROR, ErrorKind.BROKEN_BODY
    if isinstance(exc, aiohttp.ClientResponseError):
        # aiohttp's parser refused what the server sent (no status line, HTTP/0.9, garbage,
        # a bad chunk header). Bytes past Content-Length that arrive with the response are
        # parsed as the next status line and refused the same way.
        message = str(exc.message).lower()
        if "chunk" in message or "payload" in message:
            return model.NETWORK_ERROR, ErrorKind.BROKEN_BODY
        if "status line" in message or phase == "connect":
            return model.NETWORK_ERROR, ErrorKind.BAD_STATUS_LINE
        return model.NETWORK_ERROR, ErrorKind.BAD_RESPONSE
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return model.NETWORK_ERROR, ErrorKind.SERVER_DISCONNECTED
    if isinstance(exc, aiohttp.ClientSSLError | ssl.SSLError):
        # Before ValueError: a certificate verification error is one (ssl.CertificateError).
        return model.NETWORK_ERROR, tls_error_kind(exc)
    if isinstance(exc, aiohttp.InvalidURL | ValueError):
        # yarl/aiohttp refused the URL or a header built from it (IDNA, control characters).
        return model.BLOCKED, ErrorKind.BAD_URL
    if is_address_blocked(exc):
        return model.BLOCKED, ErrorKind.SSRF
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return model.NETWORK_ERROR, ErrorKind.DNS
    if isinstance(exc, aiohttp.ClientConnectorError):
        return model.NETWORK_ERROR, ErrorKind.CONNECT_FAILED
    named = (_CLASS_KINDS.get(cls.__name__) for cls in type(exc).__mro__)
    return model.NETWORK_ERROR, next((k for k in named if k is not None), ErrorKind.OS_ERROR)


async def _follow(
    session: aiohttp.ClientSession,
    record: UrlRecord,
    settings: Settings,
    send_validators: bool,
    state: dict[str, Any],
    result: Callable[..., FetchResult],
) -> FetchResult:
    """The redirect chain of one fetch; every hop goes through the same checks."""
    url = record.url
    # On every hop: a redirect to a localized page keeps the language asked for.
    language = {"Accept-Language": settings.accept_language} if settings.accept_language else {}
    headers = {**language, **(conditional_headers(record) if send_validators else {})}
    visited: set[str] = set()
    decode = not session.auto_decompress  # bodies are decoded here, under the caps
    # total is enforced by asyncio.timeout around the whole redirect chain, not per hop.
    timeout = aiohttp.ClientTimeout(total=None, connect=None, sock_connect=settings.connect_timeout,
                                    sock_read=settings.first_byte_timeout)
    for _hop in range(settings.max_redirects + 1):
        try:
            url = canonical_url(url, settings.max_url_length)
        except _Refused as refused:
            return result(model.BLOCKED, error_kind=refused.kind)
        visited.add(url)
        state["phase"] = "connect"
        async with session.get(
            url, headers=headers, allow_redirects=False, timeout=timeout
        ) as response:
            state["phase"] = "body"
            status = response.status
            location = response.headers.get("Location")
            if status in REDIRECT_STATUSES and location:
                try:
                    target = urljoin(url, location.strip())
                    scheme = urlsplit(target).scheme
                except ValueError:
                    return result(model.BLOCKED, status=status, error_kind=ErrorKind.BAD_URL)
                if scheme not in ("http", "https"):
                    return result(
                        model.BLOCKED, status=status, error_kind=ErrorKind.BAD_REDIRECT_SCHEME
                    )
                if status in PERMANENT_REDIRECTS and url == record.url:
                    state["permanent_target"] = target
                if target in visited:
                    return result(
                        model.HTTP_ERROR, status=status, error_kind=ErrorKind.REDIRECT_LOOP
                    )
                exchange = await _redirect_exchange(response, url, target, settings, decode=decode)
                state["redirects"].append(exchange)
                url, headers = target, language
                continue
            outcome, fields = await _interpret(response, settings, decode=decode)
            return result(outcome, final_url=url, **fields)
    return result(model.HTTP_ERROR, error_kind=ErrorKind.TOO_MANY_REDIRECTS)


async def _redirect_exchange(
    response: aiohttp.ClientResponse, url: str, target: str, settings: Settings, *,
    decode: bool,
) -> model.Exchange:
    """A redirect answer as received, its (small) body read under the same caps as a page's,
    so that the collection stores the exchange that really happened at ``url``."""
    try:
        body = await _read_body(response, settings.max_body_bytes, decode)
    except (UnsupportedEncoding, DecodeError, aiohttp.ClientPayloadError):
        # The redirect still holds (it was followed before its body was ever read); only
        # its body is not kept. A broken body closes the connection on release.
        body = _Body(truncated=True)
    return model.Exchange(
        url=url, status=response.status, reason=response.reason or "", location=target,
        body=body.data, wire_body=body.wire, truncated=body.truncated,
        **exchange_fields(response),
    )


async def _interpret(
    response: aiohttp.ClientResponse, settings: Settings, *, decode: bool
) -> tuple[model.Outcome, dict[str, Any]]:
    """The outcome of a final (non-redirect) response and the fields to record with it."""
    status = response.status
    fields: dict[str, Any] = {
        "status": status,
        "reason": response.reason or "",
        **exchange_fields(response),
    }
    if status == 304:
        fields["etag"] = response.headers.get("ETag")
        fields["last_modified"] = parse_http_date(response.headers.get("Last-Modified"))
        return model.NOT_MODIFIED, fields
    if status in (404, 410):
        return model.GONE, fields
    if status >= 300 or status < 200:
        fields["error_kind"] = http_error_kind(status)
        fields["retry_after_seconds"] = parse_retry_after(
            response.headers.get("Retry-After"), time.time()
        )
        return model.HTTP_ERROR, fields
    try:
        body = await _read_body(response, settings.max_body_bytes, decode)
    except (UnsupportedEncoding, DecodeError) as exc:
        fields["error_kind"] = (ErrorKind.UNSUPPORTED_ENCODING
                                if isinstance(exc, UnsupportedEncoding) else ErrorKind.BAD_ENCODING)
        return model.HTTP_ERROR, fields
    fields.update(
        body=body.data,
        wire_body=body.wire,
        truncated=body.truncated,
        content_type=sniff_content_type(response.headers.get("Content-Type"), body.data),
        etag=response.headers.get("ETag"),
        last_modified=parse_http_date(response.headers.get("Last-Modified")),
        error_kind=body.error_kind,
    )
    return model.OK, fields


async def fetch_robots(
    session: aiohttp.ClientSession, origin: str, settings: Settings
) -> RobotsFetch:
    """GET ``origin``/robots.txt (RFC 9309): at most 5 redirects, 500 KiB parsed, classified
    by ``crawler.core.robots.robots_outcome``."""
    url = origin.rstrip("/") + "/robots.txt"
    robots_settings = settings.model_copy(update={
        "max_redirects": min(settings.max_redirects, ROBOTS_MAX_REDIRECTS),
        "max_body_bytes": min(settings.max_body_bytes, ROBOTS_MAX_BYTES),
    })
    fetched = await fetch(
        session, UrlRecord(url_id=0, url=url), robots_settings, send_validators=False
    )
    return robots_outcome(
        fetched_at=fetched.fetched_at,
        outcome=fetched.outcome,
        status=fetched.status,
        body=fetched.body,
        truncated=fetched.truncated,
        error_kind=fetched.error_kind,
        retry_after_seconds=fetched.retry_after_seconds,
    )
