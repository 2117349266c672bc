"""WARC 1.1 (ISO 28500) files: one gzip member per record, rotated by size.

Records are serialized here, byte for byte as warcio's writer lays them out (the same header
order and digests), at a quarter of its CPU per record; warcio writes each file's warcinfo
and reads everything (``warcio check`` passes on every file, see the tests).

Layout: ``<root>/crawler-<UTC time>-<serial>-<writer>.warc.gz``. A file being written is
named ``... .warc.gz.open`` and locked (flock) by its writer; closing renames it, after which
it is immutable. Each file starts with a ``warcinfo`` record. On start, an ``.open`` file that
no live writer holds is a crashed writer's: its torn tail (a partial gzip member) is cut at
the last complete record, and the file is closed like any other. Committed index rows never
point past that cut: a record is flushed before its index row commits.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import logging
import os
import uuid
import zlib
from collections import OrderedDict
from concurrent.futures import Executor
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import deflate
from warcio.archiveiterator import ArchiveIterator
from warcio.recordloader import ArcWarcRecord
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from crawler import __version__
from crawler.net.decompress import CappedDecoder, DecodeError, UnsupportedEncoding
from crawler.store.base import (
    RESPONSE,
    REVISIT,
    Capture,
    Headers,
    Original,
    ReadRecord,
    StoredRecord,
    payload_digest,
)

log = logging.getLogger(__name__)

WARC_VERSION = "1.1"
SUFFIX = ".warc.gz"
OPEN_SUFFIX = ".open"
SCAN_CHUNK_BYTES = 1 << 20
GZIP_LEVEL = 6  # CRAWLER_WARC_GZIP_LEVEL's default
# Headers that no longer describe the stored payload: chunking was undone by the HTTP client
# and the length is recomputed; Content-Encoding is dropped only when the payload is decoded.
_DROPPED_HEADERS = frozenset({"transfer-encoding", "content-length"})
_DROPPED_DECODED = _DROPPED_HEADERS | {"content-encoding"}
# A stored payload is decoded on reading up to this size (far above any fetch's cap).
READ_DECODED_CAP = 1 << 30
REVISIT_PROFILE = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"


def warc_date(seconds: float) -> str:
    """WARC-Date with microseconds (WARC 1.1 allows fractions of a second)."""
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_record_id() -> str:
    return f"<urn:uuid:{uuid.uuid4()}>"


def complete_prefix(path: Path) -> int:
    """Bytes of ``path`` made of complete gzip members that each hold a WARC record.

    Anything after that is a torn tail: a member cut short by a crash.
    """
    good_end = 0
    position = 0
    decompressor = zlib.decompressobj(31)
    head = b""
    with path.open("rb") as file:
        while chunk := file.read(SCAN_CHUNK_BYTES):
            data = chunk
            while data:
                try:
                    out = decompressor.decompress(data)
                except zlib.error:
                    return good_end
                if len(head) < 5:
                    head += out[: 5 - len(head)]
                if not decompressor.eof:
                    position += len(data)
                    break
                position += len(data) - len(decompressor.unused_data)
                if not head.startswith(b"WARC/"):
                    return good_end
                good_end = position
                data = decompressor.unused_data
                decompressor = zlib.decompressobj(31)
                head = b""
    return good_end


def recover(root: Path) -> list[str]:
    """Close every ``.open`` file left by a dead writer, cutting its torn tail; their names."""
    closed: list[str] = []
    for path in sorted(root.glob("*" + SUFFIX + OPEN_SUFFIX)):
        with path.open("r+b") as file:
            try:
                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live writer's file
            size = path.stat().st_size
            good = complete_prefix(path)
            if good < size:
                log.warning("%s: torn tail of %d bytes cut after a crash", path.name, size - good)
                file.truncate(good)
                file.flush()
                os.fsync(file.fileno())
            final = path.with_name(path.name.removesuffix(OPEN_SUFFIX))
            if good == 0:
                path.unlink()  # not even its warcinfo: nothing can point into it
            else:
                path.rename(final)
                closed.append(final.name)
    return closed


def _line(name: str, value: str) -> bytes:
    """One header line; a CR or LF in a value (never sent by a server aiohttp accepts) would
    end the header early, so it becomes a space. Values keep the bytes received (aiohttp
    decodes them as UTF-8 with surrogate escapes)."""
    if "\r" in value or "\n" in value:
        value = value.replace("\r", " ").replace("\n", " ")
    return f"{name}: {value}\r\n".encode("utf-8", "surrogateescape")


def _http_response_head(capture: Capture) -> bytes:
    """The HTTP status line and headers as stored before the payload."""
    dropped = _DROPPED_HEADERS if capture.wire_payload is not None else _DROPPED_DECODED
    status = f"HTTP/1.1 {capture.status} {capture.reason}".strip()
    lines = [status.encode("utf-8", "surrogateescape") + b"\r\n"]
    lines += [_line(k, v) for k, v in capture.response_headers if k.lower() not in dropped]
    if capture.body_read:
        lines.append(_line("Content-Length", str(len(capture.stored_payload))))
    lines.append(b"\r\n")
    return b"".join(lines)


def _http_request_head(capture: Capture) -> bytes:
    parts = urlsplit(capture.url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    lines = [f"GET {target} HTTP/1.1\r\n".encode("utf-8", "surrogateescape"),
             _line("Host", parts.netloc)]
    lines += [_line(k, v) for k, v in capture.request_headers]
    lines.append(b"\r\n")
    return b"".join(lines)


def warc_record(warc_type: str, warc_headers: list[tuple[str, str]], block: bytes,
                http_message: str) -> bytes:
    """One WARC 1.1 record, serialized as warcio's writer does (same header order, block
    digest over the whole block); ``warc_headers`` go between WARC-Type and the digests."""
    lines = [b"WARC/1.1\r\n", _line("WARC-Type", warc_type)]
    lines += [_line(k, v) for k, v in warc_headers]
    lines += [
        _line("WARC-Block-Digest", payload_digest(block)),
        _line("Content-Type", f"application/http; msgtype={http_message}"),
        _line("Content-Length", str(len(block))),
        b"\r\n", block, b"\r\n\r\n",
    ]
    return b"".join(lines)


def gzip_bytes(data: bytes, level: int = GZIP_LEVEL) -> bytes:
    """One gzip member at ``level`` (``CRAWLER_WARC_GZIP_LEVEL``; warcio's own writer uses 9,
    which costs twice the CPU of 6 for about 2% smaller files of HTML).

    libdeflate, not zlib: a record is compressed whole, which is the one case libdeflate
    serves (no streaming), and at the same level it takes 0.46 ms for a 47 KB page where zlib
    takes 1.0 ms, for files 0.4% larger. ISA-L at its level 2 would take 0.13 ms but make files
    17% larger: an archive kept for months pays that in disk every day, so it is not the
    default."""
    return bytes(deflate.gzip_compress(data, level))


class WarcStore:
    """A ``RecordStore`` writing WARC files under ``root`` (not thread-safe: one writer)."""

    def __init__(
        self, root: Path, *, max_bytes: int, writer_name: str = "w", gzip_level: int = GZIP_LEVEL
    ) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.gzip_level = gzip_level
        self.writer_name = "".join(c if c.isalnum() else "-" for c in writer_name)[:40]
        root.mkdir(parents=True, exist_ok=True)
        self.recovered = recover(root)
        self._file: IO[bytes] | None = None
        self._name = ""
        self._writer: WARCWriter | None = None
        self._serial = 0
        self.files_closed = 0
        self._background: Executor | None = None

    def set_background(self, executor: Executor) -> None:
        """Close full files on ``executor`` (their fsync can take seconds) while writing goes
        on in a new file; ``close`` stays synchronous."""
        self._background = executor

    # -- files ------------------------------------------------------------------------------

    def _open_new(self) -> tuple[IO[bytes], WARCWriter]:
        self._serial += 1
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d%H%M%S%f")
        self._name = f"crawler-{stamp}-{self._serial:05d}-{self.writer_name}{SUFFIX}"
        file = (self.root / (self._name + OPEN_SUFFIX)).open("xb")
        fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        writer = WARCWriter(file, gzip=True, warc_version=WARC_VERSION)
        info: dict[str, Any] = OrderedDict(
            software=f"crawler/{__version__} (warcio)",
            format="WARC File Format 1.1",
            conformsTo="https://iipc.github.io/warc-specifications/specifications/"
            "warc-format/warc-1.1/",
            robots="obey",
            description="Versions fetched by the incremental re-crawler; one gzip member "
            "per record; revisits use the identical-payload-digest profile.",
        )
        writer.write_record(writer.create_warcinfo_record(self._name, info))
        file.flush()
        self._file, self._writer = file, writer
        return file, writer

    def _current(self) -> tuple[IO[bytes], WARCWriter]:
        if self._file is not None and self._writer is not None:
            if self._file.tell() < self.max_bytes:
                return self._file, self._writer
            full, name = self._file, self._name
            self._file, self._writer = None, None
            if self._background is None:
                self._finish(full, name)
            else:
                self._background.submit(self._finish, full, name)
        return self._open_new()

    def close(self) -> None:
        """Close the open file: flush, fsync, rename without ``.open``; it is now immutable."""
        if self._file is None:
            return
        full, name = self._file, self._name
        self._file, self._writer = None, None
        self._finish(full, name)

    def _finish(self, file: IO[bytes], name: str) -> None:
        file.flush()
        os.fsync(file.fileno())
        (self.root / (name + OPEN_SUFFIX)).rename(self.root / name)
        file.close()  # after the rename: the lock holds until the file has its final name
        self.files_closed += 1

    def path_of(self, file: str) -> Path:
        return stored_path(self.root, file)

    # -- writing ----------------------------------------------------------------------------

    def _write(self, records: list[bytes]) -> tuple[int, int]:
        """Append records, each its own gzip member; the first one's offset and length.
        Flushed to the OS on return."""
        file, _ = self._current()
        start = file.tell()
        members = [gzip_bytes(record, self.gzip_level) for record in records]
        file.write(b"".join(members))
        file.flush()
        return start, len(members[0])

    def write_response(self, capture: Capture) -> StoredRecord:
        payload = capture.stored_payload
        digest = capture.payload_digest()
        record_id = new_record_id()
        date = warc_date(capture.fetched_at)
        warc_headers = [
            ("WARC-Record-ID", record_id),
            ("WARC-Date", date),
            ("WARC-Target-URI", capture.url),
            ("WARC-Payload-Digest", digest),
        ]
        if capture.truncated:
            warc_headers.append(("WARC-Truncated", "length"))
        elif not capture.body_read:
            warc_headers.append(("WARC-Truncated", "unspecified"))
        response = warc_record(RESPONSE, warc_headers, _http_response_head(capture) + payload,
                               "response")
        request = warc_record("request", [
            ("WARC-Record-ID", new_record_id()),
            ("WARC-Date", date),
            ("WARC-Target-URI", capture.url),
            ("WARC-Concurrent-To", record_id),
        ], _http_request_head(capture), "request")
        offset, length = self._write([response, request])
        return StoredRecord(RESPONSE, self._name, offset, length, record_id, digest,
                            len(payload), capture.url)

    def write_revisit(self, capture: Capture, original: Original) -> StoredRecord:
        record_id = new_record_id()
        # The headers as received (Content-Encoding too): they describe this exchange.
        head = _http_response_head(
            Capture(capture.url, capture.fetched_at, capture.status, capture.reason,
                    capture.response_headers, b"", body_read=False, wire_payload=b"")
        )
        revisit = warc_record(REVISIT, [
            ("WARC-Record-ID", record_id),
            ("WARC-Date", warc_date(capture.fetched_at)),
            ("WARC-Target-URI", capture.url),
            ("WARC-Refers-To", original.record_id),
            ("WARC-Profile", REVISIT_PROFILE),
            ("WARC-Refers-To-Target-URI", original.url),
            ("WARC-Refers-To-Date", warc_date(original.fetched_at)),
            ("WARC-Payload-Digest", original.payload_digest),
        ], head, "response")
        offset, length = self._write([revisit])
        return StoredRecord(REVISIT, self._name, offset, length, record_id,
                            original.payload_digest, 0, capture.url)

    # -- reading ----------------------------------------------------------------------------

    def read(self, file: str, offset: int) -> ReadRecord:
        return read_record(self.root, file, offset)

    def holds(self, file: str) -> bool:
        return file == self._name or stored_path(self.root, file).exists()


def stored_path(root: Path, file: str) -> Path:
    """The path of a stored file, whether closed or still open."""
    closed = root / file
    if closed.exists():
        return closed
    open_path = root / (file + OPEN_SUFFIX)
    if open_path.exists() or not closed.exists():  # not renamed in between
        return open_path
    return closed


def read_record(root: Path, file: str, offset: int) -> ReadRecord:
    """The record at ``offset`` of ``file`` under ``root`` (read-only: safe beside a writer)."""
    path = stored_path(root, file)
    if not path.exists():
        raise FileNotFoundError(f"{root / file} is gone (archived or deleted?)")
    with path.open("rb") as stream:
        stream.seek(offset)
        for record in ArchiveIterator(stream):
            return _as_read_record(record)
    raise ValueError(f"no WARC record at {file}:{offset}")


def _headers(headers: StatusAndHeaders | None) -> Headers:
    return () if headers is None else tuple((k, v) for k, v in headers.headers)


def _as_read_record(record: ArcWarcRecord) -> ReadRecord:
    http = record.http_headers
    status: int | None = None
    if http is not None and record.rec_type in (RESPONSE, REVISIT):
        code = http.get_statuscode()
        status = int(code) if code and code.isdigit() else None
    stored = record.raw_stream.read() if record.rec_type == RESPONSE else b""
    encoding = http.get_header("Content-Encoding") if http is not None else None
    return ReadRecord(record.rec_type, _headers(record.rec_headers), status, _headers(http),
                      decoded(stored, encoding), stored)


def decoded(payload: bytes, content_encoding: str | None) -> bytes:
    """A stored payload with its Content-Encoding undone (as stored if it cannot be)."""
    if not content_encoding or not payload:
        return payload
    try:
        decoder = CappedDecoder(content_encoding, READ_DECODED_CAP)
        return decoder.feed(payload) + decoder.finish()
    except (DecodeError, UnsupportedEncoding):
        return payload
