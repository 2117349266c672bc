"""Reading the collection (``crawler versions``, ``get``, ``diff``): a URL's stored versions,
the one current at a time, its bytes. A revisit's payload is its original response's (the
index row's ``refers_to``, a WARC-Record-ID).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from crawler.core.region import Region, effective_region
from crawler.core.textdiff import text_lines
from crawler.db.queries import QUERIES
from crawler.store.base import REVISIT, ReadRecord
from crawler.store.warc import check_digest, read_record


@dataclass(frozen=True, slots=True)
class Version:
    """One ``stored_records`` row."""

    id: int
    fetched_at: dt.datetime
    record_type: str
    status: int | None
    file: str
    offset: int
    length: int
    record_id: str
    payload_digest: str
    payload_bytes: int
    changed: bool | None
    refers_to: str | None  # a revisit's original: its WARC-Record-ID
    damaged: str | None = None  # marked by `crawler verify --repair` (crawler.store.damage)

    def as_json(self) -> dict[str, object]:
        return {
            "fetched_at": self.fetched_at.isoformat(),
            "status": self.status,
            "record_type": self.record_type,
            "changed": self.changed,
            "size_bytes": self.payload_bytes,
            "payload_digest": self.payload_digest,
            "warc_file": self.file,
            "warc_offset": self.offset,
            "warc_length": self.length,
            "damaged": self.damaged,
        }


async def versions(conn: asyncpg.Connection, url: str) -> list[Version]:
    """Every stored version of ``url``, oldest first."""
    return [
        Version(r["id"], r["fetched_at"], r["record_type"], r["status"], r["warc_file"],
                r["warc_offset"], r["warc_length"], r["record_id"], r["payload_digest"],
                r["payload_bytes"], r["changed"], r["refers_to"], r["damaged"])
        for r in await conn.fetch(QUERIES["url_versions"], url)
    ]


def version_at(stored: list[Version], at: dt.datetime | None) -> Version | None:
    """The version current at ``at``: the newest fetched at or before it (default: newest)."""
    current = None
    for version in stored:
        if at is None or version.fetched_at <= at:
            current = version
    return current


def payload_version(stored: list[Version], version: Version) -> Version:
    """The response that holds ``version``'s payload (itself, or a revisit's original)."""
    if version.record_type != REVISIT:
        return version
    original = next((v for v in stored if v.record_id == version.refers_to), None)
    if original is None:
        raise LookupError(f"revisit at {version.fetched_at} refers to no stored response")
    return original


@dataclass(frozen=True, slots=True)
class Body:
    """What ``crawler get`` prints: the record at the time, and the payload it stands for."""

    version: Version
    record: ReadRecord  # the record at the time (a revisit carries its own HTTP headers)
    payload: bytes  # decoded: Content-Encoding undone
    stored_payload: bytes  # as received and stored
    content_type: str | None

    def text_lines(self, region: Region | None = None) -> list[str]:
        return text_lines(self.payload, self.content_type, region)


def read_verified(root: Path, version: Version) -> ReadRecord:
    """``version``'s record, checked against its index row (payload digest and length):
    ``RecordDamaged`` when it is not what was indexed."""
    record = read_record(root, version.file, version.offset, version.length)
    check_digest(record, version.file, version.offset, version.payload_digest)
    return record


def load_body(root: Path, stored: list[Version], version: Version) -> Body:
    """The version's record and its payload, both verified against the index
    (``RecordDamaged``, ``LookupError`` for a revisit whose original is not indexed)."""
    record = read_verified(root, version)
    holder = payload_version(stored, version)
    payload_record = record if holder is version else read_verified(root, holder)
    return Body(version, record, payload_record.payload, payload_record.stored_payload,
                payload_record.http_header("Content-Type"))


def verify_version(root: Path, stored: list[Version], version: Version) -> None:
    """``RecordDamaged`` unless ``version`` and the response holding its payload read back
    as indexed."""
    load_body(root, stored, version)


async def elsewhere(conn: asyncpg.Connection, root: Path, file: str) -> str | None:
    """Where ``file`` lives when another machine, or another directory, wrote it (its
    ``warc_files`` row): ``file is on MACHINE at PATH``; None when it should be here (this
    machine and directory wrote it, or the index has no row for it)."""
    import socket

    row = await conn.fetchrow(QUERIES["warc_file_home"], file)
    if row is None:
        return None
    here, path = socket.gethostname(), Path(row["directory"]) / file
    if row["machine"] == here and Path(row["directory"]) == root.resolve():
        return None
    return (f"{file} is on machine {row['machine']} at {path}; this machine ({here}) "
            f"cannot see it under {root}: run the command there, or share the directory")


async def region_of(conn: asyncpg.Connection, url: str) -> Region:
    """The watched region in effect for ``url`` now (its own, else its window's): ``get --text``
    and ``diff`` show the text the fingerprint is computed from."""
    row = await conn.fetchrow(QUERIES["url_region"], url)
    if row is None:
        return Region()
    return effective_region(
        row["watch_css"], row["ignore_css"], row["site_watch_css"], row["site_ignore_css"]
    )


async def versions_and_region(
    conn: asyncpg.Connection, url: str
) -> tuple[list[Version], Region]:
    return await versions(conn, url), await region_of(conn, url)
