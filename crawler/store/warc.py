"""WARC 1.1 (ISO 28500) files: one gzip member per record, rotated by size.

Records are serialized here byte for byte as warcio's writer lays them out, at a quarter of
its CPU; warcio writes each file's warcinfo and reads everything (``warcio check`` passes).

A file being written is named ``....warc.gz.open`` and locked (flock) by its writer; closing
renames it, after which it is immutable. On start, an ``.open`` file no live writer holds is a
crashed writer's: its torn tail (a partial gzip member) is cut and the file is closed. Damage
followed by complete records is kept (index rows may point past it) and reported.

A failed write is cut back at once, so no record ever follows a torn one; writes are
unbuffered, so nothing is left in a buffer to be written behind a cut. ``sync`` fsyncs the
files (and the directory) and checks each is still at its path (a deleted directory leaves a
writer writing into an unlinked file), before the records' index rows commit.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import io
import logging
import os
import uuid
import zlib
from collections import OrderedDict
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
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
from crawler.store.damage import CORRUPT, DIGEST, MISSING, TRUNCATED, RecordDamaged
from crawler.store.health import DIRECTORY_GONE, StorageError, storage_error

log = logging.getLogger(__name__)

WARC_VERSION = "1.1"
SUFFIX = ".warc.gz"
OPEN_SUFFIX = ".open"
SCAN_CHUNK_BYTES = 1 << 20
GZIP_LEVEL = 6  # CRAWLER_WARC_GZIP_LEVEL's default
# A stored payload is decoded on reading up to this size (far above any fetch's cap).
READ_DECODED_CAP = 1 << 30
REVISIT_PROFILE = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
# WARC 1.1 6.7.3: the server said the content has not changed (an HTTP 304).
NOT_MODIFIED_PROFILE = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
# How a head states the payload's length (see ``_http_response_head``).
_LENGTH_AS_RECEIVED = -1


def warc_date(seconds: float) -> str:
    """WARC-Date with microseconds (WARC 1.1 allows fractions of a second)."""
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_record_id() -> str:
    return f"<urn:uuid:{uuid.uuid4()}>"


def complete_prefix(path: Path) -> int:
    """Bytes of ``path`` made of complete gzip members that each hold a WARC record (what
    follows is a torn tail: a member cut short by a crash)."""
    with path.open("rb") as file:
        return _complete_end(file, 0)


def _complete_end(file: io.BufferedReader, start: int, *, first_only: bool = False) -> int:
    """Where the complete gzip members holding WARC records from ``start`` on end (``start``
    when there is none); with ``first_only``, where the first one ends."""
    file.seek(start)
    good_end = position = start
    decompressor = zlib.decompressobj(31)
    head = b""
    while chunk := file.read(SCAN_CHUNK_BYTES):
        data = chunk
        while data:
            try:
                out = decompressor.decompress(data)
            except zlib.error:
                return good_end
            if len(head) < 5:
                head += out[: 5 - len(head)]
                if len(head) >= 5 and not head.startswith(b"WARC/"):
                    return good_end
            if not decompressor.eof:
                position += len(data)
                break
            position += len(data) - len(decompressor.unused_data)
            if not head.startswith(b"WARC/"):
                return good_end
            good_end = position
            if first_only:
                return good_end
            data = decompressor.unused_data
            decompressor = zlib.decompressobj(31)
            head = b""
    return good_end


def next_record_after(path: Path, start: int) -> int | None:
    """The offset of the first complete record (a gzip member holding a WARC record) after
    ``start``, or None: whether damage at ``start`` is a torn tail or lies mid-file."""
    magic = b"\x1f\x8b\x08"
    with path.open("rb") as file:
        position = start + 1
        while True:
            file.seek(position)
            chunk = file.read(SCAN_CHUNK_BYTES)
            if len(chunk) < len(magic):
                return None
            found = chunk.find(magic)
            if found < 0:
                position += len(chunk) - len(magic) + 1
                continue
            candidate = position + found
            if _complete_end(file, candidate, first_only=True) > candidate:
                return candidate
            position = candidate + 1


@dataclass(frozen=True, slots=True)
class Recovered:
    """A file a dead writer left open, now closed; ``damaged_at``: where damage that complete
    records follow begins (kept, not cut: index rows may point past it)."""

    name: str
    cut_bytes: int
    damaged_at: int | None


def recover(root: Path) -> list[Recovered]:
    """Close every ``.open`` file left by a dead writer, cutting a torn tail (never a byte
    before a complete record); what was found."""
    closed: list[Recovered] = []
    for path in sorted(root.glob("*" + SUFFIX + OPEN_SUFFIX)):
        with path.open("r+b") as file:
            try:
                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live writer's file
            size = path.stat().st_size
            good = complete_prefix(path)
            damaged_at = None
            cut = 0
            if good < size:
                if next_record_after(path, good) is None:
                    cut = size - good
                    log.warning("%s: torn tail of %d bytes cut after a crash", path.name, cut)
                    file.truncate(good)
                    file.flush()
                    os.fsync(file.fileno())
                else:
                    damaged_at = good
                    log.error("%s: damaged bytes at offset %d with complete records after "
                              "them: kept (run `crawler verify`)", path.name, good)
            final = path.with_name(path.name.removesuffix(OPEN_SUFFIX))
            if size - cut == 0 or (good == 0 and damaged_at is None):
                path.unlink()  # not even its warcinfo: nothing can point into it
            else:
                path.rename(final)
                closed.append(Recovered(final.name, cut, damaged_at))
        _sync_directory(root)
    return closed


def _sync_directory(root: Path) -> None:
    """fsync a directory: a file created, renamed or removed in it survives a power loss."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _line(name: str, value: str) -> bytes:
    """One header line; a CR or LF in a value (never sent by a server aiohttp accepts) would
    end the header early, so it becomes a space. Values keep the bytes received (aiohttp
    decodes them as UTF-8 with surrogate escapes)."""
    if "\r" in value or "\n" in value:
        value = value.replace("\r", " ").replace("\n", " ")
    return f"{name}: {value}\r\n".encode("utf-8", "surrogateescape")


def _http_response_head(capture: Capture, length: int | None) -> bytes:
    """The HTTP status line and headers as received: names as spelled, in order, duplicates
    kept. Only what no longer describes the stored bytes changes: Transfer-Encoding goes (the
    client undid the chunking); Content-Encoding goes when the payload is stored decoded (no
    ``wire_payload``); Content-Length says ``length``, in the place of the first one received
    (appended when none was), or goes (``length`` None: no payload stored), or stays as
    received (``_LENGTH_AS_RECEIVED``: a revisit, whose payload is its original's)."""
    status = f"HTTP/{capture.http_version} {capture.status} {capture.reason}".strip()
    lines = [status.encode("utf-8", "surrogateescape") + b"\r\n"]
    stated = False
    for name, value in capture.response_headers:
        lowered = name.lower()
        if lowered == "transfer-encoding":
            continue
        if lowered == "content-encoding" and capture.wire_payload is None:
            continue
        if lowered == "content-length" and length != _LENGTH_AS_RECEIVED:
            if length is None or stated:
                continue
            value, stated = str(length), True
        lines.append(_line(name, value))
    if length is not None and length != _LENGTH_AS_RECEIVED and not stated:
        lines.append(_line("Content-Length", str(length)))
    lines.append(b"\r\n")
    return b"".join(lines)


def _http_request_head(capture: Capture) -> bytes:
    """The request as sent: its target and headers as the HTTP client wrote them (Host
    first). A capture without them (written by hand) gets the URL's path and a Host."""
    parts = urlsplit(capture.url)
    target = capture.request_target or (
        (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    )
    headers = capture.request_headers
    if not any(name.lower() == "host" for name, _ in headers):
        headers = (("Host", parts.netloc), *headers)
    lines = [f"GET {target} HTTP/1.1\r\n".encode("utf-8", "surrogateescape")]
    lines += [_line(k, v) for k, v in headers]
    lines.append(b"\r\n")
    return b"".join(lines)


def warc_record(warc_type: str, warc_headers: list[tuple[str, str]], block: bytes,
                http_message: str, content_type: str | None = None) -> bytes:
    """One WARC 1.1 record, serialized as warcio's writer does (same header order, block
    digest over the whole block); ``warc_headers`` go between WARC-Type and the digests.
    The block is an HTTP message (``http_message``) unless ``content_type`` says otherwise;
    an empty block has no Content-Type."""
    lines = [b"WARC/1.1\r\n", _line("WARC-Type", warc_type)]
    lines += [_line(k, v) for k, v in warc_headers]
    lines.append(_line("WARC-Block-Digest", payload_digest(block)))
    if block:
        lines.append(_line("Content-Type",
                           content_type or f"application/http; msgtype={http_message}"))
    lines += [_line("Content-Length", str(len(block))), b"\r\n", block, b"\r\n\r\n"]
    return b"".join(lines)


def _ids(record_id: str, date: str, url: str, *more: tuple[str, str]) -> list[tuple[str, str]]:
    """The WARC headers every record starts with, then ``more``."""
    return [("WARC-Record-ID", record_id), ("WARC-Date", date), ("WARC-Target-URI", url), *more]


def _request_record(capture: Capture, concurrent_to: str, date: str) -> bytes:
    headers = _ids(new_record_id(), date, capture.url, ("WARC-Concurrent-To", concurrent_to))
    return warc_record("request", headers, _http_request_head(capture), "request")


def gzip_bytes(data: bytes, level: int = GZIP_LEVEL) -> bytes:
    """One gzip member at ``level`` (``CRAWLER_WARC_GZIP_LEVEL``; warcio's 9 costs far more
    CPU than 6 for barely smaller files). libdeflate, not zlib: a record is compressed whole
    (no streaming), much faster; ISA-L is faster still but makes markedly larger files."""
    return bytes(deflate.gzip_compress(data, level))


class WarcStore:
    """A ``RecordStore`` writing WARC files under ``root`` (not thread-safe: one writer)."""

    def __init__(
        self, root: Path, *, max_bytes: int, writer_name: str = "w", gzip_level: int = GZIP_LEVEL,
        fsync: bool = True,
    ) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.gzip_level = gzip_level
        self.fsync = fsync
        self.writer_name = "".join(c if c.isalnum() else "-" for c in writer_name)[:40]
        root.mkdir(parents=True, exist_ok=True)
        self.recovered = recover(root)
        self._file: io.FileIO | None = None
        self._name = ""
        self._size = 0  # the open file's length: where the next record goes
        self._serial = 0
        self._background: Executor | None = None
        # Records written (a generation ``sync`` reaches), and the files and directory
        # entries written since the last ``take_unsynced``.
        self.writes = 0
        self._unsynced: dict[str, io.FileIO] = {}
        self._directory_unsynced = False
        # Files found unlinked from their path while open (their directory was deleted):
        # no index row may point into them.
        self._lost: set[str] = set()
        self._unrenamed: list[str] = []  # closed files whose rename failed (kept ``.open``)
        # Records found unreadable by the fetch path (file, offset, damage kind), for the
        # daemon to mark in the index (crawler.daemon.storage).
        self.unreadable: list[tuple[str, int, str]] = []

    def set_background(self, executor: Executor) -> None:
        """Close full files on ``executor`` (their fsync can take seconds) while writing goes
        on in a new file; ``close`` stays synchronous."""
        self._background = executor

    # -- files ------------------------------------------------------------------------------

    def _warcinfo(self, name: str) -> bytes:
        buffer = io.BytesIO()
        writer = WARCWriter(buffer, gzip=True, warc_version=WARC_VERSION)
        info: dict[str, Any] = OrderedDict(
            software=f"crawler/{__version__} (warcio)",
            format="WARC File Format 1.1",
            conformsTo="https://iipc.github.io/warc-specifications/specifications/"
            "warc-format/warc-1.1/",
            robots="obey",
            description="Versions fetched by the incremental re-crawler; one gzip member "
            "per record; a 304 is a revisit of the server-not-modified profile (no block; "
            "its request and its header fields in records concurrent to it), an identical "
            "payload one of the identical-payload-digest profile.",
        )
        writer.write_record(writer.create_warcinfo_record(name, info))
        return buffer.getvalue()

    def _open_new(self) -> io.FileIO:
        self._serial += 1
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d%H%M%S%f")
        name = f"crawler-{stamp}-{self._serial:05d}-{self.writer_name}{SUFFIX}"
        path = self.root / (name + OPEN_SUFFIX)
        try:
            # Unbuffered: a failed write leaves no bytes behind in a buffer.
            file = io.FileIO(path, "xb")
        except OSError as exc:
            raise storage_error(exc, f"cannot create a WARC file in {self.root}") from exc
        fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._file, self._name, self._size = file, name, 0
        self._directory_unsynced = True
        try:
            self._append(self._warcinfo(name))
        except StorageError:
            if self._file is file:  # cut back to nothing: a file without its warcinfo goes
                self._file = None
                # An empty .open file left behind: the next start's recovery removes it.
                with contextlib.suppress(OSError):
                    path.unlink()
                self._retire(file)
            raise
        return file

    def _current(self) -> io.FileIO:
        if self._file is not None:
            if self._size < self.max_bytes:
                return self._file
            self.abandon()
        return self._open_new()

    def abandon(self) -> None:
        """Take no more records in the open file (full, or after a fault): it is closed like
        a full one, on the background thread when there is one."""
        if self._file is None:
            return
        full, name = self._file, self._name
        self._file = None
        if self._background is None:
            self._finish_logged(full, name)
        else:
            self._background.submit(self._finish_logged, full, name)

    def close(self) -> None:
        """Close the open file: fsync, rename without ``.open``; it is now immutable."""
        if self._file is None:
            return
        full, name = self._file, self._name
        self._file = None
        self._finish(full, name)

    def _retire(self, file: io.FileIO) -> None:
        """Close a file without renaming it, after any ``sync`` that may be using it."""
        if self._background is None:
            file.close()
        else:
            self._background.submit(file.close)

    def _finish_logged(self, file: io.FileIO, name: str) -> None:
        try:
            self._finish(file, name)
        except OSError as exc:
            log.error("closing %s failed (%s); it stays %s", name, exc, name + OPEN_SUFFIX)

    def _finish(self, file: io.FileIO, name: str) -> None:
        open_path = self.root / (name + OPEN_SUFFIX)
        try:
            os.fsync(file.fileno())
            if not self._linked(file, name):
                self._lost.add(name)
                log.error("%s was removed while being written: its unindexed records are "
                          "lost", name)
                return
            try:
                open_path.rename(self.root / name)
            except OSError:
                self._unrenamed.append(name)
                raise
            _sync_directory(self.root)
        finally:
            file.close()  # after the rename: the lock holds until the file has its final name

    def retry_renames(self) -> None:
        """Give files whose closing rename failed (a read-only directory) their final name."""
        still: list[str] = []
        for name in self._unrenamed:
            try:
                (self.root / (name + OPEN_SUFFIX)).rename(self.root / name)
            except FileNotFoundError:
                pass  # renamed or removed by someone else
            except OSError:
                still.append(name)
        self._unrenamed = still

    def _linked(self, file: io.FileIO, name: str) -> bool:
        """Whether ``file`` is still the file at its ``.open`` path (not unlinked, its
        directory not deleted or replaced)."""
        mine = os.fstat(file.fileno())
        try:
            there = os.stat(self.root / (name + OPEN_SUFFIX))
        except FileNotFoundError:
            return False
        return mine.st_nlink > 0 and (mine.st_ino, mine.st_dev) == (there.st_ino, there.st_dev)

    # -- durability -------------------------------------------------------------------------

    def take_unsynced(self) -> tuple[int, list[tuple[str, io.FileIO]], bool]:
        """What ``sync_files`` must make durable for every record written so far (the
        writer's side: call it where records are written)."""
        taken = self.writes, list(self._unsynced.items()), self._directory_unsynced
        self._unsynced.clear()
        self._directory_unsynced = False
        return taken

    def sync_files(self, files: list[tuple[str, io.FileIO]], directory: bool) -> None:
        """fsync ``files`` (and the directory) and check each is still at its path; raises
        ``StorageError`` when a record in them cannot be relied on. Safe on another thread
        than the writer's: a file is closed only on that thread (``set_background``)."""
        for name, file in files:
            if name in self._lost:
                raise StorageError(DIRECTORY_GONE, f"{name} was removed from {self.root} "
                                   "while being written")
            if file.closed:
                continue  # closed by _finish: synced and checked there
            try:
                if self.fsync:
                    os.fsync(file.fileno())
                linked = self._linked(file, name)
            except OSError as exc:
                raise storage_error(exc, f"syncing {name}") from exc
            if not linked:
                self._lost.add(name)
                raise StorageError(DIRECTORY_GONE, f"{name} was removed from {self.root} "
                                   "while being written (directory deleted?)")
        if directory and self.fsync:
            try:
                _sync_directory(self.root)
            except OSError as exc:
                raise storage_error(exc, f"syncing the directory {self.root}") from exc

    def probe(self, size: int) -> str | None:
        """Whether a record of ``size`` bytes could be written and synced now: None, or the
        reason it could not (``StorageError`` raised). A vanished directory is recreated;
        the open file is checked to be still at its path."""
        recreated = None
        if not self.root.is_dir():
            try:
                self.root.mkdir(parents=True, exist_ok=True)
            except FileExistsError as exc:  # something else took its place
                raise StorageError(DIRECTORY_GONE, f"{self.root} is not a directory") from exc
            except OSError as exc:
                raise storage_error(exc, f"cannot recreate {self.root}") from exc
            log.warning("recreated the WARC directory %s, which had vanished", self.root)
            recreated = f"recreated {self.root}"
        file = self._file
        if file is not None and not file.closed and not self._linked(file, self._name):
            self._lost.add(self._name)
            raise StorageError(DIRECTORY_GONE, f"{self._name} was removed from {self.root} "
                               "while being written (directory deleted?)")
        path = self.root / f".probe-{self.writer_name}"
        try:
            with io.FileIO(path, "w") as probe:
                data = memoryview(bytes(size))
                while data:
                    data = data[os.write(probe.fileno(), data):]
                if self.fsync:
                    os.fsync(probe.fileno())
        except OSError as exc:
            raise storage_error(exc, f"cannot write in {self.root}") from exc
        finally:
            with contextlib.suppress(OSError):
                path.unlink()
        self.retry_renames()
        return recreated

    # -- writing ----------------------------------------------------------------------------

    def _append(self, data: bytes) -> int:
        """Append ``data`` to the open file whole, or not at all: a failed write is cut back
        at once (no record ever follows a torn one). Its offset."""
        file = self._file
        assert file is not None
        start = self._size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(file.fileno(), view):]
        except OSError as exc:
            self._undo(file, start)
            raise storage_error(exc, f"writing {self._name}") from exc
        self._size = start + len(data)
        self.writes += 1
        self._unsynced[self._name] = file
        return start

    def _undo(self, file: io.FileIO, start: int) -> None:
        """Cut a partial write back to ``start``; if that fails too, the file takes no more
        records and keeps its ``.open`` name, so that the next start's recovery cuts it."""
        try:
            os.ftruncate(file.fileno(), start)
            os.lseek(file.fileno(), start, os.SEEK_SET)
        except OSError as exc:
            log.error("%s: a partial write could not be cut back (%s); the file takes no "
                      "more records", self._name, exc)
            self._file = None
            self._retire(file)

    def _write(self, records: list[bytes]) -> tuple[int, int]:
        """Append records, each its own gzip member; the first one's offset and length.
        In the OS on return (``sync`` makes them durable)."""
        members = [gzip_bytes(record, self.gzip_level) for record in records]
        self._current()
        start = self._append(b"".join(members))
        return start, len(members[0])

    def write_response(self, capture: Capture) -> StoredRecord:
        payload = capture.stored_payload
        digest = capture.payload_digest()
        record_id = new_record_id()
        date = warc_date(capture.fetched_at)
        warc_headers = _ids(record_id, date, capture.url, ("WARC-Payload-Digest", digest))
        if capture.truncated:
            warc_headers.append(("WARC-Truncated", "length"))
        elif not capture.body_read:
            warc_headers.append(("WARC-Truncated", "unspecified"))
        head = _http_response_head(capture, len(payload) if capture.body_read else None)
        response = warc_record(RESPONSE, warc_headers, head + payload, "response")
        offset, length = self._write([response, _request_record(capture, record_id, date)])
        return StoredRecord(RESPONSE, self._name, offset, length, record_id, digest,
                            len(payload), capture.url)

    def write_revisit(self, capture: Capture, original: Original) -> StoredRecord:
        """A revisit that replay tools (pywb, wabac.js) resolve to ``original`` by
        WARC-Refers-To-Target-URI and WARC-Refers-To-Date (pywb also by payload digest), then
        serve the revisit's HTTP headers (else the original's) with the original's payload.

        A 304 gets the server-not-modified profile and no block (WARC 1.1 6.7.3): as a block,
        the 304 is what replay would serve (pywb takes any 3xx revisit for a redirect and
        never loads the original). Its header fields go to a metadata record concurrent to it.
        WARC-Payload-Digest is the original's (pywb narrows its lookup by it). An identical
        payload (a 200) gets the identical-payload-digest profile, its block this exchange's
        status and headers."""
        record_id = new_record_id()
        date = warc_date(capture.fetched_at)
        not_modified = capture.status == 304
        block = b"" if not_modified else _http_response_head(capture, _LENGTH_AS_RECEIVED)
        revisit = warc_record(REVISIT, _ids(
            record_id, date, capture.url,
            ("WARC-Refers-To", original.record_id),
            ("WARC-Profile", NOT_MODIFIED_PROFILE if not_modified else REVISIT_PROFILE),
            ("WARC-Refers-To-Target-URI", original.url),
            ("WARC-Refers-To-Date", warc_date(original.fetched_at)),
            ("WARC-Payload-Digest", original.payload_digest),
        ), block, "response")
        records = [revisit, _request_record(capture, record_id, date)]
        if not_modified:
            # application/warc-fields, which replay tools do not index as a capture (an
            # application/http record at this URI would be replayed as the page).
            fields = b"".join(_line(k, v) for k, v in capture.response_headers)
            headers = _ids(new_record_id(), date, capture.url, ("WARC-Concurrent-To", record_id))
            records.append(warc_record("metadata", headers, fields, "",
                                       content_type="application/warc-fields"))
        offset, length = self._write(records)
        return StoredRecord(REVISIT, self._name, offset, length, record_id,
                            original.payload_digest, 0, capture.url)

    # -- reading ----------------------------------------------------------------------------

    def note_unreadable(self, file: str, offset: int, exc: Exception) -> None:
        """The record at ``file``:``offset`` could not be read back (``exc``)."""
        kind = exc.kind if isinstance(exc, RecordDamaged) else CORRUPT
        self.unreadable.append((file, offset, kind))

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


def open_stored(root: Path, file: str) -> io.BufferedReader:
    """``file`` opened for reading, closed or still open: the closed name, then the open one,
    then the closed one again (renamed in between), so that a file being closed is never
    reported missing. ``RecordDamaged`` (missing) when it is in neither place."""
    closed, open_path = root / file, root / (file + OPEN_SUFFIX)
    for path in (closed, open_path, closed):
        try:
            return path.open("rb")
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise RecordDamaged(MISSING, file, 0,
                                f"{path} cannot be opened ({exc.strerror or exc})") from exc
    raise RecordDamaged(MISSING, file, 0,
                        f"{root / file} is missing (archived or deleted?)")


def read_record(root: Path, file: str, offset: int, length: int | None = None) -> ReadRecord:
    """The record at ``offset`` of ``file`` under ``root`` (read-only: safe beside a writer);
    ``RecordDamaged`` when it cannot be read: the file missing, shorter than the record
    (``length``, the index row's, when given), or its bytes not a WARC record."""
    with open_stored(root, file) as stream:
        size = os.fstat(stream.fileno()).st_size
        end = offset + (length or 1)
        if end > size:
            raise RecordDamaged(
                TRUNCATED, file, offset,
                f"{file}:{offset}: the record ends at byte {end} but the file has {size}: "
                "the file was truncated")
        stream.seek(offset)
        try:
            for record in ArchiveIterator(stream):
                return _as_read_record(record)
        except Exception as exc:  # warcio, zlib and decoders raise many kinds: all mean this
            raise RecordDamaged(
                CORRUPT, file, offset,
                f"{file}:{offset}: the record is corrupt ({type(exc).__name__}: "
                f"{' '.join(str(exc).split())[:120]})") from exc
    raise RecordDamaged(CORRUPT, file, offset, f"{file}:{offset}: no WARC record there")


def check_digest(record: ReadRecord, file: str, offset: int, expected: str) -> None:
    """``RecordDamaged`` (digest) unless ``record`` holds the payload its index row names: a
    response's bytes hash to ``expected``, a revisit names it."""
    named = record.warc_header("WARC-Payload-Digest")
    wrong, found = named != expected, f"the record names {named}"
    if record.record_type == RESPONSE:
        actual = payload_digest(record.stored_payload)
        wrong, found = wrong or actual != expected, f"the record's payload hashes to {actual}"
    if wrong:
        raise RecordDamaged(DIGEST, file, offset, f"{file}:{offset}: payload digest mismatch: "
                            f"indexed {expected}, {found}")


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
