"""Check every index row against its bytes, and mark the rows whose records are damaged.

Used by ``crawler verify [--repair]`` and by the daemon's start (a file its recovery found
damaged). Marking a row damaged takes it out of what revisits refer to and diffs start from,
and makes its URL's next fetch unconditional, so that it stores a full response again; a
marked row that reads back again (its file restored) is cleared.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from crawler.db.collection import IndexRow, Mark, index_rows_after, mark_damaged
from crawler.store.damage import MISSING, RecordDamaged
from crawler.store.warc import check_digest, read_record, stored_path

PAGE_ROWS = 2000


@dataclass
class Verified:
    """What a verification found and did."""

    rows: int = 0
    files: int = 0
    damaged: Counter[str] = field(default_factory=Counter)  # rows by kind of damage
    missing_files: dict[str, int] = field(default_factory=dict)  # file -> its rows
    marked: int = 0
    cleared: int = 0
    urls_refetched: int = 0

    @property
    def damaged_rows(self) -> int:
        return sum(self.damaged.values())


def check_row(root: Path, row: IndexRow) -> RecordDamaged | None:
    """The damage of one index row's record, or None when it reads back as indexed."""
    try:
        record = read_record(root, row.warc_file, row.warc_offset, row.warc_length)
        check_digest(record, row.warc_file, row.warc_offset, row.payload_digest)
        if record.warc_header("WARC-Record-ID") != row.record_id:
            raise RecordDamaged("digest", row.warc_file, row.warc_offset,
                                f"{row.warc_file}:{row.warc_offset}: another record "
                                f"is there ({record.warc_header('WARC-Record-ID')}, indexed "
                                f"{row.record_id})")
    except RecordDamaged as exc:
        return exc
    return None


async def verify_collection(
    conn: asyncpg.Connection,
    root: Path,
    *,
    repair: bool,
    file: str | None = None,
    report: Callable[[str], None] = lambda line: None,
) -> Verified:
    """Check the index rows (of ``file``, or all) against ``root``; ``report`` gets one line
    per damaged record (one per missing file); ``repair`` marks (and clears) rows."""
    found = Verified()
    after: tuple[str, int, int] = ("", -1, -1)
    current_file: str | None = None
    present = True
    while rows := await index_rows_after(conn, after, PAGE_ROWS, file):
        after = (rows[-1].warc_file, rows[-1].warc_offset, rows[-1].id)
        marks: list[Mark] = []
        for row in rows:
            found.rows += 1
            name = row.warc_file
            if name != current_file:
                current_file = name
                found.files += 1
                present = stored_path(root, name).exists()
            if not present:
                damage: RecordDamaged | None = RecordDamaged(
                    MISSING, name, row.warc_offset, f"{root / name} is missing")
                found.missing_files[name] = found.missing_files.get(name, 0) + 1
            else:
                damage = await asyncio.to_thread(check_row, root, row)
                if damage is not None:
                    report(f"{damage.message} (index row of {row.url} at "
                           f"{row.fetched_at.isoformat()})")
            if damage is not None:
                found.damaged[damage.kind] += 1
            kind = None if damage is None else damage.kind
            if kind != row.damaged:
                marks.append(Mark(row.id, row.fetched_at, row.host_id, kind))
        if repair and marks:
            done = await mark_damaged(conn, marks)
            found.marked += done.marked
            found.cleared += done.cleared
            found.urls_refetched += done.urls
    for name, count in found.missing_files.items():
        report(f"{root / name}: the file is missing (deleted or archived?): {count} index "
               f"row{'s' if count != 1 else ''} point into it")
    return found
