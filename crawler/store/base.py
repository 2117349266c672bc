"""The record store's interface: what the fetch path writes and the commands read.

``RecordStore`` is blocking and single-threaded by design (one writer appends to one open
file at a time); ``crawler.store.durable`` runs it for the event loop. A backend stores a
response or a revisit and returns where it put it; ``read`` gives the record back from there.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Protocol

RESPONSE = "response"
REVISIT = "revisit"

Headers = tuple[tuple[str, str], ...]


def sha1_label(sha1: bytes) -> str:
    """A SHA-1 digest as WARC digests are written: ``sha1:`` and its base32."""
    return "sha1:" + base64.b32encode(sha1).decode("ascii")


def payload_digest(payload: bytes) -> str:
    return sha1_label(hashlib.sha1(payload).digest())


@dataclass(frozen=True, slots=True)
class Capture:
    """One HTTP exchange to store: what was asked and what came back.

    ``payload`` is the entity body decoded (Content-Encoding undone); ``wire_payload`` the
    entity as received, when the server encoded it. A response record stores the entity as
    received, as Heritrix and warcio do (Content-Encoding kept, chunking undone). Only a body
    cut at the size cap is stored decoded (its encoded stream would not decode).
    """

    url: str  # WARC-Target-URI: the URL the final response came from
    fetched_at: float  # POSIX seconds: WARC-Date
    status: int
    reason: str
    response_headers: Headers
    payload: bytes
    request_headers: Headers = ()
    truncated: bool = False  # the body was cut at the size cap (WARC-Truncated: length)
    body_read: bool = True  # False for answers whose body the fetcher does not read (404)
    wire_payload: bytes | None = None
    # The SHA-1 of ``stored_payload`` when the caller has it already (not hashed again).
    payload_sha1: bytes | None = None
    # The request line's target and the headers as sent (Host first, as aiohttp sends it);
    # when not given, the target is the URL's path and query, and a Host header leads.
    request_target: str = ""
    http_version: str = "1.1"  # the answer's, for its status line

    @property
    def stored_payload(self) -> bytes:
        """The bytes a response record holds (and its payload digest covers)."""
        return self.payload if self.wire_payload is None else self.wire_payload

    def payload_digest(self) -> str:
        """WARC-Payload-Digest of ``stored_payload``."""
        if self.payload_sha1 is not None:
            return sha1_label(self.payload_sha1)
        return payload_digest(self.stored_payload)


@dataclass(frozen=True, slots=True)
class Original:
    """The stored response a revisit refers to."""

    url: str
    fetched_at: float
    record_id: str
    payload_digest: str


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """Where a record went and what identifies it (one ``stored_records`` row's facts)."""

    record_type: str
    file: str  # relative to the store's root
    offset: int
    length: int
    record_id: str
    payload_digest: str
    payload_bytes: int
    # WARC-Target-URI: a redirect hop's or a redirect's target's is not the URL's.
    url: str


@dataclass(frozen=True, slots=True)
class ReadRecord:
    """A record read back: its WARC headers, the HTTP status and headers, and the payload
    (decoded: what the server meant, Content-Encoding undone) and ``stored_payload`` (the
    record's bytes, which its payload digest covers)."""

    record_type: str
    warc_headers: Headers
    status: int | None
    http_headers: Headers
    payload: bytes
    stored_payload: bytes

    def warc_header(self, name: str) -> str | None:
        lowered = name.lower()
        return next((v for k, v in self.warc_headers if k.lower() == lowered), None)

    def http_header(self, name: str) -> str | None:
        lowered = name.lower()
        return next((v for k, v in self.http_headers if k.lower() == lowered), None)


class RecordStore(Protocol):
    def write_response(self, capture: Capture) -> StoredRecord:
        """Store a response (and its request); the bytes are flushed when this returns."""

    def write_revisit(self, capture: Capture, original: Original) -> StoredRecord:
        """Store a revisit of ``original`` (identical payload); flushed when this returns."""

    def read(self, file: str, offset: int) -> ReadRecord:
        """The record stored at ``offset`` of ``file``."""

    def holds(self, file: str) -> bool:
        """Whether ``file`` is still in the store (not archived or deleted)."""

    def close(self) -> None:
        """Close the open file (it becomes immutable)."""
