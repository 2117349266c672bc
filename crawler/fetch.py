"""The HTTP edge: one request, bounded in time and size, turned into a ``FetchResult``.

Redirects are followed here, hop by hop (at most ``MAX_REDIRECTS``, http and https only), so
that every hop passes the same checks; a body past ``max_body_bytes`` is cut off there and
flagged as truncated, never read further.
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import aiohttp

from crawler.core import model
from crawler.core.model import FetchResult, UrlRecord

MAX_REDIRECTS = 5
MAX_URL_LENGTH = 2083
CHUNK_BYTES = 64 * 1024
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
PERMANENT_REDIRECTS = frozenset({301, 308})


@dataclass(frozen=True, slots=True)
class FetchLimits:
    connect_timeout: float = 10.0
    total_timeout: float = 30.0
    max_body_bytes: int = 10 * 1024 * 1024


def parse_http_date(value: str | None) -> float | None:
    if not value:
        return None
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if parsed.tzinfo is None:
        return None
    return parsed.timestamp()


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
    if record.etag:
        headers["If-None-Match"] = record.etag
    if record.last_modified is not None:
        headers["If-Modified-Since"] = email.utils.formatdate(record.last_modified, usegmt=True)
    return headers


def new_session(user_agent: str, limits: FetchLimits) -> aiohttp.ClientSession:
    timeout = aiohttp.ClientTimeout(
        total=limits.total_timeout,
        sock_connect=limits.connect_timeout,
        sock_read=limits.total_timeout,
    )
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, enable_cleanup_closed=True)
    return aiohttp.ClientSession(
        timeout=timeout,
        connector=connector,
        headers={"User-Agent": user_agent},
        auto_decompress=True,
        cookie_jar=aiohttp.DummyCookieJar(),
    )


async def _read_capped(response: aiohttp.ClientResponse, cap: int) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(CHUNK_BYTES):
        if size + len(chunk) > cap:
            chunks.append(chunk[: cap - size])
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks), False


async def fetch(
    session: aiohttp.ClientSession,
    record: UrlRecord,
    limits: FetchLimits,
) -> FetchResult:
    """GET ``record.url`` once (following redirects) and report what happened."""
    started = time.monotonic()
    fetched_at = time.time()

    def result(outcome: str, **fields: Any) -> FetchResult:
        return FetchResult(
            fetched_at=fetched_at,
            duration_seconds=time.monotonic() - started,
            outcome=outcome,
            **fields,
        )

    url = record.url
    headers = conditional_headers(record)
    permanent_target: str | None = None
    try:
        async with asyncio.timeout(limits.total_timeout):
            for _hop in range(MAX_REDIRECTS + 1):
                if len(url) > MAX_URL_LENGTH or urlsplit(url).scheme not in ("http", "https"):
                    return result(model.BLOCKED, error_kind="bad_url")
                async with session.get(url, headers=headers, allow_redirects=False) as response:
                    status = response.status
                    if status in REDIRECT_STATUSES and "Location" in response.headers:
                        target = urljoin(url, response.headers["Location"])
                        if urlsplit(target).scheme not in ("http", "https"):
                            return result(
                                model.HTTP_ERROR, status=status, error_kind="bad_redirect_scheme"
                            )
                        if status in PERMANENT_REDIRECTS and url == record.url:
                            permanent_target = target
                        url, headers = target, {}
                        continue
                    outcome, fields = await _interpret(response, limits)
                    return result(outcome, redirect_to=permanent_target, **fields)
            return result(model.HTTP_ERROR, error_kind="too_many_redirects",
                          redirect_to=permanent_target)
    except TimeoutError:
        return result(model.TIMEOUT, error_kind="timeout")
    except aiohttp.ClientResponseError as exc:
        return result(model.HTTP_ERROR, status=exc.status or None, error_kind="bad_response")
    except aiohttp.ClientPayloadError:
        return result(model.NETWORK_ERROR, error_kind="broken_body")
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        return result(model.NETWORK_ERROR, error_kind=type(exc).__name__)


async def _interpret(
    response: aiohttp.ClientResponse, limits: FetchLimits
) -> tuple[str, dict[str, Any]]:
    """The outcome of a final (non-redirect) response and the fields to record with it."""
    status = response.status
    fields: dict[str, Any] = {"status": status}
    if status == 304:
        fields["etag"] = response.headers.get("ETag")
        fields["last_modified"] = parse_http_date(response.headers.get("Last-Modified"))
        return model.NOT_MODIFIED, fields
    if status in (404, 410):
        return model.GONE, fields
    if status >= 400 or status < 200:
        fields["error_kind"] = f"http_{status}"
        fields["retry_after_seconds"] = parse_retry_after(
            response.headers.get("Retry-After"), time.time()
        )
        return model.HTTP_ERROR, fields
    body, truncated = await _read_capped(response, limits.max_body_bytes)
    fields.update(
        body=body,
        truncated=truncated,
        content_type=response.headers.get("Content-Type"),
        etag=response.headers.get("ETag"),
        last_modified=parse_http_date(response.headers.get("Last-Modified")),
        error_kind="too_large" if truncated else None,
    )
    return model.OK, fields
