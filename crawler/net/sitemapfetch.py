"""One sitemap or feed fetched and read: ``crawler.net.fetch.fetch`` (every check a page
has) under the protocol's size limit, then a gzip file undone and read in slices.

A sitemap is often a gzip file served as such (``sitemap.xml.gz``, no Content-Encoding): it is
recognised by its magic number and inflated here one slice at a time, at most ``MAX_BYTES``,
so that a file that inflates to 10 GB costs the cap's worth of time and one slice of memory.
"""

from __future__ import annotations

import asyncio
import signal
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass, field

import aiohttp

from crawler.core import model
from crawler.core.model import UrlRecord
from crawler.core.sitemaps import (
    CUT_BYTES,
    MAX_BYTES,
    MAX_URLS,
    DateHint,
    Entry,
    SitemapReader,
)
from crawler.net.fetch import fetch
from crawler.settings import Settings

GZIP_MAGIC = b"\x1f\x8b"
SLICE_BYTES = 64 * 1024
INPUT_SLICE_BYTES = 16 * 1024


@dataclass(slots=True)
class SitemapRead:
    """What one fetch of a sitemap gave: the HTTP side (``outcome``, ``status``,
    ``error_kind``) and the reading (``kind``, entries, and why it stopped early if it did:
    ``cut`` at a limit, ``error`` for a file that is not a sitemap or not valid)."""

    url: str
    fetched_at: float
    outcome: str
    status: int | None = None
    error_kind: str | None = None
    kind: str | None = None
    entries: list[Entry] = field(default_factory=list)
    cut: str | None = None
    error: str | None = None
    invalid: int = 0
    repaired: int = 0  # invalid UTF-8 sequences replaced, control characters dropped
    duration_seconds: float = 0.0
    wire_bytes: int = 0
    size: int = 0
    etag: str | None = None
    last_modified: float | None = None


def inflate(body: bytes, cap: int) -> Iterator[bytes]:
    """A gzip body inflated in pieces of at most ``SLICE_BYTES``, ``cap`` bytes in all (and
    one more, for the caller to see the cap passed): memory is one piece, whatever the ratio.
    Concatenated members are read on. Raises ``zlib.error`` for a corrupt stream."""
    produced = 0
    decoder = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    # The input goes in small slices too: what a call leaves unconsumed is copied each time.
    for start in range(0, len(body), INPUT_SLICE_BYTES):
        pending = body[start : start + INPUT_SLICE_BYTES]
        while pending:
            if produced > cap:
                return
            piece = decoder.decompress(pending, SLICE_BYTES)
            pending = decoder.unconsumed_tail
            if decoder.eof:
                rest = decoder.unused_data
                if not rest.startswith(GZIP_MAGIC[:len(rest)]):
                    return  # trailing garbage after the last member: ignored, as gzip does
                pending = rest
                decoder = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            produced += len(piece)
            if piece:
                yield piece


def read_body(body: bytes, base_url: str, *, max_urls: int = MAX_URLS,
              on_entries: Callable[[list[Entry]], None] | None = None) -> SitemapReader:
    """Read a fetched body (inflating a gzip one, recognised by its magic number); entries go
    to ``on_entries`` as they are read. The reader returned tells the kind of file and why it
    stopped early, if it did."""
    reader = SitemapReader(base_url, max_urls=max_urls, max_bytes=MAX_BYTES)
    sink = on_entries if on_entries is not None else (lambda _entries: None)
    pieces = (inflate(body, MAX_BYTES) if body.startswith(GZIP_MAGIC) else
              (body[i : i + SLICE_BYTES] for i in range(0, len(body), SLICE_BYTES)))
    try:
        for piece in pieces:
            sink(reader.feed(piece))
            if reader.done:
                break
    except zlib.error as error:
        reader.error = f"bad_gzip: {error}"
    sink(reader.close())
    return reader


@dataclass(frozen=True, slots=True)
class PlainRead:
    """What ``read_body`` made of a body, in plain values: a parsing process sends it back
    (entries pickle far faster as their fields than as objects)."""

    kind: str | None
    error: str | None
    invalid: int
    size: int
    repaired: int
    cut: str | None
    urls: list[str]
    hints: list[tuple[tuple[str, float], ...]]  # (kind, claimed) of each URL's dates


def read_plain(body: bytes, base_url: str, max_urls: int) -> PlainRead:
    """``read_body`` in a parsing process."""
    entries: list[Entry] = []
    reader = read_body(body, base_url, max_urls=max_urls, on_entries=entries.extend)
    return PlainRead(reader.kind, reader.error, reader.invalid, reader.size, reader.repaired,
                     reader.cut, [e.url for e in entries],
                     [tuple((h.kind, h.claimed) for h in e.hints) for e in entries])


def parser_started() -> None:
    """A parsing process's initializer: Ctrl-C is for the command that started it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _entries(plain: PlainRead) -> list[Entry]:
    dates: dict[tuple[str, float], DateHint] = {}  # one object per distinct date
    return [Entry(url, tuple(dates.setdefault(hint, DateHint(*hint)) for hint in hints))
            for url, hints in zip(plain.urls, plain.hints, strict=True)]


async def read_sitemap(session: aiohttp.ClientSession, url: str, limits: Settings, *,
                       etag: str | None = None, last_modified: float | None = None,
                       max_urls: int = MAX_URLS, parser: Executor | None = None) -> SitemapRead:
    """GET ``url`` (conditionally, given validators) and read it as a sitemap or feed: on a
    thread, or in ``parser`` (a process pool started with ``parser_started``), where the
    parsing holds no lock the caller's Python needs."""
    record = UrlRecord(url_id=0, url=url, etag=etag, last_modified=last_modified,
                       last_content_hash=b"" if (etag or last_modified) else None)
    fetched = await fetch(session, record, limits.model_copy(update={"max_body_bytes": MAX_BYTES}),
                          send_validators=etag is not None or last_modified is not None)
    read = SitemapRead(url=url, fetched_at=fetched.fetched_at, outcome=fetched.outcome,
                       status=fetched.status, error_kind=fetched.error_kind,
                       etag=fetched.etag, last_modified=fetched.last_modified,
                       duration_seconds=fetched.duration_seconds)
    if fetched.outcome != model.OK:
        return read
    body = fetched.body or b""
    read.wire_bytes = len(fetched.wire_body or body)
    if parser is not None:
        plain = await asyncio.get_running_loop().run_in_executor(
            parser, read_plain, body, fetched.final_url or url, max_urls)
        read.entries = _entries(plain)
        reader: SitemapReader | PlainRead = plain
    else:
        # A 50,000-URL file is seconds of parsing: on a thread, the event loop meanwhile
        # drives database writes or other hosts' fetches.
        reader = await asyncio.to_thread(read_body, body, fetched.final_url or url,
                                         max_urls=max_urls, on_entries=read.entries.extend)
    read.kind, read.error, read.invalid, read.size, read.repaired = (
        reader.kind, reader.error, reader.invalid, reader.size, reader.repaired)
    # Cut at the body cap on the way in (Content-Encoding bomb, or a body past 50 MB): the
    # reader saw only the part kept, so the file was cut at the byte limit.
    read.cut = reader.cut or (CUT_BYTES if fetched.truncated else None)
    return read
