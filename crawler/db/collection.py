"""The collection's index in PostgreSQL: its rows written with a fetch, read back, checked
(``crawler.store.collect``, ``crawler.store.verify``, ``crawler.daemon.storage``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import asyncpg

from crawler.db.queries import QUERIES, row_as


@dataclass(frozen=True, slots=True)
class LastResponse:
    """A URL's newest stored response, as indexed."""

    fetched_at: float
    file: str
    offset: int
    record_id: str
    payload_digest: str
    # Its WARC-Target-URI, which a revisit names; None for a row indexed without one.
    url: str | None


@dataclass(frozen=True, slots=True)
class IndexRow:
    """One ``stored_records`` row as ``crawler verify`` checks it, with its URL."""

    id: int
    url_id: int
    host_id: int
    fetched_at: dt.datetime
    record_type: str
    warc_file: str
    warc_offset: int
    warc_length: int
    record_id: str
    payload_digest: str
    damaged: str | None  # why it was marked damaged; None while it reads back
    url: str


def index_row(row: asyncpg.Record) -> IndexRow:
    """A ``stored_records`` row joined with its URL (``verify_records``'s columns)."""
    return row_as(IndexRow, row)


@dataclass(frozen=True, slots=True)
class Marked:
    """What a repair changed: rows marked damaged, rows cleared, URLs made to refetch."""

    marked: int
    cleared: int
    urls: int


@dataclass(frozen=True, slots=True)
class Mark:
    """A row's damage as a check found it (``kind`` None: it reads back)."""

    id: int
    fetched_at: dt.datetime
    host_id: int
    kind: str | None


@lru_cache(maxsize=1)
def insert_stored_record() -> str:
    """The collection's rows alone, in a fetch's transaction that ``write_transition`` has
    already fenced (so the rows' ``lease`` is given as held). PostgreSQL runs a
    data-modifying CTE to completion whether or not the main query reads it."""
    return f"WITH lease AS (SELECT 1),\n{QUERIES['collection_rows']}\nSELECT 1"


async def write_rows(conn: asyncpg.Connection, stored: str, events: str) -> None:
    """Stored WARC records and change events (``collection_rows``: each a JSON array of
    rows by column), in the fetches' transaction, after its fence."""
    await conn.execute(insert_stored_record(), stored, events)


async def last_response(
    conn: asyncpg.Connection | asyncpg.Pool, url_id: int, host_id: int
) -> LastResponse | None:
    row = await conn.fetchrow(QUERIES["last_stored_response"], url_id, host_id)
    if row is None:
        return None
    return LastResponse(
        fetched_at=row["fetched_at"].timestamp(), file=row["warc_file"],
        offset=row["warc_offset"], record_id=row["record_id"],
        payload_digest=row["payload_digest"], url=row["target_uri"],
    )


async def register_warc_file(
    conn: asyncpg.Connection | asyncpg.Pool, name: str, machine: str, directory: str
) -> None:
    """File ``name`` opened on ``machine`` in ``directory``: where others find it."""
    await conn.execute(QUERIES["register_warc_file"], name, machine, directory)


async def index_rows_after(
    conn: asyncpg.Connection, after: tuple[str, int, int], limit: int, file: str | None
) -> list[IndexRow]:
    """Up to ``limit`` index rows after ``after`` (file, offset, id); only ``file``'s if given."""
    rows = await conn.fetch(QUERIES["verify_records"], *after, limit, file)
    return [index_row(row) for row in rows]


async def mark_damaged(conn: asyncpg.Connection, marks: Sequence[Mark]) -> Marked:
    """Each row's damage recorded (``kind`` None: cleared); a damaged row's URL forgets its
    validators and content hash, so that its next fetch stores a full response."""
    row = await conn.fetchrow(
        QUERIES["mark_damaged"], [m.id for m in marks], [m.fetched_at for m in marks],
        [m.host_id for m in marks], [m.kind for m in marks],
    )
    assert row is not None
    return row_as(Marked, row)


async def mark_damaged_at(
    conn: asyncpg.Connection | asyncpg.Pool, file: str, offset: int, kind: str
) -> None:
    """The record at ``file``:``offset`` marked unreadable (``kind``), as ``--repair`` does."""
    await conn.execute(QUERIES["mark_damaged_at"], file, offset, kind)
