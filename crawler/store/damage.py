"""A stored record that cannot be read back as indexed: what is wrong, in one line.

``get``, ``diff``, ``versions`` and ``verify`` say it in one line with its own exit status
(``crawler.errors.DAMAGED``), never a traceback; ``crawler verify --repair`` marks the
index row with ``kind`` (``stored_records.damaged``).
"""

from __future__ import annotations

MISSING = "missing"  # the file is not in the store (deleted, archived, never synced)
TRUNCATED = "truncated"  # the file ends before the record does
CORRUPT = "corrupt"  # the bytes are not a readable WARC record (flipped bits, overwritten)
DIGEST = "digest"  # readable, but its payload is not the one indexed


class RecordDamaged(ValueError):
    """The record at ``file``:``offset`` cannot be read back as its index row says."""

    def __init__(self, kind: str, file: str, offset: int, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.file = file
        self.offset = offset
        self.message = message
