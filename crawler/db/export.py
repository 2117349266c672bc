"""The statements of ``crawler export``: rows streamed from a server-side cursor, so memory
stays constant however large the frontier is."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg

from crawler.db.queries import QUERIES, row_as

EXPORTS = {"urls": "export_urls", "observations": "export_observations"}
PREFETCH_ROWS = 2000  # rows per round trip of the cursor


async def export_rows(conn: asyncpg.Connection, what: str, since: dt.datetime | None
                      ) -> AsyncIterator[dict[str, Any]]:
    """Every row of ``what`` (a key of EXPORTS) added or changed since ``since``, by column
    name, in one read-only transaction."""
    async with conn.transaction(readonly=True):
        async for row in conn.cursor(QUERIES[EXPORTS[what]], since, prefetch=PREFETCH_ROWS):
            yield dict(row.items())


@dataclass(frozen=True, slots=True)
class StoredCapture:
    """A record stored since the export's time (``original_file``: a revisit's original's)."""

    url: str
    warc_file: str
    original_file: str | None
    status: int | None
    fetched_at: dt.datetime


async def wacz_records(conn: asyncpg.Connection, since: dt.datetime | None
                       ) -> AsyncIterator[StoredCapture]:
    """The records stored since ``since``, in one read-only transaction."""
    async with conn.transaction(readonly=True):
        async for row in conn.cursor(QUERIES["export_wacz_records"], since,
                                     prefetch=PREFETCH_ROWS):
            yield row_as(StoredCapture, row)
