"""What a change event says: the JSON object that goes into the outbox and to the webhook.

Pure. Which fetches raise an event is ``crawler.core.transition.change_event``'s decision.
"""

from __future__ import annotations

from typing import Any

from crawler.core.textdiff import LineChanges

# Every kind of event in the outbox: changes of a page (crawler.core.transition.ChangeKind)
# and alerts (crawler.core.alerts), in the order `crawler changes --help` lists them.
CHANGE_KINDS = ("changed", "gone", "back")
ALERT_KINDS = ("failing", "recovered", "region_missing")
EVENT_KINDS = CHANGE_KINDS + ALERT_KINDS


def simhash_hex(value: int | None) -> str | None:
    """A 64-bit fingerprint as 16 hex digits (JSON numbers lose precision past 2**53)."""
    return None if value is None else f"{value:016x}"


def event_payload(
    *, kind: str, url: str, fetched_at_iso: str, status: int | None,
    previous_simhash: int | None, simhash: int | None, distance: int | None,
    lines: LineChanges | None, warc_file: str | None, warc_offset: int | None,
) -> dict[str, Any]:
    """The event JSON (docs/COLLECTION.md, "Change events"); the outbox adds its ``id``."""
    return {
        "kind": kind,
        "url": url,
        "fetched_at": fetched_at_iso,
        "status": status,
        "previous_simhash": simhash_hex(previous_simhash),
        "simhash": simhash_hex(simhash),
        "distance": distance,
        "added": list(lines.added) if lines else [],
        "removed": list(lines.removed) if lines else [],
        # Word by word, numbers included: a changed price shows both prices, with context.
        "words": [
            {"before": w.before, "removed": w.removed, "added": w.added, "after": w.after}
            for w in (lines.words if lines else ())
        ],
        "diff_truncated": bool(lines and lines.truncated),
        "warc_file": warc_file,
        "warc_offset": warc_offset,
    }
